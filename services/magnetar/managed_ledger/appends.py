"""Appending to a managed ledger: the add path, its direct callbacks, and roll-over.

Only the last ledger is ever written. Appends are pipelined: the broker calls ``add_entry_with``
for each entry without waiting for the previous one, and the ledger handle acknowledges them in
entry order. Roll-over stops new appends, waits for the in-flight ones to drain, closes the old
ledger and opens the next, so that acknowledgements stay in order across ledgers too.

An add's outcome is handed on by direct callbacks (``AddedListener``), not futures, so that a
broker writes the producer's receipt in the same turn of the event loop as the bookie's answer;
``add_entry`` wraps the same path in a future for callers that await.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from magnetar.ledger.write_handle import WriteHandle
from magnetar.managed_ledger.clock import policy_time
from magnetar.managed_ledger.counts import LedgerCounts
from magnetar.managed_ledger.ledger_list import LedgerInfo
from magnetar.managed_ledger.message_counts import MessageCounts
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.reads import LedgerReads
from magnetar.managed_ledger.trimming import LedgerTrimming
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, PersistenceError

# The managed ledger logs under one name, whichever of its modules holds the code, so that a log
# filter set for it keeps catching every line.
log = logging.getLogger("magnetar.managed_ledger.ledger")

#: ``listener(position, None)`` once an add is durable, ``listener(None, error)`` if it failed.
AddedListener = Callable[[Position | None, BaseException | None], None]


class LedgerAppends(LedgerTrimming, MessageCounts, LedgerReads):
    """The add path and roll-over (module docstring). A confirmed add enters the cache
    (``LedgerReads``); a closed ledger's counts are stored (``MessageCounts``); a roll-over
    schedules a trim (``LedgerTrimming``)."""

    # Since when the current ledger is written, and what was issued to it (roll-over triggers).
    _current_created: float
    _issued: int
    _issued_bytes: int
    # Adds issued and not yet acknowledged; ``_drained`` is set when there are none.
    _inflight: int
    _drained: asyncio.Event
    _rollover_task: asyncio.Task[None] | None
    # The current ledger failed: the next add rolls over first.
    _ledger_failed: bool
    # The last roll-over's failure, and the back-off before the next attempt (``close`` cuts it short).
    _roll_error: Exception | None
    _roll_failures: int
    _retry_roll_at: float
    _wake_roll: asyncio.Event
    # Adds waiting for a roll-over: (data, precondition, messages, listener), issued in order.
    _queue: deque[tuple[bytes, Callable[[], BaseException | None] | None, int, AddedListener]]
    # Called after every confirmed add (``add_listener``).
    _listeners: list[Callable[[], None]]

    # ------------------------------------------------------------------ the next ledger (open, roll-over)
    async def _create_ledger(self) -> None:
        c = self.config
        handle = await self._ledgers.create(
            c.ensemble_size, c.write_quorum, c.ack_quorum, custom={"managed-ledger": self.name}
        )
        self._current = handle
        self._current_created = time.monotonic()
        self._issued = 0
        self._issued_bytes = 0
        info = LedgerInfo(handle.ledger_id, 0, 0)
        self._infos[handle.ledger_id] = info
        self._counts[handle.ledger_id] = LedgerCounts()
        self._ids.append(handle.ledger_id)
        await self._write_meta()

    # ------------------------------------------------------------------ writing
    def add_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after every confirmed add (dispatchers wake up on it)."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    async def add_entry(
        self,
        data: bytes,
        *,
        precondition: Callable[[], BaseException | None] | None = None,
        messages: int = 1,
    ) -> Position:
        """Append one entry holding ``messages`` messages; returns its position once it is
        durable on Qa bookies (``add_entry_with``, awaited). A caller that stops waiting while the
        add is queued behind a roll-over keeps it from being issued."""
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

        def still_wanted() -> BaseException | None:
            if fut.cancelled():
                return asyncio.CancelledError()
            return precondition() if precondition is not None else None

        self.add_entry_with(data, partial(settle, fut), precondition=still_wanted, messages=messages)
        return await fut

    def add_entry_with(
        self,
        data: bytes,
        listener: AddedListener,
        *,
        precondition: Callable[[], BaseException | None] | None = None,
        messages: int = 1,
    ) -> None:
        """Append one entry holding ``messages`` messages; ``listener(position, None)`` once it is
        durable on Qa bookies, or ``listener(None, error)``. The listener runs directly from the
        ledger's delivery, so a broker writes the producer's receipt in the same turn of the
        event loop as the bookie's answer; listeners are called in entry order.

        Entries are issued to the ledger strictly in call order. An add that arrives while a
        roll-over is under way joins a FIFO queue that the roll-over drains synchronously, so
        a later add can never overtake one that was waiting. ``precondition`` is checked at the
        moment of issue (the broker passes its producer fence, so a send that waited behind a
        roll-over is not stored once an earlier send of the same producer has failed). A refusal
        at the moment of the call (closed, the precondition) raises here instead.

        After a failed roll-over, adds wait in the queue for the next attempt, which comes after a
        back-off: failing each at once had every producer resend at once (it retries the
        ``PersistenceError``), thousands of times a second for as long as the bookies were full.
        """
        if self._closed:
            raise AlreadyClosed(f"managed ledger {self.name} is closed")
        if self._queue or self._rolling or self._should_roll():
            if not self._rolling:
                self._start_rollover()
            self._queue.append((data, precondition, messages, listener))
            return
        self._issue(data, precondition, messages, listener)

    def _issue(
        self,
        data: bytes,
        precondition: Callable[[], BaseException | None] | None,
        messages: int,
        listener: AddedListener,
    ) -> None:
        """Hand one entry to the current ledger, synchronously (this fixes its entry id)."""
        if precondition is not None:
            refused = precondition()
            if refused is not None:
                raise refused
        if self._closed or self._current is None:
            raise AlreadyClosed(f"managed ledger {self.name} is closed")
        handle = self._current
        try:
            handle.append_with(data, partial(self._added, handle, data, listener))
        except Exception:
            if not self._closed:
                self._ledger_failed = True  # the handle's failure is sticky: the next add moves on
            raise
        # Entry ids are fixed here, in call order: the counts follow the same order.
        self._counts[handle.ledger_id].append(messages)
        self._issued += 1
        self._issued_bytes += len(data)
        self._inflight += 1
        self._drained.clear()

    def _added(
        self, handle: WriteHandle, data: bytes, listener: AddedListener, entry_id: int, exc: BaseException | None
    ) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._drained.set()
        if exc is not None:
            if handle is self._current and not self._closed:
                # The handle's failure is sticky: the next add moves to a new ledger.
                self._ledger_failed = True
            listener(None, exc)
            return
        pos = Position(handle.ledger_id, entry_id)
        info = self._infos.get(handle.ledger_id)
        if info is not None:
            if entry_id + 1 > info.entries:
                info.entries = entry_id + 1
            info.size += len(data)
        self._cache_put(pos, data)
        # The producer's receipt first, then the dispatchers: they may deliver the entry at once
        # (Subscription.on_added), and its receipt should not wait behind that.
        try:
            listener(pos, None)
        finally:
            for callback in list(self._listeners):
                try:
                    callback()
                except Exception:  # a dispatcher's bug must not cost the others the entry
                    log.exception("add listener of %s failed", self.name)

    def _drain_queue(self) -> None:
        """Issue queued adds in order after a roll-over (or fail them all if it failed)."""
        while self._queue:
            if self._roll_error is not None or self._closed:
                error = self._roll_error or AlreadyClosed(f"managed ledger {self.name} is closed")
                waiting = list(self._queue)
                self._queue.clear()
                for _, _, _, listener in waiting:
                    listener(None, error)
                return
            if self._should_roll():
                self._start_rollover()  # the rest wait for the next ledger, still in order
                return
            data, precondition, messages, listener = self._queue.popleft()
            try:
                self._issue(data, precondition, messages, listener)
            except BaseException as exc:  # the precondition may say CancelledError: the caller left
                listener(None, exc)

    def _should_roll(self) -> bool:
        """Roll before an add would overfill the current ledger (counted at issue, not at ack,
        so that a burst of pipelined adds cannot overshoot the limit), once the ledger is at least
        ``min_ledger_seconds`` old; until then it grows past the limit, as Pulsar's does."""
        c = self.config
        if self._ledger_failed:
            return True
        age = time.monotonic() - self._current_created
        full = self._issued >= c.max_entries_per_ledger or self._issued_bytes >= c.max_bytes_per_ledger
        return (full and age >= c.min_ledger_seconds) or (self._issued > 0 and age >= c.max_ledger_seconds)

    @property
    def _rolling(self) -> bool:
        """A roll-over is under way (adds queue behind it)."""
        return self._rollover_task is not None and not self._rollover_task.done()

    def _start_rollover(self) -> None:
        self._rollover_task = asyncio.get_running_loop().create_task(self._rollover())

    async def _rollover(self) -> None:
        backoff = self._retry_roll_at - time.monotonic()
        if self._roll_error is not None and backoff > 0:
            with contextlib.suppress(TimeoutError):  # a timer: the back-off, cut short by ``close``
                await asyncio.wait_for(self._wake_roll.wait(), backoff)
        if self._closed:
            self._drain_queue()  # fails what waited: the ledger closed meanwhile
            return
        self._roll_error = None
        try:
            await self._drained.wait()
            old = self._current
            if old is not None and old.ledger_id in self._infos:
                try:
                    await old.close()
                except Exception as exc:
                    # A failed ledger may not close (fenced, bookies gone); what was acknowledged
                    # is known, and the next owner's recovery settles the rest.
                    log.warning("closing ledger %s of %s failed: %s", old.ledger_id, self.name, exc)
                self._infos[old.ledger_id].entries = old.last_add_confirmed + 1
                self._infos[old.ledger_id].closed_at = policy_time()
                await self._store_counts(old.ledger_id)
            await self._create_ledger()
            self._ledger_failed = False
            self._roll_failures = 0
            log.info("managed ledger %s rolled over to ledger %s", self.name, self._ids[-1])
            self.schedule_trim()
        except Exception as exc:
            # The old ledger is closed or broken either way: no add may go to it any more.
            self._ledger_failed = True
            self._roll_error = as_persistence_error(exc, f"managed ledger {self.name} could not open a new ledger")
            self._roll_failures += 1
            delay = min(2.0, 0.1 * 2 ** min(self._roll_failures, 5))
            self._retry_roll_at = time.monotonic() + delay
            log.warning("roll-over of %s failed (retry in %.1fs): %s", self.name, delay, exc)
        finally:
            # May start the next roll-over (a new task) for adds that still do not fit.
            self._drain_queue()


def as_persistence_error(exc: Exception, what: str) -> Exception:
    """A failure of the store beneath (the metadata store's own disk full, an I/O error) as
    Pulsar's broker reports every managed-ledger failure: ``PersistenceError``, which a producer
    retries (it re-attaches and resends) until its send timeout, instead of an ``UnknownError``
    that fails the send and leaves its registration refusing every later one."""
    if isinstance(exc, MagnetarError):
        return exc
    return PersistenceError(f"{what}: {exc}")


def settle(fut: asyncio.Future[Position], pos: Position | None, exc: BaseException | None) -> None:
    """An ``AddedListener`` that resolves ``fut`` (unless it is done already: its caller left)."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        assert pos is not None
        fut.set_result(pos)
