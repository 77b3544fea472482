"""The ``MetadataStore`` contract, shared by the embedded LMDB store and the etcd store.

Paths are ``/``-separated strings (``/ledgers/17``). Values are bytes. Every value has a version
that increases on each write; every coordinating write is a compare-and-set on that version, so
two brokers racing to take a topic, or two recoveries racing to close a ledger, cannot both win.

Ephemeral keys are bound to the store's session: they vanish when the session ends (the process
closes the store, or dies and its lease expires), which is how bookie registration and bundle
ownership disappear with their owner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

# Expected-version sentinels for ``put`` / ``delete``.
ANY_VERSION = -2  # write whatever is there
MUST_NOT_EXIST = -1  # create only


@dataclass(frozen=True, slots=True)
class Stat:
    version: int
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Versioned:
    value: bytes
    stat: Stat

    @property
    def version(self) -> int:
        return self.stat.version


@dataclass(frozen=True, slots=True)
class Notification:
    """A change under a watched prefix: ``kind`` is ``"put"`` or ``"delete"``."""

    kind: str
    path: str


Watcher = Callable[[Notification], None]


def check_path(path: str) -> str:
    """Paths are absolute, ``/``-separated, with no empty segment and no trailing slash."""
    if not path.startswith("/") or (path != "/" and (path.endswith("/") or "//" in path)):
        raise ValueError(f"invalid metadata path {path!r}")
    return path


def is_under(path: str, prefix: str) -> bool:
    """True if ``path`` is ``prefix`` or below it: ``/a`` covers ``/a/b`` but not ``/ab`` (the
    rule a ``watch`` on ``prefix`` uses to pick the changes it reports)."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


class MetadataStore(Protocol):
    async def get(self, path: str) -> Versioned | None:
        """The value and version at ``path``, or None."""
        ...

    async def put(
        self, path: str, value: bytes, expected_version: int = ANY_VERSION, *, ephemeral: bool = False
    ) -> Stat:
        """Write ``value``. With ``expected_version`` >= 0 the write succeeds only if the current
        version equals it; ``MUST_NOT_EXIST`` creates only. Raises ``BadVersion`` when the
        condition fails (``AlreadyExists`` is a ``BadVersion`` case too: a create over an
        existing key raises ``BadVersion``). Missing parents are implicit: there are no nodes
        without values, ``children`` derives them from the paths below."""
        ...

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        """Delete ``path``. Raises ``NotFound`` if absent, ``BadVersion`` if the version differs."""
        ...

    async def children(self, path: str) -> list[str]:
        """Sorted names of the direct children of ``path`` (derived from the keys below it)."""
        ...

    async def exists(self, path: str) -> bool: ...

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        """Call ``callback`` (on the event loop) after each put/delete at or under ``prefix``,
        including deletions of ephemeral keys when their session ends. Returns an unsubscribe
        function."""
        ...

    async def increment(self, path: str) -> int:
        """Atomically add one to a counter (stored as decimal text) and return the new value;
        used to allocate ledger ids."""
        ...

    async def close(self) -> None:
        """End the session: ephemeral keys of this session are deleted."""
        ...
