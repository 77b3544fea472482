"""The thread the blocking client's event loop runs on, and how callers hand it work.

Every producer, consumer and reader of one blocking ``Client`` lives on one asyncio loop, run by
one daemon thread (``LoopThread``). A blocking call submits a coroutine and waits for its outcome
(``run``, with the rules of ``waiting.py``: a signal interrupts the wait, a dead loop ends it);
``receive`` / ``read_next`` wait for a delivery instead (``take``, on the consumer's
``blocked_receivers``). Neither may be called from the loop thread itself: a callback that blocked
there would wait for itself. Closing the client stops the loop and tells every object it made
(``owned``) that it is closed, so that later calls raise ``AlreadyClosed`` at once, and waits for
the thread to end: no thread of the client outlives its ``close()``.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from magnetar import event_loop
from magnetar.client.blocking.waiting import wait_future
from magnetar.client.consumer.consumer import Consumer
from magnetar.client.message import Message
from magnetar.protocol.errors import AlreadyClosed

__all__ = ["LoopThread", "Owned"]

T = TypeVar("T")


class Owned(Protocol):
    """A blocking producer, consumer or reader: told when its client is closed."""

    def _client_closed(self) -> None: ...


class LoopThread:
    """A daemon thread running the event loop that every object of one ``Client`` lives on."""

    def __init__(self) -> None:
        self.loop = event_loop.new_event_loop()  # uvloop when installed
        self._thread = threading.Thread(target=self._main, name="magnetar-client-loop", daemon=True)
        self._thread.start()
        # Set when the client is closed: every later ``run`` raises AlreadyClosed,
        # and the producers, consumers and readers in ``owned`` are told (``_client_closed``).
        self.closed = False
        self.owned: weakref.WeakSet[Owned] = weakref.WeakSet()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        # Stopped (``stop``): the loop's default executor, whose worker threads the standard
        # library's loop starts for DNS lookups, ends with it, so no thread outlives the client.
        self.loop.run_until_complete(self.loop.shutdown_default_executor())

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _may_block(self) -> None:
        """Raise unless this thread may wait for the loop: not from the loop (a callback), not once closed."""
        if self.in_loop_thread():
            raise RuntimeError("blocking client calls cannot be made from a client callback")
        if self.closed:
            raise AlreadyClosed("client is closed")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            self._may_block()
        except BaseException:
            coro.close()
            raise
        return wait_future(asyncio.run_coroutine_threadsafe(coro, self.loop), self.alive)

    def take(self, consumer: Consumer, timeout_millis: int | None) -> Message:
        """The next message of ``consumer``'s queue, waiting on the loop thread's delivery
        (``consumer.blocked_receivers``): the blocking ``receive`` once nothing is queued."""
        self._may_block()
        return consumer._blocked.take(consumer._queue, lambda: consumer._error, timeout_millis, self.alive)

    def stop(self) -> None:
        self.closed = True
        for owned in list(self.owned):
            owned._client_closed()
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
            self.loop.close()
