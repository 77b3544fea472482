"""Bookie storage: entries and per-ledger state in LMDB, written by one group-commit thread.

Layout (one LMDB environment in the data directory; ``STORAGE.md`` has the full story):

- named DB ``entries``: key ``struct '>QQ' (ledger_id, entry_id)`` (big-endian, so one ledger's
  entries are contiguous and in entry order), value ``CRC32C(data) + CRC32C(key + that CRC) + data``
  (format 2; format 1, kept for environments created before, has no key check).
- named DB ``ledgers``: key ``struct '>Q' ledger_id``, value ``struct '>?qI' (fenced, lac, CRC32C of
  key + the first 9 bytes)`` (format 1: ``'>?q'``, no CRC).
- named DB ``meta``: ``format`` -> the format number above.

Group commit. An fsync costs ~2 ms here whatever the transaction holds, so one fsync per add
would cap a bookie at ~500 adds/s. Instead every write (add, fence, delete) is queued to ONE
writer thread, which drains everything queued into one write transaction, commits it once
(``sync=True``: the commit returns after the data and the meta page are on disk), and only then
resolves the futures of all those writes with a single ``loop.call_soon_threadsafe``. An add is
therefore acknowledged only once it is durable, and the batch grows by itself under load. Because
one thread applies writes in queue order, a fence queued before an add wins over it, and checks
such as "is this ledger fenced" need no locks.

The CRC is checked on the loop before queueing, so a corrupt add never reaches the disk, and
again on every read, so that rot on disk (LMDB does not checksum its pages) surfaces as
``ChecksumError`` instead of as bad data. The key check binds each value to its key, so a damaged
index that finds the value of another entry (a flipped bit in a key) is caught as well; the ledger
state carries its own CRC. Damage found on a read is reported to ``damage_listener`` (the scrubber,
``scrub.py``, which also walks everything periodically). An LMDB error that says the B-tree itself
is broken (``MDB_CORRUPTED``, a missing page, a panic) fails the storage for good: every later call
raises ``PersistenceError``, a ``CORRUPT`` file is left in the data directory, and opening the
directory again raises ``StorageCorrupt`` (the bookie refuses to start rather than serve from a
broken index; its ledgers are re-replicated from the other bookies as for a lost one).

Journal (on by default; ``journal=False``, ``--journal false`` or ``MAGNETAR_BOOKIE_JOURNAL=0``
turns it off). Each write is decided on the event loop (is the ledger fenced? what is its LAC?)
against a view of the ledger states that includes writes not yet in LMDB, appended to the journal
(``journal.py``) and acknowledged once the journal's writer has synced it: one ``fdatasync`` per
batch, in a thread that never takes the GIL (``journal_writer.py``). Then it is queued to the
writer thread, which commits it to LMDB as before (synced, many writes per commit) and records in
the same transaction the journal position everything before which is in LMDB. Until then the
write sits in an overlay on the loop (entries, deletes, the ledger's state), which every read
consults first, so a write is readable from its acknowledgement on. Opening a directory replays
the journal past the recorded position into LMDB before anything is served (also when the
journal has since been switched off). A journal that cannot be written fails the storage (no
``CORRUPT``: a restart replays what was synced); a segment that cannot be allocated makes the
bookie read-only; an LMDB commit that fails is retried, the writes staying readable meanwhile.

Reads run inline on the event loop: an LMDB read of a cached page is a few microseconds, less
than a hop to a thread pool. A cold read page-faults on the loop; a bookie serving mostly tailing
reads (the common case) rarely does.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmdb

from magnetar import write_batch
from magnetar.bookie.journal import DEFAULT_SEGMENT_BYTES, Journal, JournalPosition
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.ledger.bookie_api import NO_ENTRY, ReadResult
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import (
    AlreadyClosed,
    BookieReadOnly,
    ChecksumError,
    InvalidCommand,
    LedgerFenced,
    MagnetarError,
    NoSuchEntry,
    NoSuchLedger,
    PersistenceError,
)

log = logging.getLogger(__name__)

ENTRY_KEY = struct.Struct(">QQ")
LEDGER_KEY = struct.Struct(">Q")
LEDGER_STATE = struct.Struct(">?q")
LEDGER_STATE_V2 = struct.Struct(">?qI")
CRC = struct.Struct(">I")
ENTRY_HEAD = struct.Struct(">II")  # format 2: CRC32C(data), CRC32C(key + packed CRC)
FORMAT = 2
FORMAT_KEY = b"format"
JOURNAL_KEY = b"journal"  # meta: the journal position everything before which is in LMDB (journal.py)
JOURNAL_DIR = "journal"
JOURNAL_ENV = "MAGNETAR_BOOKIE_JOURNAL"  # "0": journal off where the caller does not say
JOURNAL_RECORD = struct.Struct(">BQQq?")  # kind, ledger, entry, lac, recovery flag; then the add's value
_KIND_CODES = {"add": 1, "fence": 2, "delete": 3, "restore": 4}
_CODE_KINDS = {code: kind for kind, code in _KIND_CODES.items()}
REPLAY_CHUNK_OPS = 10_000  # journal records applied per LMDB transaction when replaying at start
CORRUPT_FILE = "CORRUPT"
OPEN_FILE = "OPEN"  # present while a storage has the directory open: left behind by a crash
# LMDB errors that mean the file is damaged (not a transient condition): the storage stops serving.
# MDB_BAD_TXN is among them: it is what a read or write on a damaged page reports here (seen in
# tests/faults/test_bitflips.py's control run), and a fresh transaction never gets it otherwise.
_CORRUPTION: tuple[type[BaseException], ...] = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.PanicError,
    lmdb.BadTxnError,
)
DEFAULT_MAP_SIZE = 1 << 40  # 1 TiB of address space; LMDB's file grows only as data is written
_U64_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class DiskUsage:
    fs_total: int
    fs_used: int
    data_bytes: int  # bytes the environment occupies on disk

    @property
    def fraction(self) -> float:
        return self.fs_used / self.fs_total if self.fs_total else 0.0


class StorageCorrupt(RuntimeError):
    """The data directory holds a damaged LMDB environment (found earlier, or now): the bookie
    must not serve from it. Wipe the directory and start with ``--reprovision``; the cluster
    re-replicates its ledgers from the other bookies meanwhile."""


@dataclass(slots=True)
class _LedgerState:
    fenced: bool
    lac: int
    corrupt: bool = False  # the stored record failed its CRC: read as fenced with an unknown LAC


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What one walk over every stored value found (``BookieStorage.verify_all``)."""

    entries: int  # entry values checked
    ledgers: int  # ledger states checked
    damaged_entries: list[tuple[int, int]] = field(default_factory=list)
    damaged_states: list[int] = field(default_factory=list)


