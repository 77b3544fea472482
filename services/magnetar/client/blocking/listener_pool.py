"""The client's message listener threads, shared by every consumer and reader with a listener.

pulsar-client runs ``message_listener`` and ``reader_listener`` callbacks on a pool of
``message_listener_threads`` threads owned by the ``Client`` (the C++ client's listener executors):
each consumer is given one of them, round robin, and all its messages are handed to its listener
on that thread, one at a time and in order. So a listener that blocks holds up the other consumers
that share its thread, and a client with one listener thread (the default) calls all its listeners
one after the other. ``ListenerPool`` does the same, so that a program written for pulsar-client
sees the same threading.

Each listener is fed by a ``Pump``: a task on the client's event loop that takes the next message
(the consumer's ``receive`` on the loop, so permits flow as for any receive) together with those
already waiting in the receive queue (at most ``HANDOFF`` at once), hands them to its thread as one
job, and waits until the listener has returned from the last of them before taking more. Handing
over a run of messages at once rather than one at a time spares two thread switches per message
(a run of 1 ran the listener path at about a sixth of ``receive()``'s rate). A consumer's messages
therefore never pile up beyond one run outside its receive queue, and flow control works as usual.
``pause`` stops the pump from taking messages (they stay in the receive queue); the messages it
was already waiting for or handing over when paused are held, and go to the listener after
``resume``. Once ``pause`` returns, the listener is called at most once more, for a message whose
call was already starting on its thread. Threads start when the first listener is given one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.client.message import Message
from magnetar.protocol.errors import MagnetarError

log = logging.getLogger(__name__)

_Job = Callable[[], None] | None

#: The most messages a pump hands to its thread in one job.
HANDOFF = 256


class _Worker:
    """One listener thread: runs the jobs given to it in order; ``None`` stops it."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def _main(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()


class ListenerPool:
    """``threads`` listener threads shared by one client's listeners (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int = 1) -> None:
        self._loop = loop
        self._workers: list[_Worker | None] = [None] * max(1, threads)
        self._next = itertools.count()
        self._pumps: set[Pump] = set()
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def size(self) -> int:
        return len(self._workers)

    def _worker(self) -> _Worker:
        slot = next(self._next) % len(self._workers)
        worker = self._workers[slot]
        if worker is None:
            worker = self._workers[slot] = _Worker(f"magnetar-listener-{slot}")
        return worker

    def start(
        self,
        take: Callable[[], Awaitable[Message]],
        give: Callable[[Message], Any],
        ready: Callable[[], int] | None = None,
    ) -> Pump:
        """Feed ``give`` (called on a pool thread) with what ``take`` (awaited on the loop) returns,
        until ``take`` raises (the consumer or reader was closed) or the pump is stopped.

        ``ready`` (on the loop) says how many messages ``take`` would return without waiting; with
        it, those are handed over in the same job as the one awaited.
        """
        with self._lock:
            if self._stopped:
                raise RuntimeError("the client's listener threads are stopped")
            pump = Pump(self, self._loop, self._worker(), take, give, ready)
            self._pumps.add(pump)
        asyncio.run_coroutine_threadsafe(pump.start(), self._loop).result()
        return pump

    def _forget(self, pump: Pump) -> None:
        with self._lock:
            self._pumps.discard(pump)

    def stop(self) -> None:
        """Stop every pump and let every thread finish the listener call it is in (client close)."""
        with self._lock:
            self._stopped = True
            pumps, self._pumps = list(self._pumps), set()
            workers = [w for w in self._workers if w is not None]
        for pump in pumps:
            pump.stop()
        for worker in workers:
            worker.stop()
        current = threading.current_thread()
        for worker in workers:
            if worker.thread is not current:
                worker.thread.join()


class Pump:
    """Hands one consumer's (or reader's) messages to its listener on its pool thread, one at a time."""

    def __init__(
        self,
        pool: ListenerPool,
        loop: asyncio.AbstractEventLoop,
        worker: _Worker,
        take: Callable[[], Awaitable[Message]],
        give: Callable[[Message], Any],
        ready: Callable[[], int] | None = None,
    ) -> None:
        self._pool = pool
        self._ready = ready
        self._loop = loop
        self._worker = worker
        self._take = take
        self._give = give
        self._lock = threading.Lock()
        self._paused = False
        self._resumed: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # The message handed to the pool thread (the first of its run until the thread reaches it)
        # whose listener call has not returned yet.
        self.in_flight: Message | None = None

    @property
    def thread(self) -> threading.Thread:
        """The pool thread this pump's listener runs on."""
        return self._worker.thread

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def pause(self) -> None:
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            waiter, self._resumed = self._resumed, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_release, waiter)

    def stop(self) -> None:
        """Stop taking messages (from any thread); a listener call under way finishes."""
        try:
            self._loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # the loop is closed: the task went with it
            pass

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _while_paused(self) -> None:
        with self._lock:
            waiter = self._resumed = self._loop.create_future() if self._paused else None
        if waiter is not None:
            await waiter

    def _is_paused(self) -> bool:
        with self._lock:
            return self._paused

    async def _run(self) -> None:
        held: list[Message] = []  # taken from the consumer, not yet given to the listener
        try:
            while True:
                await self._while_paused()  # paused: messages stay in the receive queue
                if not held:
                    try:
                        held.append(await self._take())
                    except (MagnetarError, RuntimeError):  # closed (AlreadyClosed), or the loop is going
                        return
                    ready = self._ready
                    if ready is not None and not self._is_paused():
                        while len(held) < HANDOFF and ready() > 0:
                            held.append(await self._take())  # queued already: returns without waiting
                    await self._while_paused()  # paused while waiting for them: held until resumed
                done: asyncio.Future[list[Message]] = self._loop.create_future()
                self.in_flight = held[0]
                self._worker.submit(self._job(held, done))
                held = await done  # what the listener did not get because the pump was paused
        finally:
            self.in_flight = None
            self._pool._forget(self)

    def _job(self, msgs: list[Message], done: asyncio.Future[list[Message]]) -> Callable[[], None]:
        def job() -> None:
            left: list[Message] = []
            try:
                for index, msg in enumerate(msgs):
                    if index and self._is_paused():
                        left = msgs[index:]
                        break
                    self.in_flight = msg
                    try:
                        self._give(msg)
                    except Exception:
                        log.exception("message listener raised")
            finally:
                self.in_flight = None
                try:
                    self._loop.call_soon_threadsafe(_release, done, left)
                except RuntimeError:  # the client's loop is closed
                    pass

        return job


def _release(fut: asyncio.Future[Any], value: Any = None) -> None:
    if not fut.done():
        fut.set_result(value)
