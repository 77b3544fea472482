"""Group commit: one writer thread turns every queued write into one transaction and one sync.

Why: an fsync costs ~2 ms here whatever the transaction holds, so one fsync per add would cap a
bookie at ~500 adds/s. Instead every write (add, fence, delete, restore) is queued to ONE writer
thread, which drains everything queued into one write transaction, commits it once (the store is
opened synced: the commit returns after the data and the meta page are on disk), and only then
resolves the futures of all those writes with a single ``loop.call_soon_threadsafe``. An add is
therefore acknowledged only once it is durable, and the batch grows by itself under load.

With the journal (``journal_overlay.py``) the writes reach this thread already acknowledged; it
gathers them for ``lmdb_interval`` so that one commit carries many journal syncs, records in the
same transaction the journal position they reach, and retries a failed commit every second (the
overlay keeps the writes readable, the journal keeps them safe).

Threads: ``queue``, ``handed``, ``in_lmdb`` and ``urgent`` are shared under ``cond``; everything
else belongs to the writer thread, which reports back to the loop only through the owner's
``_resolve`` and ``_applied`` (scheduled on the op's loop) and the flags it sets
(``pending_failure``, the read-only mode's ``full_in_writer``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from magnetar.bookie.journal import Journal
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.bookie.storage.entry_format import LedgerState
from magnetar.bookie.storage.kv import KeyValueStorage
from magnetar.bookie.storage.read_only import ReadOnlyMode, is_enospc
from magnetar.bookie.storage.writes import KvWrites, Outcome, WriteOp
from magnetar.protocol.errors import MagnetarError, PersistenceError

log = logging.getLogger(__name__)


class CommitOwner(Protocol):
    """The storage the writer thread works for (``BookieStorage``). Its two loop-side entry
    points keep their private names: they are the storage's, and are looked up at each call."""

    @property
    def failed(self) -> str | None: ...

    @property
    def closing(self) -> bool: ...

    def _resolve(self, items: list[Outcome]) -> None: ...

    def _applied(self, batch: list[WriteOp]) -> None: ...