def _key_check(key: bytes, crc: int) -> int:
    return crc32c(key + CRC.pack(crc))


@dataclass(slots=True)
class _Op:
    kind: str  # "add" | "fence" | "delete" | "restore" | "stop"
    ledger: int
    entry: int = 0
    value: bytes = b""
    lac: int = NO_ENTRY
    recovery: bool = False
    future: asyncio.Future[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    started: float = 0.0
    #: Instead of ``future``: called on the loop with the error or None (``add_callback``).
    callback: Callable[[BaseException | None], None] | None = None
    # Journal mode: the outcome decided on the loop, the writer's sequence number, the position after the record.
    result: Any = None
    seq: int = 0
    journal_end: JournalPosition | None = None


def _check_ids(ledger: int, entry: int = 0) -> None:
    if not (0 <= ledger <= _U64_MAX and 0 <= entry <= _U64_MAX):
        raise InvalidCommand(f"ledger and entry ids must be unsigned 64-bit, got ({ledger}, {entry})")


class BookieStorage:
    """Durable entry store of one bookie. Construct on any thread; use from one event loop."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        sync: bool = True,
        map_size: int = DEFAULT_MAP_SIZE,
        readonly_threshold: float | None = None,
        disk_check_interval: float = 1.0,
        max_batch_ops: int = 8192,
        max_batch_bytes: int = 64 * 1024 * 1024,
        metrics: BoundBookieMetrics | None = None,
        journal: bool | None = None,
        journal_segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        lmdb_interval: float = 0.01,
    ) -> None:
        """``journal``: acknowledge writes once the journal holds them and bring LMDB up to date
        behind (module docstring); ``None`` takes ``MAGNETAR_BOOKIE_JOURNAL`` (on unless ``0``).
        ``lmdb_interval``: how long journaled writes gather before one LMDB commit."""
        self._dir = Path(data_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        corrupt = self._dir / CORRUPT_FILE
        if corrupt.exists():
            raise StorageCorrupt(
                f"bookie storage in {self._dir} was found corrupt ({corrupt.read_text().strip()}); it will not "
                "serve from it: wipe the data directory and start with --reprovision (the other bookies hold "
                "the replicas)"
            )
        self._env = lmdb.open(
            str(self._dir / "ledgers"), map_size=map_size, max_dbs=3, sync=sync, metasync=sync, subdir=True
        )
        #: The previous process did not close this directory (it crashed or was killed).
        self.unclean = (self._dir / OPEN_FILE).exists()
        (self._dir / OPEN_FILE).touch()
        self._entries = self._env.open_db(b"entries")
        self._ledgers = self._env.open_db(b"ledgers")
        self._meta = self._env.open_db(b"meta")
        self.format = self._open_format()
        #: Called on the loop with ``(ledger, entry)`` (entry -1: the ledger's state) when a read finds damage.
        self.damage_listener: Callable[[int, int], None] | None = None
        #: Called on the loop with the reason when the storage fails for good (a broken index).
        self.failure_listener: Callable[[str], None] | None = None
        #: Called on the loop with the new read-only flag whenever it changes.
        self.mode_listener: Callable[[bool], None] | None = None
        self.failed: str | None = None
        self._damaged: set[tuple[int, int]] = set()  # known damaged, not yet overwritten
        self._full_used: int | None = None  # fs bytes in use when a commit hit ENOSPC
        self._full_margin = 0
        self._mode_dirty = False
        self._pending_failure: str | None = None
        self._metrics = metrics
        self._max_ops = max_batch_ops
        self._max_bytes = max_batch_bytes
        self._readonly_threshold = readonly_threshold
        self._disk_check_interval = disk_check_interval
        self._last_disk_check = float("-inf")
        self._read_only = False
        self._queue: collections.deque[_Op] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        #: Write transactions committed and operations they carried (group-commit evidence).
        self.commits = 0
        self.ops_committed = 0
        # Journal mode, all touched on the loop only: writes appended but not yet synced (in
        # append order), and the overlay of writes not yet in LMDB (module docstring).
        self._sync = sync
        self._journal: Journal | None = None
        self._jpending: collections.deque[_Op] = collections.deque()
        self._overlay: dict[tuple[int, int], _Op] = {}
        self._deleting: dict[int, _Op] = {}
        self._view: dict[int, list[Any]] = {}  # ledger -> [state (None: deleted), writes not yet in LMDB]
        self._reader_loop: asyncio.AbstractEventLoop | None = None
        self._handed = 0  # journaled writes handed to the writer thread, and those it has in LMDB (under _cond)
        self._in_lmdb = 0
        self._urgent = 0  # callers of ``_wait_in_lmdb`` waiting: the writer commits at once
        self._lmdb_interval = lmdb_interval
        #: Journal records applied to LMDB when this storage opened (left by a crash).
        self.replayed = 0
        #: Why journal mode was asked for but this storage runs without it (a full disk at open).
        self.journal_unavailable: str | None = None
        try:
            self._replay_journal(journal_default() if journal is None else journal, journal_segment_bytes)
        except _CORRUPTION as exc:  # the index is broken: refuse to serve, as a read finding it would
            reason = f"LMDB reported damage while replaying the journal: {exc!r}"
            with contextlib.suppress(OSError):
                (self._dir / CORRUPT_FILE).write_text(reason + "\n")
            self._env.close()
            raise StorageCorrupt(
                f"bookie storage in {self._dir} was found corrupt ({reason}); it will not serve from it: "
                "wipe the data directory and start with --reprovision (the other bookies hold the replicas)"
            ) from exc
        self.check_disk(force=True)
        self._thread = threading.Thread(target=self._writer, name="magnetar-bookie-writer", daemon=True)
        self._thread.start()

    @property
    def journaled(self) -> bool:
        """Whether writes are acknowledged from the journal (module docstring)."""
        return self._journal is not None

    # --- the journal: replay at start

    def _replay_journal(self, enabled: bool, segment_bytes: int) -> None:
        """Apply what a previous run journaled but had not brought into LMDB (a crash, or the
        journal switched off since: the records are applied either way), then start an empty
        journal if ``enabled``. Applied in synced LMDB commits before anything is served."""
        directory = self._dir / JOURNAL_DIR
        if not enabled and not directory.exists():
            return
        journal = Journal(directory, segment_bytes, sync=self._sync)
        with self._env.begin() as txn:
            raw = txn.get(JOURNAL_KEY, db=self._meta)
        present = journal.segments()
        if raw is not None:
            start = JournalPosition.unpack(bytes(raw))
        else:
            start = JournalPosition(present[0] if present else 1, 0)
        chunk: list[_Op] = []
        last = max([start.segment, *present])
        end = start
        for body, end in journal.replay(start):
            chunk.append(decode_record(body))
            if len(chunk) >= REPLAY_CHUNK_OPS:
                self._apply_ops(chunk, end)
                self.replayed += len(chunk)
                chunk = []
        if chunk:
            self._apply_ops(chunk, end)
            self.replayed += len(chunk)
        if self.replayed:
            log.info("bookie storage %s: replayed %d journal records into LMDB", self._dir, self.replayed)
        fresh = JournalPosition(last + 1, 0)
        with self._env.begin(write=True) as txn:  # recorded before the old segments go
            txn.put(JOURNAL_KEY, fresh.pack(), db=self._meta)
        journal.remove_all()
        if not enabled:
            with self._env.begin(write=True) as txn:
                txn.delete(JOURNAL_KEY, db=self._meta)
            with contextlib.suppress(OSError):
                directory.rmdir()
            return
        try:
            journal.start(fresh)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # No room for a segment (a full disk): this run acknowledges from LMDB's own commits,
            # and the bookie is read-only by the usual checks until space is freed.
            self.journal_unavailable = f"no room for a journal segment in {directory}: {exc.strerror}"
            log.warning("bookie storage %s: running without the journal: %s", self._dir, self.journal_unavailable)
            return
        journal.prepare_next()
        self._journal = journal

    def _apply_ops(self, ops: list[_Op], end: JournalPosition) -> None:
        """Apply journaled writes to LMDB in one synced transaction that also records ``end``.
        They were decided when journaled, so nothing is refused here."""
        with self._env.begin(write=True) as txn:
            states: dict[int, _LedgerState | None] = {}
            dirty: set[int] = set()
            for op in ops:
                self._apply_decided(txn, op, states, dirty)
            self._write_states(txn, states, dirty)
            txn.put(JOURNAL_KEY, end.pack(), db=self._meta)

    def _apply_decided(self, txn: Any, op: _Op, states: dict[int, _LedgerState | None], dirty: set[int]) -> None:
        state = self._state(txn, op.ledger, states)
        if op.kind == "delete":
            self._delete_entries(txn, op.ledger)
            states[op.ledger] = None
            dirty.discard(op.ledger)
            return
        if op.kind == "restore":
            states[op.ledger] = _LedgerState(op.recovery, op.lac)
            dirty.add(op.ledger)
            return
        if state is None:
            state = states[op.ledger] = _LedgerState(False, NO_ENTRY)
        if op.kind == "fence":
            state.corrupt, state.fenced = False, True
        else:
            txn.put(ENTRY_KEY.pack(op.ledger, op.entry), op.value, db=self._entries)
            state.corrupt = False
            state.lac = max(state.lac, op.lac)
        dirty.add(op.ledger)

    def _write_states(self, txn: Any, states: dict[int, _LedgerState | None], dirty: set[int]) -> None:
        for ledger in dirty:
            st = states[ledger]
            assert st is not None
            key = LEDGER_KEY.pack(ledger)
            txn.put(key, self._encode_state(key, st), db=self._ledgers)

    def _delete_entries(self, txn: Any, ledger: int) -> None:
        cursor = txn.cursor(db=self._entries)
        prefix = LEDGER_KEY.pack(ledger)
        if cursor.set_range(ENTRY_KEY.pack(ledger, 0)):
            while bytes(cursor.key())[:8] == prefix:
                if not cursor.delete():
                    break
        txn.delete(prefix, db=self._ledgers)

    @property
    def data_dir(self) -> Path:
        return self._dir

    def _open_format(self) -> int:
        """Format 2 for a new environment; an existing one keeps the format it was created with."""
        with self._env.begin(write=True) as txn:
            found = txn.get(FORMAT_KEY, db=self._meta)
            if found is not None:
                return int(bytes(found))
            empty = txn.stat(self._entries)["entries"] == 0 and txn.stat(self._ledgers)["entries"] == 0
            fmt = FORMAT if empty else 1
            txn.put(FORMAT_KEY, str(fmt).encode(), db=self._meta)
            return fmt

    # --- value formats

    def _encode_entry(self, key: bytes, crc: int, data: bytes) -> bytes:
        if self.format >= 2:
            return ENTRY_HEAD.pack(crc, _key_check(key, crc)) + data
        return CRC.pack(crc) + data

    def _decode_entry(self, key: bytes, raw: Any, ledger: int, entry: int) -> tuple[int, bytes]:
        return _decode_entry(self.format, key, raw, ledger, entry)

    def _encode_state(self, key: bytes, st: _LedgerState) -> bytes:
        packed = LEDGER_STATE.pack(st.fenced, st.lac)
        if self.format >= 2:
            return packed + CRC.pack(crc32c(key + packed))
        return packed

    def _decode_state(self, key: bytes, raw: Any) -> _LedgerState:
        return _decode_state(self.format, key, raw)

    # --- damage and failure

    def _report_damage(self, ledger: int, entry: int) -> None:
        self._damaged.add((ledger, entry))
        if self._metrics is not None:
            self._metrics.scrub_damaged.set(len(self._damaged))
        if self.damage_listener is not None:
            self.damage_listener(ledger, entry)

    @property
    def damaged(self) -> set[tuple[int, int]]:
        """Damage found (by reads or ``verify_all``) and not yet overwritten by a repair."""
        return set(self._damaged)

    def note_damaged(self, found: list[tuple[int, int]]) -> None:
        """What a full walk found damaged and still needing repair: replaces what was known
        (damage since repaired, or found stale, drops out), so that its repair is counted when it
        lands and the gauge shows what is left."""
        self._damaged = set(found)
        if self._metrics is not None:
            self._metrics.scrub_damaged.set(len(self._damaged))

    def _no_room_for(self, batch: list[_Op]) -> bool:
        """Whether the filesystem lacks the room a failed batch needed. LMDB reports a write that
        the full disk cut short as EIO ("Input/output error"), not ENOSPC: the free space tells."""
        try:
            free = shutil.disk_usage(self._dir).free
        except OSError:
            return False
        return free < 2 * sum(len(op.value) for op in batch) + (1 << 20)

    def note_repaired_state(self, ledger: int) -> None:
        """A damaged ledger state was rewritten (``restore_state``)."""
        self._damaged.discard((ledger, -1))
        if self._metrics is not None:
            self._metrics.scrub_repaired.inc()
            self._metrics.scrub_damaged.set(len(self._damaged))

    def fail(self, reason: str, *, corrupt: bool = True) -> None:
        """Stop serving for good: the index is broken. Leaves ``CORRUPT`` so a restart refuses
        (``corrupt=False``: a journal that could not be written; a restart replays what it holds)."""
        if self.failed is not None:
            return
        self.failed = reason
        try:
            if corrupt:
                (self._dir / CORRUPT_FILE).write_text(reason + "\n")
        except OSError:  # the disk may be what is failing; the in-memory flag still holds
            pass
        if self.failure_listener is not None:
            self.failure_listener(reason)

    def _lmdb_failed(self, exc: BaseException, what: str) -> PersistenceError:
        reason = f"LMDB reported damage during {what}: {exc!r}"
        self.fail(reason)
        return PersistenceError(f"bookie storage is corrupt: {reason}")

    # --- disk usage and read-only mode

    def disk_usage(self) -> DiskUsage:
        fs = shutil.disk_usage(self._dir)
        data_file = self._dir / "ledgers" / "data.mdb"
        data_bytes = data_file.stat().st_blocks * 512 if data_file.exists() else 0
        if self._journal is not None:
            data_bytes += self._journal.size_bytes()
        return DiskUsage(fs.total, fs.used, data_bytes)

    def check_disk(self, *, force: bool = False) -> bool:
        """Re-evaluate read-only mode (at most once per ``disk_check_interval`` unless forced)
        and return it. The bookie leaves read-only mode by itself once space is freed."""
        now = time.monotonic()
        if self._full_used is None and (
            self._readonly_threshold is None or (not force and now - self._last_disk_check < self._disk_check_interval)
        ):
            return self._read_only
        if not force and now - self._last_disk_check < self._disk_check_interval:
            return self._read_only
        self._last_disk_check = now
        usage = self.disk_usage()
        if self._full_used is not None and usage.fs_used <= self._full_used - self._full_margin:
            self._full_used = None  # space was freed since a commit hit ENOSPC
        over = self._readonly_threshold is not None and usage.fraction >= self._readonly_threshold
        self._set_read_only(over or self._full_used is not None)
        return self._read_only

    def _set_read_only(self, value: bool) -> None:
        changed = value != self._read_only
        self._read_only = value
        if self._metrics is not None:
            self._metrics.read_only.set(1 if value else 0)
        if changed and self.mode_listener is not None:
            self.mode_listener(value)

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def readonly_threshold(self) -> float | None:
        """Fraction of the filesystem in use at which adds stop (None: never)."""
        return self._readonly_threshold

    @readonly_threshold.setter
    def readonly_threshold(self, value: float | None) -> None:
        self._readonly_threshold = value
        if value is None and self._full_used is None:
            self._set_read_only(False)
        self.check_disk(force=True)

    # --- writes (queued to the group-commit thread)

    def _submit(self, op: _Op) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        op.future = fut
        self._enqueue(op, loop)
        return fut

    def _enqueue(self, op: _Op, loop: asyncio.AbstractEventLoop) -> None:
        op.loop, op.started = loop, loop.time()
        if self._journal is not None:
            if self._closed:
                raise AlreadyClosed("bookie storage is closed")
            if self.failed is not None:
                raise PersistenceError(f"bookie storage has failed: {self.failed}")
            self._journal_op(op, loop)
            return
        with self._cond:
            if self._closed:
                raise AlreadyClosed("bookie storage is closed")
            if self.failed is not None:
                raise PersistenceError(f"bookie storage is corrupt: {self.failed}")
            self._queue.append(op)
            self._cond.notify()

    # --- journal mode: decided and journaled on the loop, acknowledged when synced

    def _journal_op(self, op: _Op, loop: asyncio.AbstractEventLoop) -> None:
        journal = self._journal
        assert journal is not None
        if self._reader_loop is not loop:
            if self._reader_loop is not None:
                raise RuntimeError("a journaled bookie storage is used from one event loop only")
            loop.add_reader(journal.eventfd, self._journal_ready)
            self._reader_loop = loop
        viewed = self._view.get(op.ledger)
        state = viewed[0] if viewed is not None else self._stored_state(op.ledger)
        try:
            new, result, record = _decide(op, state)
        except MagnetarError as exc:
            # Without its traceback: this frame would keep the refusal, the op and its future
            # alive in a cycle until the (rare, MAGNETAR_GC_*) cycle collection.
            self._answer_now(op, None, exc.with_traceback(None))
            return
        if not record:
            self._answer_now(op, result, None)
            return
        try:
            op.seq, op.journal_end = journal.append(_encode_record(op))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:  # no room for the next segment: read-only until space is freed
                self._full_used = self.disk_usage().fs_used
                self._full_margin = 1 << 20
                self._last_disk_check = float("-inf")
                self._mode_dirty = False
                self.check_disk(force=True)
                raise BookieReadOnly("bookie is read-only: no room for the next journal segment") from exc
            self.fail(f"the journal could not be written: {exc!r}", corrupt=False)
            raise PersistenceError(f"bookie journal failed: {exc}") from exc
        op.result = result
        self._jpending.append(op)
        if viewed is None:
            self._view[op.ledger] = [new, 1]
        else:
            viewed[0] = new
            viewed[1] += 1
        if op.kind == "add":
            self._overlay[(op.ledger, op.entry)] = op
        elif op.kind == "delete":
            self._deleting[op.ledger] = op
            for key in [k for k in self._overlay if k[0] == op.ledger]:
                del self._overlay[key]

    def _stored_state(self, ledger: int) -> _LedgerState | None:
        """A ledger's state in LMDB. A function of its own so that no frame that may be kept alive
        (by an exception's traceback) holds the read transaction: py-lmdb keeps a finished read
        transaction's reader slot until the object is freed, and 126 such slots stopped every read
        (``MDB_READERS_FULL``; the bookie fuzzer found it)."""
        try:
            with self._env.begin() as txn:
                return self._read_ledger_state(txn, ledger)
        except _CORRUPTION as exc:
            raise self._lmdb_failed(exc, f"a state read of ledger {ledger}") from exc

    def _answer_now(self, op: _Op, result: Any, exc: BaseException | None) -> None:
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

    def _journal_ready(self) -> None:
        """The journal's writer synced a batch: acknowledge what it holds, and hand it to the
        writer thread for LMDB. A failed journal write fails the storage."""
        journal = self._journal
        assert journal is not None
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(journal.eventfd)
        durable, err = journal.durable()
        self._journal_synced(durable, err)

    def _journal_synced(self, durable: int, err: int) -> None:
        pending = self._jpending
        done: list[_Op] = []
        while pending and pending[0].seq <= durable:
            done.append(pending.popleft())
        if done:
            with self._cond:
                self._queue.extend(done)
                self._handed += len(done)
                self._cond.notify()
            if self._metrics is not None:
                self._metrics.journal_batch_size.observe(len(done))
            self._resolve([(op, op.result, None) for op in done])
        if err and pending:
            reason = f"the journal could not be written: {os.strerror(err)}"
            failure = PersistenceError(f"bookie journal write failed: {os.strerror(err)}")
            failed = list(pending)
            pending.clear()
            self.fail(reason, corrupt=False)
            self._resolve([(op, None, failure) for op in failed])

    def add_nowait(
        self, ledger: int, entry: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> asyncio.Future[None]:
        """Queue an add and return the future of its durable acknowledgement. Checks that can
        fail without touching the disk (ids, CRC, read-only) raise here, before queueing; the
        server uses this form so that pipelined adds keep their arrival order."""
        return self._submit(self._add_op(ledger, entry, data, crc, lac, recovery))

    def add_callback(
        self,
        ledger: int,
        entry: int,
        data: bytes,
        crc: int,
        lac: int,
        callback: Callable[[BaseException | None], None],
        *,
        recovery: bool = False,
    ) -> None:
        """``add_nowait`` for the in-process ledger writer: ``callback(error or None)`` runs on the
        loop when the group commit is durable, directly from the batch's resolution, instead of a
        future whose callbacks would run one turn of the loop later. Never calls back synchronously,
        and never raises: a refusal arrives through the callback too."""
        loop = asyncio.get_running_loop()
        try:
            op = self._add_op(ledger, entry, data, crc, lac, recovery)
            op.callback = callback
            self._enqueue(op, loop)
        except Exception as exc:
            loop.call_soon(callback, exc)

    def _add_op(self, ledger: int, entry: int, data: bytes, crc: int, lac: int, recovery: bool) -> _Op:
        _check_ids(ledger, entry)
        try:
            if crc32c(data) != crc:
                raise ChecksumError(f"CRC32C mismatch on add of {ledger}:{entry}")
            if self.check_disk():
                raise BookieReadOnly("bookie is read-only: disk usage above the threshold")
        except MagnetarError as exc:
            if self._metrics is not None:
                self._metrics.add_failed(str(exc.code))
            raise
        key = ENTRY_KEY.pack(ledger, entry)
        return _Op("add", ledger, entry, self._encode_entry(key, crc, bytes(data)), lac, recovery)

    async def add(self, ledger: int, entry: int, data: bytes, crc: int, lac: int, recovery: bool = False) -> None:
        await self.add_nowait(ledger, entry, data, crc, lac, recovery=recovery)

    def fence_nowait(self, ledger: int) -> asyncio.Future[int]:
        """Queue a fence: durably mark the ledger fenced (creating its state if this bookie never
        saw it, so that a late add from the old writer is refused too); the future gives the LAC.
        Queued in call order with adds, so an add submitted after a fence is refused."""
        _check_ids(ledger)
        return self._submit(_Op("fence", ledger))

    async def fence(self, ledger: int) -> int:
        return int(await self.fence_nowait(ledger))

    def delete_ledger_nowait(self, ledger: int) -> asyncio.Future[None]:
        """Queue the deletion of every entry and the state of a ledger. Idempotent: deleting an
        unknown ledger succeeds, so a retried delete does not fail."""
        _check_ids(ledger)
        return self._submit(_Op("delete", ledger))

    async def delete_ledger(self, ledger: int) -> None:
        await self.delete_ledger_nowait(ledger)

    async def restore_state(self, ledger: int, fenced: bool, lac: int) -> bool:
        """Rewrite a ledger state that fails its CRC with ``(fenced, lac)`` (the scrubber derives them
        from the ledger's metadata). Applied in the writer's queue order and only while the stored
        record is still damaged, so a fence or recovery add that rewrote it meanwhile wins.
        Returns whether it rewrote anything."""
        _check_ids(ledger)
        return bool(await self._submit(_Op("restore", ledger, lac=lac, recovery=fenced)))

    # --- the writer thread

    def _writer(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                if self._journal is not None and self._lmdb_interval > 0:
                    # Journal mode: the writes are acknowledged already; gathering them for an
                    # interval makes one LMDB commit (two fsyncs) of many, not one of every sync.
                    self._cond.wait_for(
                        lambda: self._urgent > 0 or self._queue[-1].kind == "stop" or len(self._queue) >= self._max_ops,
                        self._lmdb_interval,
                    )
                batch: list[_Op] = []
                size = 0
                while self._queue and len(batch) < self._max_ops and size < self._max_bytes:
                    op = self._queue.popleft()
                    batch.append(op)
                    size += len(op.value)
            stop = batch[-1].kind == "stop"
            if stop:
                batch.pop()
            if batch:
                if self._journal is not None:
                    self._commit_journaled(batch)
                else:
                    self._commit(batch)
            if stop:
                return

    def _state(self, txn: Any, ledger: int, states: dict[int, _LedgerState | None]) -> _LedgerState | None:
        if ledger not in states:
            key = LEDGER_KEY.pack(ledger)
            raw = txn.get(key, db=self._ledgers)
            states[ledger] = self._decode_state(key, raw) if raw is not None else None
        return states[ledger]

    def _apply(self, txn: Any, op: _Op, states: dict[int, _LedgerState | None], dirty: set[int]) -> Any:
        """One write in the writer's queue order, without the journal: decided on the state LMDB
        holds (and this transaction changed), then applied. Raises ``LedgerFenced`` for an add to
        a fenced ledger; returns the op's result (a fence's LAC, whether a restore applied)."""
        _, result, apply = _decide(op, self._state(txn, op.ledger, states))
        if apply:
            self._apply_decided(txn, op, states, dirty)
        return result

    def _commit(self, batch: list[_Op]) -> None:
        outcomes: list[tuple[Any, BaseException | None]] = []
        started = time.perf_counter()
        try:
            with self._env.begin(write=True) as txn:
                states: dict[int, _LedgerState | None] = {}
                dirty: set[int] = set()
                for op in batch:
                    try:
                        outcomes.append((self._apply(txn, op, states, dirty), None))
                    except MagnetarError as exc:
                        outcomes.append((None, exc))
                self._write_states(txn, states, dirty)
        except Exception as commit_error:  # the commit failed (disk full, I/O error): nothing is durable
            failure = PersistenceError(f"bookie write transaction failed: {commit_error}")
            outcomes = [(None, failure)] * len(batch)
            self._commit_failed(commit_error, batch)
        self._committed(batch, started)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Op, Any, BaseException | None]]] = {}
        for op, (result, error) in zip(batch, outcomes, strict=True):
            assert op.loop is not None
            by_loop.setdefault(op.loop, []).append((op, result, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._resolve, items)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _commit_failed(self, exc: BaseException, batch: list[_Op]) -> bool:
        """Turn a failed LMDB commit into the storage's flags (broken index: fail; disk full:
        read-only until space is freed); False when it was neither."""
        if isinstance(exc, _CORRUPTION):
            self._pending_failure = f"LMDB reported damage during a commit: {exc!r}"
            return True
        if _is_enospc(exc) or self._no_room_for(batch):
            # The disk filled faster than the threshold check: refuse adds until space is freed.
            self._full_used = self.disk_usage().fs_used
            self._full_margin = max(sum(len(op.value) for op in batch), 1 << 20)
            self._mode_dirty = True
            return True
        return False

    def _committed(self, batch: list[_Op], started: float) -> None:
        self.commits += 1
        self.ops_committed += len(batch)
        if self._metrics is not None:
            self._metrics.batch_size.observe(len(batch))
            self._metrics.commit_latency.observe(time.perf_counter() - started)

    def _commit_journaled(self, batch: list[_Op]) -> None:
        """Bring journaled (already acknowledged) writes into LMDB; a failed commit is retried
        every second (the overlay keeps them readable) until it succeeds or the storage fails."""
        journal = self._journal
        assert journal is not None
        end = batch[-1].journal_end
        assert end is not None
        loop = batch[-1].loop
        while True:
            started = time.perf_counter()
            try:
                self._apply_ops(batch, end)
                break
            except Exception as exc:
                if not self._commit_failed(exc, batch):
                    log.error("bookie storage %s: LMDB commit of journaled writes failed, retrying: %r", self._dir, exc)
                if loop is not None:  # the loop turns the flags above into read-only or failed
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._applied, [])
                if self._pending_failure is not None or self.failed is not None or self._closed:
                    return  # the journal keeps them: the next start replays them
                time.sleep(1.0)
        self._committed(batch, started)
        with self._cond:
            self._in_lmdb += len(batch)
            self._cond.notify_all()
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._applied, batch)
        journal.remove_before(end.segment)
        journal.prepare_next()

    def _wait_in_lmdb(self, timeout: float = 60.0) -> None:
        """Block until every acknowledged journaled write is in LMDB (for walks over LMDB alone)."""
        if self._journal is None:
            return
        with self._cond:
            target = self._handed
            self._urgent += 1
            self._cond.notify_all()
            try:
                done = self._cond.wait_for(
                    lambda: self._in_lmdb >= target or self._pending_failure is not None or self.failed is not None,
                    timeout,
                )
            finally:
                self._urgent -= 1
        if not done:
            raise PersistenceError(f"the journal's writes did not reach LMDB within {timeout} s")

    def _applied(self, batch: list[_Op]) -> None:
        """On the loop: these journaled writes are in LMDB; drop them from the overlay."""
        self._take_writer_flags()
        for op in batch:
            if op.kind == "add":
                key = (op.ledger, op.entry)
                if self._overlay.get(key) is op:
                    del self._overlay[key]
            elif op.kind == "delete" and self._deleting.get(op.ledger) is op:
                del self._deleting[op.ledger]
            viewed = self._view.get(op.ledger)
            if viewed is not None:
                viewed[1] -= 1
                if viewed[1] <= 0:
                    del self._view[op.ledger]

    def _take_writer_flags(self) -> None:
        """On the loop: what the writer thread found (a broken index, a full disk) takes effect."""
        if self._pending_failure is not None:
            self.fail(self._pending_failure)
        if self._mode_dirty:
            self._mode_dirty = False
            self._last_disk_check = float("-inf")
            self.check_disk(force=True)

    def _resolve(self, items: list[tuple[_Op, Any, BaseException | None]]) -> None:
        # The receipts and dispatches this batch's callbacks write go out as it ends (write_batch.py).
        with write_batch.flushed_at_end():
            self._resolve_batch(items)

    def _resolve_batch(self, items: list[tuple[_Op, Any, BaseException | None]]) -> None:
        m = self._metrics
        now = asyncio.get_running_loop().time()
        self._take_writer_flags()
        for op, result, exc in items:
            fut = op.future
            if op.kind == "add" and exc is None and (op.ledger, op.entry) in self._damaged:
                self._damaged.discard((op.ledger, op.entry))  # a repair overwrote the damaged copy
                if m is not None:
                    m.scrub_repaired.inc()
                    m.scrub_damaged.set(len(self._damaged))
            if m is not None and op.kind == "add":
                if exc is None:
                    m.adds.inc()
                    m.add_bytes.inc(len(op.value) - (ENTRY_HEAD.size if self.format >= 2 else CRC.size))
                    m.add_latency.observe(now - op.started)
                else:
                    m.add_failed(str(getattr(exc, "code", "UnknownError")))
            if op.callback is not None:
                try:
                    op.callback(exc)
                except Exception:  # one caller's bug must not leave the rest of the batch unanswered
                    log.exception("add callback for %d:%d failed", op.ledger, op.entry)
                continue
            if fut is None or fut.done():
                continue
            if exc is None:
                fut.set_result(result)
            else:
                fut.set_exception(exc)

    # --- reads (inline)

    def _read_ledger_state(self, txn: Any, ledger: int) -> _LedgerState | None:
        key = LEDGER_KEY.pack(ledger)
        raw = txn.get(key, db=self._ledgers)
        return self._decode_state(key, raw) if raw is not None else None

    def _ledger_state(self, ledger: int) -> _LedgerState | None:
        """A ledger's state as readers see it: the overlay's (journal mode), else LMDB's."""
        viewed = self._view.get(ledger)
        if viewed is not None:
            state: _LedgerState | None = viewed[0]
            return state
        with self._env.begin() as txn:
            return self._read_ledger_state(txn, ledger)

    def read_sync(self, ledger: int, entry: int) -> ReadResult:
        self._check_open()
        _check_ids(ledger, entry)
        key = ENTRY_KEY.pack(ledger, entry)
        pending = self._overlay.get((ledger, entry))
        viewed = self._view.get(ledger)
        try:
            with self._env.begin() as txn:
                if pending is not None:
                    raw: bytes | None = pending.value
                elif ledger in self._deleting:
                    raw = None
                else:
                    found = txn.get(key, db=self._entries)
                    raw = bytes(found) if found is not None else None
                state = viewed[0] if viewed is not None else self._read_ledger_state(txn, ledger)
        except _CORRUPTION as exc:
            raise self._lmdb_failed(exc, f"a read of {ledger}:{entry}") from exc
        try:
            if raw is None:
                if state is None:
                    raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
                raise NoSuchEntry(f"entry {ledger}:{entry} is not on this bookie")
            try:
                crc, data = self._decode_entry(key, raw, ledger, entry)
            except ChecksumError:
                self._report_damage(ledger, entry)
                raise
        except MagnetarError as exc:
            if self._metrics is not None:
                self._metrics.read_failed(str(exc.code))
            raise
        if state is not None and state.corrupt:
            self._report_damage(ledger, -1)
        if self._metrics is not None:
            self._metrics.reads.inc()
            self._metrics.read_bytes.inc(len(data))
        # A damaged state reads as LAC unknown: NO_ENTRY is a safe lower bound of the writer's.
        return ReadResult(data, crc, state.lac if state is not None else NO_ENTRY)

    async def read(self, ledger: int, entry: int) -> ReadResult:
        return self.read_sync(ledger, entry)

    def read_lac_sync(self, ledger: int) -> int:
        self._check_open()
        _check_ids(ledger)
        try:
            state = self._ledger_state(ledger)
        except _CORRUPTION as exc:
            raise self._lmdb_failed(exc, f"a LAC read of {ledger}") from exc
        if state is None:
            raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
        if state.corrupt:
            self._report_damage(ledger, -1)
            raise ChecksumError(f"the state of ledger {ledger} is corrupt on disk")
        return state.lac

    async def read_lac(self, ledger: int) -> int:
        return self.read_lac_sync(ledger)

    async def is_fenced(self, ledger: int) -> bool:
        """A damaged state reads as fenced (the safe answer)."""
        self._check_open()
        state = self._ledger_state(ledger)
        return state is not None and state.fenced

    async def last_entry(self, ledger: int) -> int:
        """The highest entry id stored for ``ledger`` (``NO_ENTRY`` if none), which recovery reads
        forward to; raises ``NoSuchLedger`` for a ledger this bookie never saw."""
        self._check_open()
        _check_ids(ledger)
        overlay = max((e for (led, e) in list(self._overlay) if led == ledger), default=NO_ENTRY)
        viewed = self._view.get(ledger)
        with self._env.begin() as txn:
            state = viewed[0] if viewed is not None else self._read_ledger_state(txn, ledger)
            if state is None:
                raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
            if ledger in self._deleting:
                return overlay
            cursor = txn.cursor(db=self._entries)
            if ledger < _U64_MAX and cursor.set_range(ENTRY_KEY.pack(ledger + 1, 0)):
                found = cursor.prev()
            else:
                found = cursor.last()
            if not found:
                return overlay
            led, ent = ENTRY_KEY.unpack(cursor.key())
        return max(int(ent), overlay) if led == ledger else overlay

    async def ledgers(self) -> list[int]:
        """Ids of every ledger with state on this bookie (for garbage collection and audits)."""
        self._check_open()
        viewed = dict(self._view)
        with self._env.begin() as txn:
            cursor = txn.cursor(db=self._ledgers)
            stored = [LEDGER_KEY.unpack(k)[0] for k in cursor.iternext(keys=True, values=False)]
        if not viewed:
            return stored
        found = {ledger for ledger in stored if ledger not in viewed}
        found.update(ledger for ledger, (st, _) in viewed.items() if st is not None)
        return sorted(found)

    def entry_ids(self, ledger: int, first: int = 0, last: int = _U64_MAX) -> list[int]:
        """The entry ids stored for ``ledger`` in ``first..last`` (the scrubber compares them with
        what the ledger's metadata says this bookie holds: a damaged index can lose keys)."""
        self._check_open()
        out: list[int] = []
        overlay = [e for (led, e) in list(self._overlay) if led == ledger and first <= e <= last]
        if ledger in self._deleting:
            return sorted(overlay)
        try:
            with self._env.begin() as txn:
                cursor = txn.cursor(db=self._entries)
                if cursor.set_range(ENTRY_KEY.pack(ledger, first)):
                    for key in cursor.iternext(keys=True, values=False):
                        led, ent = ENTRY_KEY.unpack(key)
                        if led != ledger or ent > last:
                            break
                        out.append(int(ent))
        except _CORRUPTION as exc:
            raise self._lmdb_failed(exc, f"a listing of ledger {ledger}") from exc
        if overlay:
            return sorted(set(out).union(overlay))
        return out

    def verify_all(self) -> VerifyReport:
        """Walk every entry and ledger state and check them (blocking: call it in a thread). A
        broken B-tree fails the storage (see the module docstring) and raises ``PersistenceError``.
        LMDB may also abort the process on some damage: ``verify_directory`` in a child process
        (what the scrubber uses) survives that."""
        self._check_open()
        self._wait_in_lmdb()
        try:
            with self._env.begin() as txn:
                return _walk(txn, self._entries, self._ledgers, self.format)
        except _CORRUPTION as exc:
            raise self._lmdb_failed(exc, "a scrub") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("bookie storage is closed")
        if self.failed is not None:
            raise PersistenceError(f"bookie storage is corrupt: {self.failed}")

    async def close(self) -> None:
        """Finish every queued write, stop the writer thread and close the environment."""
        with self._cond:
            if self._closed:
                return
            self._closed = True  # new writes are refused from here on
        journal = self._journal
        if journal is not None:
            if self._reader_loop is not None:
                self._reader_loop.remove_reader(journal.eventfd)
            durable, err = await asyncio.to_thread(journal.close)  # syncs what was appended
            self._journal_synced(durable, err)  # acknowledged, and handed to the writer thread
        with self._cond:
            self._queue.append(_Op("stop", 0))
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)
        self._env.close()
        (self._dir / OPEN_FILE).unlink(missing_ok=True)


