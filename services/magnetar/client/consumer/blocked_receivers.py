"""Threads of the blocking client waiting in ``receive()``/``read_next()``, woken by the loop thread directly.

A blocking receive that finds the consumer's queue empty could hand a coroutine to the client's
loop thread (``run_coroutine_threadsafe``) and wait for its future: one wake-up of the loop thread
to start the task, an asyncio future for the task to await, a task step once a message came, and
a ``concurrent.futures`` hand-over back to the caller. At a steady 5,000 msg/s the queue is empty
at nearly every call, so that chain would stand between every message and the application.

Here the caller registers a held lock and sleeps on it; the loop thread, having queued a delivery,
releases it. Registration touches only a deque (its operations are atomic under the GIL), so the
loop thread is not woken at all to start the wait. The order of the two sides makes a lost wake-up
impossible: the caller registers *then* looks at the queue again; the loop thread queues *then*
looks for sleepers. Whichever comes second sees the other's step.

The rest of what a blocking call owes its caller is kept (as in ``blocking/waiting.py``): the
wait is cut into ``POLL_SECONDS`` slices so that a signal raises ``Interrupted`` and a dead loop
thread raises ``AlreadyClosed``.

It lives with the consumer, not with the blocking facade, because the consumer's delivery is what
wakes the sleepers: the consumer's queue must not depend on the facade built on top of it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from magnetar.protocol.errors import AlreadyClosed, Interrupted, MagnetarError, Timeout

__all__ = ["POLL_SECONDS", "BlockedReceivers"]

T = TypeVar("T")
# How often a waiting call looks whether the loop thread is still there (pulsar-client: 100 ms).
POLL_SECONDS = 0.1


class BlockedReceivers:
    """The held locks of the threads blocked on one consumer's queue, oldest first."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: deque[threading.Lock] = deque()

    def __bool__(self) -> bool:
        return bool(self._locks)

    def wake(self, n: int = 1) -> None:
        """Wake up to ``n`` sleepers (any thread: a ``Lock`` may be released by another thread)."""
        locks = self._locks
        for _ in range(n):
            try:
                locks.popleft().release()
            except IndexError:
                return

    def wake_all(self) -> None:
        """Wake every sleeper: the consumer failed or closed, and each must see it."""
        self.wake(len(self._locks))

    def take(
        self,
        queue: deque[T],
        error: Callable[[], MagnetarError | None],
        timeout_millis: int | None,
        alive: Callable[[], bool],
        poll_seconds: float = POLL_SECONDS,
    ) -> T:
        """The next item of ``queue``, waiting for a delivery if it is empty.

        Raises the consumer's ``error()`` once the queue is empty and it has one (closed, or its
        topic deleted), ``Timeout`` after ``timeout_millis``, ``AlreadyClosed`` if the loop thread
        is gone, and ``Interrupted`` when a signal handler raised while waiting. ``poll_seconds``
        is how often ``alive`` is asked (tests make it long, so that a lost wake-up shows as a hang
        rather than as a 100 ms delay).
        """
        limit = None if timeout_millis is None else timeout_millis / 1000.0
        started = time.monotonic()
        lock = threading.Lock()
        lock.acquire()
        registered = False  # whether ``lock`` is on the list (a signal may come at any point)
        try:
            while True:
                try:
                    item = queue.popleft()
                except IndexError:
                    pass
                else:
                    if queue and self._locks:  # more came than woke receivers: pass the wake-up on
                        self.wake()
                    return item
                exc = error()
                if exc is not None:
                    raise exc
                wait = poll_seconds
                if limit is not None:
                    remaining = started + limit - time.monotonic()
                    if remaining <= 0:
                        raise Timeout(f"no message received within {limit}s")
                    wait = min(wait, remaining)
                self._locks.append(lock)
                registered = True
                if queue or error() is not None:  # it came between the look above and registering
                    self._leave(lock)
                    registered = False
                    continue
                if lock.acquire(timeout=wait):
                    registered = False  # woken: ``wake`` took it off the list
                    continue
                self._leave(lock)
                registered = False
                if not alive():
                    raise AlreadyClosed("the client was closed while waiting")
        except BaseException as exc:
            if registered:
                self._leave(lock)
            if queue and self._locks:  # a receiver leaving without its message hands the wake-up on
                self.wake()
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted("interrupted by a signal while waiting") from None
            raise

    def _leave(self, lock: threading.Lock) -> None:
        """Stop sleeping on ``lock``; if the loop thread already took it to wake it, absorb that wake-up."""
        try:
            self._locks.remove(lock)
        except ValueError:
            # Taken by ``wake``: its release follows the pop at once. Wait for it, so that the lock
            # is held again for the next round.
            lock.acquire(timeout=POLL_SECONDS)
