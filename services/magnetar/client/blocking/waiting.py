"""How a blocking call of the synchronous client waits for the loop thread, and how it stops waiting.

Every blocking call (``send``, ``create_producer``...) hands work to the client's loop thread and
waits for its outcome (``receive`` and ``read_next`` wait for a delivery instead, in
``consumer.blocked_receivers``, with the same rules). Two things must end that wait besides the outcome:

- a signal: pulsar-client checks for signals every 100 ms while it waits and raises ``Interrupted``
  when a handler raised (Ctrl-C), so ``receive()`` in a script stops within a fraction of a second.
  Python already wakes a waiting lock for a signal and raises the handler's ``KeyboardInterrupt``;
  we turn that into ``Interrupted`` (as pulsar-client does), and the loop-side work is
  cancelled so that it cannot, for example, take a message nobody will get;
- the loop thread going away (``Client.close`` / ``shutdown``, or a bug that raised on it): the
  caller gets ``AlreadyClosed`` instead of waiting forever, which is what ``alive`` is polled for.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

from magnetar.client.consumer.blocked_receivers import POLL_SECONDS
from magnetar.protocol.errors import AlreadyClosed, Interrupted

__all__ = ["POLL_SECONDS", "wait_event", "wait_future"]

T = TypeVar("T")


def wait_future(fut: concurrent.futures.Future[T], alive: Callable[[], bool]) -> T:
    """The result of ``fut``; ``Interrupted`` on a signal, ``AlreadyClosed`` if the loop dies first."""
    try:
        while True:
            try:
                return fut.result(POLL_SECONDS)
            except concurrent.futures.TimeoutError:
                if not alive() and not fut.done():
                    fut.cancel()
                    raise AlreadyClosed("the client was closed while waiting") from None
    except KeyboardInterrupt:
        fut.cancel()
        raise Interrupted("interrupted by a signal while waiting") from None


def wait_event(done: threading.Event, alive: Callable[[], bool]) -> None:
    """Wait for ``done``; ``Interrupted`` on a signal, ``AlreadyClosed`` if the loop dies first."""
    try:
        while not done.wait(POLL_SECONDS):
            if not alive() and not done.is_set():
                raise AlreadyClosed("the client was closed while waiting")
    except KeyboardInterrupt:
        raise Interrupted("interrupted by a signal while waiting") from None