def journal_default() -> bool:
    """Whether storages journal when the caller does not say: yes, unless ``MAGNETAR_BOOKIE_JOURNAL=0``."""
    return os.environ.get(JOURNAL_ENV, "1").strip() != "0"


def _decide(op: _Op, state: _LedgerState | None) -> tuple[_LedgerState | None, Any, bool]:
    """Journal mode: what ``_apply`` would do to ``state`` (left unchanged), decided before the
    write is journaled: (the new state, the op's result, whether to journal it). Raises
    ``LedgerFenced`` for an add to a fenced ledger, as ``_apply`` does."""
    if op.kind == "delete":
        return None, None, True
    if op.kind == "restore":
        if state is None or not state.corrupt:
            return state, False, False
        return _LedgerState(op.recovery, op.lac), True, True
    new = _LedgerState(False, NO_ENTRY) if state is None else _LedgerState(state.fenced, state.lac, state.corrupt)
    if op.kind == "fence":
        new.corrupt, new.fenced = False, True
        return new, new.lac, True
    if new.fenced and not op.recovery:
        raise LedgerFenced(f"ledger {op.ledger} is fenced")
    new.corrupt = False
    new.lac = max(new.lac, op.lac)
    return new, None, True


def _encode_record(op: _Op) -> bytes:
    return JOURNAL_RECORD.pack(_KIND_CODES[op.kind], op.ledger, op.entry, op.lac, op.recovery) + op.value