class GroupCommit:
    """The writer thread and its queue. ``start`` once the store is ready; ``stop`` to drain it."""

    def __init__(
        self,
        owner: CommitOwner,
        kv: KeyValueStorage[Any],
        writes: KvWrites,
        mode: ReadOnlyMode,
        directory: Path,
        metrics: BoundBookieMetrics | None,
        *,
        max_ops: int,
        max_bytes: int,
        lmdb_interval: float,
    ) -> None:
        self._owner = owner
        self._kv = kv
        self._writes = writes
        self._mode = mode
        self._dir = directory
        self._metrics = metrics
        self._max_ops = max_ops
        self._max_bytes = max_bytes
        self._lmdb_interval = lmdb_interval
        self.queue: collections.deque[WriteOp] = collections.deque()
        self.cond = threading.Condition()
        #: Journal mode: the journal whose writes this thread brings into the store (set before ``start``).
        self.journal: Journal | None = None
        #: Why the store must stop serving, found by this thread; the loop fails the storage with it.
        self.pending_failure: str | None = None
        #: Write transactions committed and operations they carried (group-commit evidence).
        self.commits = 0
        self.ops_committed = 0
        self.handed = 0  # journaled writes handed to this thread, and those it has in the store (under cond)
        self.in_lmdb = 0
        self.urgent = 0  # callers of ``wait_in_lmdb`` waiting: the thread commits at once
        self._thread = threading.Thread(target=self._run, name="magnetar-bookie-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        """Commit everything queued, then end the thread (new writes are refused by the owner)."""
        with self.cond:
            self.queue.append(WriteOp("stop", 0))
            self.cond.notify()
        await asyncio.to_thread(self._thread.join)

    def hand_over(self, done: list[WriteOp]) -> None:
        """Journal mode, on the loop: these writes are acknowledged; bring them into the store."""
        with self.cond:
            self.queue.extend(done)
            self.handed += len(done)
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                if self.journal is not None and self._lmdb_interval > 0:
                    # Journal mode: the writes are acknowledged already; gathering them for an
                    # interval makes one LMDB commit (two fsyncs) of many, not one of every sync.
                    self.cond.wait_for(
                        lambda: self.urgent > 0 or self.queue[-1].kind == "stop" or len(self.queue) >= self._max_ops,
                        self._lmdb_interval,
                    )
                batch: list[WriteOp] = []
                size = 0
                while self.queue and len(batch) < self._max_ops and size < self._max_bytes:
                    op = self.queue.popleft()
                    batch.append(op)
                    size += len(op.value)
            stop = batch[-1].kind == "stop"
            if stop:
                batch.pop()
            if batch:
                if self.journal is not None:
                    self._commit_journaled(batch)
                else:
                    self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[WriteOp]) -> None:
        outcomes: list[tuple[Any, BaseException | None]] = []
        started = time.perf_counter()
        writes = self._writes
        try:
            with self._kv.begin(write=True) as txn:
                states: dict[int, LedgerState | None] = {}
                dirty: set[int] = set()
                for op in batch:
                    try:
                        outcomes.append((writes.apply(txn, op, states, dirty), None))
                    except MagnetarError as exc:
                        outcomes.append((None, exc))
                writes.write_states(txn, states, dirty)
        except Exception as commit_error:  # the commit failed (disk full, I/O error): nothing is durable
            failure = PersistenceError(f"bookie write transaction failed: {commit_error}")
            outcomes = [(None, failure)] * len(batch)
            self._commit_failed(commit_error, batch)
        self._committed(batch, started)
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for op, (result, error) in zip(batch, outcomes, strict=True):
            assert op.loop is not None
            by_loop.setdefault(op.loop, []).append((op, result, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._owner._resolve, items)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _commit_failed(self, exc: BaseException, batch: list[WriteOp]) -> bool:
        """Turn a failed commit into the storage's flags (broken index: fail; disk full:
        read-only until space is freed); False when it was neither."""
        if isinstance(exc, self._kv.corruption):
            self.pending_failure = f"LMDB reported damage during a commit: {exc!r}"
            return True
        if is_enospc(exc) or self._mode.no_room_for(batch):
            # The disk filled faster than the threshold check: refuse adds until space is freed.
            self._mode.full_in_writer(batch)
            return True
        return False

    def _committed(self, batch: list[WriteOp], started: float) -> None:
        self.commits += 1
        self.ops_committed += len(batch)
        if self._metrics is not None:
            self._metrics.batch_size.observe(len(batch))
            self._metrics.commit_latency.observe(time.perf_counter() - started)

    def _commit_journaled(self, batch: list[WriteOp]) -> None:
        """Bring journaled (already acknowledged) writes into the store; a failed commit is retried
        every second (the overlay keeps them readable) until it succeeds or the storage fails."""
        journal = self.journal
        assert journal is not None
        end = batch[-1].journal_end
        assert end is not None
        loop = batch[-1].loop
        owner = self._owner
        while True:
            started = time.perf_counter()
            try:
                self._writes.apply_ops(batch, end)
                break
            except Exception as exc:
                if not self._commit_failed(exc, batch):
                    log.error("bookie storage %s: LMDB commit of journaled writes failed, retrying: %r", self._dir, exc)
                if loop is not None:  # the loop turns the flags above into read-only or failed
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(owner._applied, [])
                if self.pending_failure is not None or owner.failed is not None or owner.closing:
                    return  # the journal keeps them: the next start replays them
                time.sleep(1.0)
        self._committed(batch, started)
        with self.cond:
            self.in_lmdb += len(batch)
            self.cond.notify_all()
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(owner._applied, batch)
        journal.remove_before(end.segment)
        journal.prepare_next()

    def wait_in_lmdb(self, timeout: float = 60.0) -> None:
        """Block until every acknowledged journaled write is in the store (for walks over it alone)."""
        if self.journal is None:
            return
        owner = self._owner
        with self.cond:
            target = self.handed
            self.urgent += 1
            self.cond.notify_all()
            try:
                done = self.cond.wait_for(
                    lambda: self.in_lmdb >= target or self.pending_failure is not None or owner.failed is not None,
                    timeout,
                )
            finally:
                self.urgent -= 1
        if not done:
            raise PersistenceError(f"the journal's writes did not reach LMDB within {timeout} s")
