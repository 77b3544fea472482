"""The event loop Magnetar's servers and its blocking client's thread run on: uvloop when installed.

uvloop (the ``fast`` extra) runs the same asyncio programs with its event loop written in Cython
on libuv: each loop iteration, callback and socket read costs less Python, which shortens a
message's trip when one entry is one message (README, "Benchmarks", has the figure). As with the peers'
Python clients, it is an optional dependency: without it, or with ``MAGNETAR_EVENT_LOOP=asyncio``,
the standard library's loop runs instead, with the same behaviour.

A top-level module rather than part of a layer: the CLI (servers) and the client both use it, and
it imports nothing of Magnetar.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "MAGNETAR_EVENT_LOOP"  # "uvloop" (the default when installed) or "asyncio"
CHOICES = ("uvloop", "asyncio")


def chosen() -> str:
    """The loop new loops get: ``MAGNETAR_EVENT_LOOP`` if set, else uvloop when it imports."""
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted and wanted not in CHOICES:
        raise ValueError(f"{ENV}={wanted!r}: expected one of {', '.join(CHOICES)}")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ValueError(f"{ENV}=uvloop but uvloop is not installed: pip install 'magnetar[fast]'") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of new event loops of the chosen kind (for ``asyncio.Runner``)."""
    if chosen() == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def kind(loop: asyncio.AbstractEventLoop) -> str:
    """``"uvloop"`` or ``"asyncio"``: which loop ``loop`` is (what the tests check)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