def decode_record(body: bytes) -> _Op:
    """A journal record's operation (``kind``, ``ledger``, ``entry``, ``value``, ``lac``, ``recovery``)."""
    code, ledger, entry, lac, recovery = JOURNAL_RECORD.unpack_from(body)
    return _Op(_CODE_KINDS[code], ledger, entry, body[JOURNAL_RECORD.size :], lac, recovery)


def _is_enospc(exc: BaseException) -> bool:
    """Whether a failed commit says it ran out of disk space (lmdb puts strerror in its message)."""
    text = str(exc)
    return getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in text or "ENOSPC" in text


def _decode_entry(fmt: int, key: bytes, raw: Any, ledger: int, entry: int) -> tuple[int, bytes]:
    """``(crc, data)`` of a stored value, or ``ChecksumError`` if it is damaged in any way."""
    head = ENTRY_HEAD.size if fmt >= 2 else CRC.size
    if len(raw) < head:
        raise ChecksumError(f"entry {ledger}:{entry} is truncated ({len(raw)} bytes)")
    (crc,) = CRC.unpack_from(raw)
    if fmt >= 2 and ENTRY_HEAD.unpack_from(raw)[1] != _key_check(key, crc):
        raise ChecksumError(f"entry {ledger}:{entry} is corrupt on disk (key check mismatch)")
    data = bytes(raw[head:])
    if crc32c(data) != crc:
        raise ChecksumError(f"entry {ledger}:{entry} is corrupt on disk (CRC32C mismatch)")
    return crc, data


