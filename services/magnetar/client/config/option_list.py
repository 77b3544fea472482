"""One option list of the client (``Client(...)``, ``create_producer``, ``subscribe``...), defined once.

Why a table: written by hand, each option is spelled out six times (the blocking signature and
its forward, the asyncio signature and its forward, the config class, the argument checks), and a
forward by position lets two swapped booleans pass mypy. So every list is one ``OptionList`` of
``Option``s, in pulsar-client's order, each with
its name, its default, pulsar-client's argument check (``config.arguments``) and where each flavour
takes it:

- ``BLOCKING``: the blocking facade's signature (``magnetar.Client``);
- ``ASYNCIO``: the asyncio client's (``magnetar.asyncio.Client``), which defaults as the blocking
  one unless the option says otherwise (``asyncio_default``: a documented difference);
- ``CONFIG``: the config object the asyncio client builds from the call (``ConsumerConfig``,
  ``ProducerConfig``, ``ClientSettings``), with the asyncio flavour's defaults.

The signatures stay written out, so that ``inspect.signature``, editors and mypy see real
parameters; ``tests/client/test_option_lists.py`` proves that they and the config objects agree
with the table, name for name, in order and default for default. What the table replaces is the
copying: the checks run from it (``check``), and every forward, blocking to asyncio and asyncio to
its config object, passes by name what the table lists for the receiving side (``forward``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["REQUIRED", "Check", "Flavour", "Option", "OptionList", "Place"]

# A parameter without a default (``inspect``'s own marker, so signatures compare directly).
REQUIRED: Any = inspect.Parameter.empty
# ``check(value, name)`` raises pulsar-client's ``ValueError`` for a wrong argument.
Check = Callable[[Any, str], None]


class Flavour(Enum):
    """Who takes an option list: the blocking facade, the asyncio client, or its config object."""

    BLOCKING = "blocking"
    ASYNCIO = "asyncio"
    CONFIG = "config"


class Place(Enum):
    """How a flavour takes an option."""

    POSITIONAL = "positional"  # positional or keyword, in the list's order
    KEYWORD = "keyword"  # keyword-only (after ``*``)
    ABSENT = "absent"  # not at all


class _Same:
    def __repr__(self) -> str:
        return "<same>"


_SAME: Any = _Same()


@dataclass(frozen=True)
class Option:
    """One option: its name, default and check, and how each flavour takes it.

    The defaults of ``place`` suit pulsar-client's own options: positional in both flavours and
    keyword-only in the config object. Magnetar's extensions are keyword-only everywhere
    (``extension``).
    """

    name: str
    default: Any = REQUIRED
    check: Check | None = None
    blocking: Place = Place.POSITIONAL
    asyncio: Place = Place.POSITIONAL
    config: Place = Place.KEYWORD
    # The asyncio flavour's default (and its config object's) where it differs on purpose.
    asyncio_default: Any = _SAME

    def place(self, flavour: Flavour) -> Place:
        if flavour is Flavour.BLOCKING:
            return self.blocking
        if flavour is Flavour.ASYNCIO:
            return self.asyncio
        return self.config

    def default_in(self, flavour: Flavour) -> Any:
        if flavour is Flavour.BLOCKING or self.asyncio_default is _SAME:
            return self.default
        return self.asyncio_default

    @property
    def differs(self) -> bool:
        """Whether the asyncio flavour defaults otherwise than the blocking one (a documented difference)."""
        return self.asyncio_default is not _SAME


def extension(name: str, default: Any, check: Check | None = None, *, config: Place = Place.KEYWORD) -> Option:
    """Magnetar's option beyond pulsar-client: keyword-only in both flavours (and in the config, if it has it)."""
    return Option(name, default, check, blocking=Place.KEYWORD, asyncio=Place.KEYWORD, config=config)


class OptionList:
    """The options of one call, in pulsar-client's order (see the module docstring)."""

    def __init__(self, call: str, options: Sequence[Option]) -> None:
        names = [o.name for o in options]
        if len(set(names)) != len(names):
            raise ValueError(f"{call}: an option is listed twice")
        self.call = call
        self._options = tuple(options)
        self._by_name = {o.name: o for o in options}

    def __iter__(self) -> Iterator[Option]:
        return iter(self._options)

    def __getitem__(self, name: str) -> Option:
        return self._by_name[name]

    def parameters(self, flavour: Flavour) -> list[Option]:
        """The options ``flavour`` takes, as its signature lists them: positional ones first, then keyword-only."""
        positional = [o for o in self._options if o.place(flavour) is Place.POSITIONAL]
        keyword = [o for o in self._options if o.place(flavour) is Place.KEYWORD]
        return positional + keyword

    def check(self, arguments: Mapping[str, Any]) -> None:
        """pulsar-client's checks of a call's ``arguments`` (its ``locals()``), in the list's order.

        An option the caller does not take (not in ``arguments``) is not checked.
        """
        for option in self._options:
            if option.check is not None and option.name in arguments:
                option.check(arguments[option.name], option.name)

    def forward(self, arguments: Mapping[str, Any], to: Flavour, **overrides: Any) -> dict[str, Any]:
        """The keyword arguments for ``to``: each option it takes, by name, from ``arguments``.

        ``arguments`` is the calling flavour's ``locals()``; an option the caller does not take is
        left to ``to``'s default. ``overrides`` replace values (they must name options ``to`` takes).
        """
        taken = [o.name for o in self._options if o.place(to) is not Place.ABSENT]
        unknown = set(overrides).difference(taken)
        if unknown:
            raise TypeError(f"{self.call}: the {to.value} flavour takes no {sorted(unknown)}")
        forwarded = {name: arguments[name] for name in taken if name in arguments}
        forwarded.update(overrides)
        return forwarded
