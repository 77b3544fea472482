"""Journal mode: writes decided and journaled on the loop, acknowledged once synced, readable from an overlay.

Why: the store's synced commit costs two device flushes and several hand-overs of the GIL by the
writer thread; at low load every add paid all of it before its acknowledgement. In journal mode
(on by default; ``journal=False``, ``--journal false`` or ``MAGNETAR_BOOKIE_JOURNAL=0`` turns it
off) each write is decided on the event loop (is the ledger fenced? what is its LAC?) against a
view of the ledger states that includes writes not yet in the store, appended to the journal
(``journal.py``) and acknowledged once the journal's writer has synced it: one ``fdatasync`` per
batch, in a thread that never takes the GIL (``journal_writer.py``). Then it is handed to the
group-commit thread, which brings it into the store behind (``group_commit.py``). Until then the
write sits in this overlay (entries, deletes, the ledger's state), which every read consults
first, so a write is readable from its acknowledgement on.

Opening a directory replays the journal past the recorded position into the store before
anything is served (``replay_journal``; also when the journal has since been switched off). A
journal that cannot be written fails the storage (no ``CORRUPT``: a restart replays what was
synced); a segment that cannot be allocated makes the bookie read-only.

Journal record body (the journal frames it with its own length and CRC): ``struct '>BQQq?'``
(kind, ledger, entry, lac, recovery flag), then the add's stored value.

Everything here runs on the event loop, except ``replay_journal``, which runs before it serves.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from magnetar.bookie.journal import Journal, JournalPosition
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.bookie.storage.entry_format import JOURNAL_KEY, LedgerState
from magnetar.bookie.storage.group_commit import GroupCommit
from magnetar.bookie.storage.kv import KeyValueStorage
from magnetar.bookie.storage.read_only import ReadOnlyMode
from magnetar.bookie.storage.writes import KvWrites, Outcome, WriteOp, decide
from magnetar.protocol.errors import BookieReadOnly, MagnetarError, PersistenceError

log = logging.getLogger(__name__)

JOURNAL_DIR = "journal"
JOURNAL_ENV = "MAGNETAR_BOOKIE_JOURNAL"  # "0": journal off where the caller does not say
JOURNAL_RECORD = struct.Struct(">BQQq?")  # kind, ledger, entry, lac, recovery flag; then the add's value
_KIND_CODES = {"add": 1, "fence": 2, "delete": 3, "restore": 4}
_CODE_KINDS = {code: kind for kind, code in _KIND_CODES.items()}
REPLAY_CHUNK_OPS = 10_000  # journal records applied per transaction when replaying at start


def journal_default() -> bool:
    """Whether storages journal when the caller does not say: yes, unless ``MAGNETAR_BOOKIE_JOURNAL=0``."""
    return os.environ.get(JOURNAL_ENV, "1").strip() != "0"


def encode_record(op: WriteOp) -> bytes:
    return JOURNAL_RECORD.pack(_KIND_CODES[op.kind], op.ledger, op.entry, op.lac, op.recovery) + op.value


def decode_record(body: bytes) -> WriteOp:
    """A journal record's operation (``kind``, ``ledger``, ``entry``, ``value``, ``lac``, ``recovery``)."""
    code, ledger, entry, lac, recovery = JOURNAL_RECORD.unpack_from(body)
    return WriteOp(_CODE_KINDS[code], ledger, entry, body[JOURNAL_RECORD.size :], lac, recovery)


class Replayed:
    """What ``replay_journal`` found and left: the journal to write to (None: journal off)."""

    def __init__(self) -> None:
        self.journal: Journal | None = None
        self.records = 0  # journal records applied to the store (left by a crash)
        self.unavailable: str | None = None  # why journal mode was asked for but is off (a full disk)