def _decode_state(fmt: int, key: bytes, raw: Any) -> _LedgerState:
    """The state, or one marked ``corrupt`` (fenced, LAC unknown) if it fails its check."""
    raw = bytes(raw)
    if fmt >= 2:
        if len(raw) != LEDGER_STATE_V2.size:
            return _LedgerState(True, NO_ENTRY, corrupt=True)
        if crc32c(key + raw[: LEDGER_STATE.size]) != CRC.unpack_from(raw, LEDGER_STATE.size)[0]:
            return _LedgerState(True, NO_ENTRY, corrupt=True)
    elif len(raw) != LEDGER_STATE.size:
        return _LedgerState(True, NO_ENTRY, corrupt=True)
    fenced, lac = LEDGER_STATE.unpack_from(raw)
    if raw[0] not in (0, 1):
        return _LedgerState(True, NO_ENTRY, corrupt=True)
    return _LedgerState(bool(fenced), int(lac))


def _walk(txn: Any, entries_db: Any, ledgers_db: Any, fmt: int) -> VerifyReport:
    damaged_entries: list[tuple[int, int]] = []
    damaged_states: list[int] = []
    entries = states = 0
    for key, raw in txn.cursor(db=entries_db).iternext():
        key = bytes(key)
        entries += 1
        if len(key) != ENTRY_KEY.size:
            continue  # not ours to judge; cannot name an entry either
        ledger, entry = ENTRY_KEY.unpack(key)
        try:
            _decode_entry(fmt, key, raw, ledger, entry)
        except ChecksumError:
            damaged_entries.append((int(ledger), int(entry)))
    for key, raw in txn.cursor(db=ledgers_db).iternext():
        key = bytes(key)
        states += 1
        if len(key) == LEDGER_KEY.size and _decode_state(fmt, key, raw).corrupt:
            damaged_states.append(int(LEDGER_KEY.unpack(key)[0]))
    return VerifyReport(entries, states, damaged_entries, damaged_states)


def verify_directory(data_dir: str | os.PathLike[str]) -> VerifyReport:
    """``verify_all`` on a data directory opened read-only (another process may have it open):
    the scrubber runs this in a child process, because LMDB answers some damage to its pages by
    aborting the process (an assertion in ``mdb.c``) rather than with ``MDB_CORRUPTED``. Raises
    the LMDB error if it reports damage."""
    env = lmdb.open(str(Path(data_dir) / "ledgers"), readonly=True, max_dbs=3, subdir=True, lock=True)
    try:
        with env.begin() as txn:
            try:
                meta = env.open_db(b"meta", txn=txn, create=False)
                found = txn.get(FORMAT_KEY, db=meta)
            except lmdb.NotFoundError:
                found = None
            fmt = int(bytes(found)) if found is not None else 1
            entries_db = env.open_db(b"entries", txn=txn, create=False)
            ledgers_db = env.open_db(b"ledgers", txn=txn, create=False)
            return _walk(txn, entries_db, ledgers_db, fmt)
    finally:
        env.close()