def replay_journal(
    directory: Path,
    kv: KeyValueStorage[Any],
    writes: KvWrites,
    meta: Any,
    *,
    enabled: bool,
    segment_bytes: int,
    sync: bool,
) -> Replayed:
    """Apply what a previous run journaled but had not brought into the store (a crash, or the
    journal switched off since: the records are applied either way), then start an empty journal
    if ``enabled``. Applied in synced commits before anything is served."""
    out = Replayed()
    directory = directory / JOURNAL_DIR
    if not enabled and not directory.exists():
        return out
    journal = Journal(directory, segment_bytes, sync=sync)
    with kv.begin() as txn:
        raw = txn.get(JOURNAL_KEY, db=meta)
    present = journal.segments()
    if raw is not None:
        start = JournalPosition.unpack(bytes(raw))
    else:
        start = JournalPosition(present[0] if present else 1, 0)
    chunk: list[WriteOp] = []
    last = max([start.segment, *present])
    end = start
    for body, end in journal.replay(start):
        chunk.append(decode_record(body))
        if len(chunk) >= REPLAY_CHUNK_OPS:
            writes.apply_ops(chunk, end)
            out.records += len(chunk)
            chunk = []
    if chunk:
        writes.apply_ops(chunk, end)
        out.records += len(chunk)
    if out.records:
        log.info("bookie storage %s: replayed %d journal records into LMDB", directory.parent, out.records)
    fresh = JournalPosition(last + 1, 0)
    with kv.begin(write=True) as txn:  # recorded before the old segments go
        txn.put(JOURNAL_KEY, fresh.pack(), db=meta)
    journal.remove_all()
    if not enabled:
        with kv.begin(write=True) as txn:
            txn.delete(JOURNAL_KEY, db=meta)
        with contextlib.suppress(OSError):
            directory.rmdir()
        return out
    try:
        journal.start(fresh)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        # No room for a segment (a full disk): this run acknowledges from LMDB's own commits,
        # and the bookie is read-only by the usual checks until space is freed.
        out.unavailable = f"no room for a journal segment in {directory}: {exc.strerror}"
        log.warning("bookie storage %s: running without the journal: %s", directory.parent, out.unavailable)
        return out
    journal.prepare_next()
    out.journal = journal
    return out


class OverlayOwner(Protocol):
    """The storage this overlay belongs to (``BookieStorage``): it acknowledges and fails.
    ``_resolve`` keeps its private name: it is the storage's, and is looked up at each call."""

    def _resolve(self, items: list[Outcome]) -> None: ...

    def fail(self, reason: str, *, corrupt: bool = True) -> None: ...


class JournalOverlay:
    """The loop's side of journal mode: writes journaled but not yet synced (``pending``, in
    append order), and the overlay of writes not yet in the store, which reads consult first:
    ``entries`` (adds), ``deleting`` (ledger deletes) and ``view`` (ledger -> [its state, None
    once deleted; how many of its writes are not yet in the store])."""

    def __init__(
        self,
        journal: Journal,
        owner: OverlayOwner,
        group: GroupCommit,
        mode: ReadOnlyMode,
        stored_state: Callable[[int], LedgerState | None],
        metrics: BoundBookieMetrics | None,
    ) -> None:
        """``stored_state``: a ledger's state in the store, for a ledger the overlay has no view of."""
        self.journal = journal
        self._owner = owner
        self._group = group
        self._mode = mode
        self._stored_state = stored_state
        self._metrics = metrics
        self.pending: collections.deque[WriteOp] = collections.deque()
        self.entries: dict[tuple[int, int], WriteOp] = {}
        self.deleting: dict[int, WriteOp] = {}
        self.view: dict[int, list[Any]] = {}
        self._reader_loop: asyncio.AbstractEventLoop | None = None

    def append(self, op: WriteOp, loop: asyncio.AbstractEventLoop) -> None:
        """Decide ``op`` and journal it; its outcome arrives once the journal has synced it."""
        journal = self.journal
        if self._reader_loop is not loop:
            if self._reader_loop is not None:
                raise RuntimeError("a journaled bookie storage is used from one event loop only")
            loop.add_reader(journal.eventfd, self.ready)
            self._reader_loop = loop
        viewed = self.view.get(op.ledger)
        state = viewed[0] if viewed is not None else self._stored_state(op.ledger)
        try:
            new, result, record = decide(op, state)
        except MagnetarError as exc:
            # Without its traceback: this frame would keep the refusal, the op and its future
            # alive in a cycle until the (rare, MAGNETAR_GC_*) cycle collection.
            self._answer_now(op, None, exc.with_traceback(None))
            return
        if not record:
            self._answer_now(op, result, None)
            return
        try:
            op.seq, op.journal_end = journal.append(encode_record(op))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:  # no room for the next segment: read-only until space is freed
                self._mode.full_now(1 << 20)
                raise BookieReadOnly("bookie is read-only: no room for the next journal segment") from exc
            self._owner.fail(f"the journal could not be written: {exc!r}", corrupt=False)
            raise PersistenceError(f"bookie journal failed: {exc}") from exc
        op.result = result
        self.pending.append(op)
        if viewed is None:
            self.view[op.ledger] = [new, 1]
        else:
            viewed[0] = new
            viewed[1] += 1
        if op.kind == "add":
            self.entries[(op.ledger, op.entry)] = op
        elif op.kind == "delete":
            self.deleting[op.ledger] = op
            for key in [k for k in self.entries if k[0] == op.ledger]:
                del self.entries[key]

    def _answer_now(self, op: WriteOp, result: Any, exc: BaseException | None) -> None:
        """An outcome decided without the disk (a refused add, a restore with nothing to do),
        delivered as any other: never synchronously."""
        assert op.loop is not None
        if op.kind == "add" and exc is not None and self._metrics is not None:
            self._metrics.add_failed(str(getattr(exc, "code", "UnknownError")))
        if op.callback is not None:
            op.loop.call_soon(op.callback, exc)
        elif op.future is not None:
            if exc is not None:
                op.future.set_exception(exc)
            else:
                op.future.set_result(result)

    def ready(self) -> None:
        """The journal's writer synced a batch: acknowledge what it holds, and hand it to the
        writer thread for the store. A failed journal write fails the storage."""
        journal = self.journal
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(journal.eventfd)
        durable, err = journal.durable()
        self.synced(durable, err)

    def synced(self, durable: int, err: int) -> None:
        pending = self.pending
        done: list[WriteOp] = []
        while pending and pending[0].seq <= durable:
            done.append(pending.popleft())
        if done:
            self._group.hand_over(done)
            if self._metrics is not None:
                self._metrics.journal_batch_size.observe(len(done))
            self._owner._resolve([(op, op.result, None) for op in done])
        if err and pending:
            reason = f"the journal could not be written: {os.strerror(err)}"
            failure = PersistenceError(f"bookie journal write failed: {os.strerror(err)}")
            failed = list(pending)
            pending.clear()
            self._owner.fail(reason, corrupt=False)
            self._owner._resolve([(op, None, failure) for op in failed])

    def applied(self, batch: list[WriteOp]) -> None:
        """These journaled writes are in the store: drop them from the overlay."""
        for op in batch:
            if op.kind == "add":
                key = (op.ledger, op.entry)
                if self.entries.get(key) is op:
                    del self.entries[key]
            elif op.kind == "delete" and self.deleting.get(op.ledger) is op:
                del self.deleting[op.ledger]
            viewed = self.view.get(op.ledger)
            if viewed is not None:
                viewed[1] -= 1
                if viewed[1] <= 0:
                    del self.view[op.ledger]

    async def close(self) -> None:
        """Sync what was appended, acknowledge it and hand it to the writer thread."""
        journal = self.journal
        if self._reader_loop is not None:
            self._reader_loop.remove_reader(journal.eventfd)
        durable, err = await asyncio.to_thread(journal.close)
        self.synced(durable, err)
