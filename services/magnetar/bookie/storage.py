"""Bookie storage: entries and per-ledger state in LMDB, written by one group-commit thread.

Layout (one LMDB environment in the data directory; ``STORAGE.md`` has the full story):

- named DB ``entries``: key ``struct '>QQ' (ledger_id, entry_id)`` (big-endian, so one ledger's
  entries are contiguous and in entry order), value ``4-byte big-endian CRC32C + data``.
- named DB ``ledgers``: key ``struct '>Q' ledger_id``, value ``struct '>?q' (fenced, lac)``.

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
``ChecksumError`` instead of as bad data.

Reads run inline on the event loop: an LMDB read of a cached page is a few microseconds, less
than a hop to a thread pool. A cold read page-faults on the loop; a bookie serving mostly tailing
reads (the common case) rarely does.
"""

from __future__ import annotations

import asyncio
import collections
import os
import shutil
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

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

ENTRY_KEY = struct.Struct(">QQ")
LEDGER_KEY = struct.Struct(">Q")
LEDGER_STATE = struct.Struct(">?q")
CRC = struct.Struct(">I")
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


@dataclass(slots=True)
class _LedgerState:
    fenced: bool
    lac: int


@dataclass(slots=True)
class _Op:
    kind: str  # "add" | "fence" | "delete" | "stop"
    ledger: int
    entry: int = 0
    value: bytes = b""
    lac: int = NO_ENTRY
    recovery: bool = False
    future: asyncio.Future[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    started: float = 0.0


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
    ) -> None:
        self._dir = Path(data_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(
            str(self._dir / "ledgers"), map_size=map_size, max_dbs=2, sync=sync, metasync=sync, subdir=True
        )
        self._entries = self._env.open_db(b"entries")
        self._ledgers = self._env.open_db(b"ledgers")
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
        self.check_disk(force=True)
        self._thread = threading.Thread(target=self._writer, name="magnetar-bookie-writer", daemon=True)
        self._thread.start()

    @property
    def data_dir(self) -> Path:
        return self._dir

    # --- disk usage and read-only mode

    def disk_usage(self) -> DiskUsage:
        fs = shutil.disk_usage(self._dir)
        data_file = self._dir / "ledgers" / "data.mdb"
        data_bytes = data_file.stat().st_blocks * 512 if data_file.exists() else 0
        return DiskUsage(fs.total, fs.used, data_bytes)

    def check_disk(self, *, force: bool = False) -> bool:
        """Re-evaluate read-only mode (at most once per ``disk_check_interval`` unless forced)
        and return it. The bookie leaves read-only mode by itself once space is freed."""
        now = time.monotonic()
        if self._readonly_threshold is None or (not force and now - self._last_disk_check < self._disk_check_interval):
            return self._read_only
        self._last_disk_check = now
        self._read_only = self.disk_usage().fraction >= self._readonly_threshold
        if self._metrics is not None:
            self._metrics.read_only.set(1 if self._read_only else 0)
        return self._read_only

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
        if value is None:
            self._read_only = False
        self.check_disk(force=True)

    # --- writes (queued to the group-commit thread)

    def _submit(self, op: _Op) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        op.future, op.loop, op.started = fut, loop, loop.time()
        with self._cond:
            if self._closed:
                raise AlreadyClosed("bookie storage is closed")
            self._queue.append(op)
            self._cond.notify()
        return fut

    def add_nowait(
        self, ledger: int, entry: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> asyncio.Future[None]:
        """Queue an add and return the future of its durable acknowledgement. Checks that can
        fail without touching the disk (ids, CRC, read-only) raise here, before queueing; the
        server uses this form so that pipelined adds keep their arrival order."""
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
        return self._submit(_Op("add", ledger, entry, CRC.pack(crc) + bytes(data), lac, recovery))

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

    # --- the writer thread

    def _writer(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
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
                self._commit(batch)
            if stop:
                return

    def _state(self, txn: Any, ledger: int, states: dict[int, _LedgerState | None]) -> _LedgerState | None:
        if ledger not in states:
            raw = txn.get(LEDGER_KEY.pack(ledger), db=self._ledgers)
            states[ledger] = _LedgerState(*LEDGER_STATE.unpack(raw)) if raw is not None else None
        return states[ledger]

    def _apply(self, txn: Any, op: _Op, states: dict[int, _LedgerState | None], dirty: set[int]) -> Any:
        state = self._state(txn, op.ledger, states)
        if op.kind == "delete":
            cursor = txn.cursor(db=self._entries)
            prefix = LEDGER_KEY.pack(op.ledger)
            if cursor.set_range(ENTRY_KEY.pack(op.ledger, 0)):
                while bytes(cursor.key())[:8] == prefix:
                    if not cursor.delete():
                        break
            txn.delete(prefix, db=self._ledgers)
            states[op.ledger] = None
            dirty.discard(op.ledger)
            return None
        if state is None:
            state = states[op.ledger] = _LedgerState(False, NO_ENTRY)
        if op.kind == "fence":
            state.fenced = True
            dirty.add(op.ledger)
            return state.lac
        if state.fenced and not op.recovery:
            raise LedgerFenced(f"ledger {op.ledger} is fenced")
        txn.put(ENTRY_KEY.pack(op.ledger, op.entry), op.value, db=self._entries)
        if op.lac > state.lac:
            state.lac = op.lac
        dirty.add(op.ledger)
        return None

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
                for ledger in dirty:
                    st = states[ledger]
                    assert st is not None
                    txn.put(LEDGER_KEY.pack(ledger), LEDGER_STATE.pack(st.fenced, st.lac), db=self._ledgers)
        except Exception as commit_error:  # the commit failed (disk full, I/O error): nothing is durable
            failure = PersistenceError(f"bookie write transaction failed: {commit_error}")
            outcomes = [(None, failure)] * len(batch)
        self.commits += 1
        self.ops_committed += len(batch)
        if self._metrics is not None:
            self._metrics.batch_size.observe(len(batch))
            self._metrics.commit_latency.observe(time.perf_counter() - started)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Op, Any, BaseException | None]]] = {}
        for op, (result, error) in zip(batch, outcomes, strict=True):
            assert op.loop is not None
            by_loop.setdefault(op.loop, []).append((op, result, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._resolve, items)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _resolve(self, items: list[tuple[_Op, Any, BaseException | None]]) -> None:
        m = self._metrics
        now = asyncio.get_running_loop().time()
        for op, result, exc in items:
            fut = op.future
            if m is not None and op.kind == "add":
                if exc is None:
                    m.adds.inc()
                    m.add_bytes.inc(len(op.value) - CRC.size)
                    m.add_latency.observe(now - op.started)
                else:
                    m.add_failed(str(getattr(exc, "code", "UnknownError")))
            if fut is None or fut.done():
                continue
            if exc is None:
                fut.set_result(result)
            else:
                fut.set_exception(exc)

    # --- reads (inline)

    def _read_ledger_state(self, txn: Any, ledger: int) -> _LedgerState | None:
        raw = txn.get(LEDGER_KEY.pack(ledger), db=self._ledgers)
        return _LedgerState(*LEDGER_STATE.unpack(raw)) if raw is not None else None

    def read_sync(self, ledger: int, entry: int) -> ReadResult:
        self._check_open()
        _check_ids(ledger, entry)
        with self._env.begin() as txn:
            raw = txn.get(ENTRY_KEY.pack(ledger, entry), db=self._entries)
            state = self._read_ledger_state(txn, ledger)
        try:
            if raw is None:
                if state is None:
                    raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
                raise NoSuchEntry(f"entry {ledger}:{entry} is not on this bookie")
            if len(raw) < CRC.size:
                raise ChecksumError(f"entry {ledger}:{entry} is truncated ({len(raw)} bytes)")
            (crc,) = CRC.unpack_from(raw)
            data = bytes(raw[CRC.size :])
            if crc32c(data) != crc:
                raise ChecksumError(f"entry {ledger}:{entry} is corrupt on disk (CRC32C mismatch)")
        except MagnetarError as exc:
            if self._metrics is not None:
                self._metrics.read_failed(str(exc.code))
            raise
        if self._metrics is not None:
            self._metrics.reads.inc()
            self._metrics.read_bytes.inc(len(data))
        return ReadResult(data, crc, state.lac if state is not None else NO_ENTRY)

    async def read(self, ledger: int, entry: int) -> ReadResult:
        return self.read_sync(ledger, entry)

    def read_lac_sync(self, ledger: int) -> int:
        self._check_open()
        _check_ids(ledger)
        with self._env.begin() as txn:
            state = self._read_ledger_state(txn, ledger)
        if state is None:
            raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
        return state.lac

    async def read_lac(self, ledger: int) -> int:
        return self.read_lac_sync(ledger)

    async def is_fenced(self, ledger: int) -> bool:
        self._check_open()
        with self._env.begin() as txn:
            state = self._read_ledger_state(txn, ledger)
        return state is not None and state.fenced

    async def last_entry(self, ledger: int) -> int:
        """The highest entry id stored for ``ledger`` (``NO_ENTRY`` if none), which recovery reads
        forward to; raises ``NoSuchLedger`` for a ledger this bookie never saw."""
        self._check_open()
        _check_ids(ledger)
        with self._env.begin() as txn:
            if self._read_ledger_state(txn, ledger) is None:
                raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
            cursor = txn.cursor(db=self._entries)
            if ledger < _U64_MAX and cursor.set_range(ENTRY_KEY.pack(ledger + 1, 0)):
                found = cursor.prev()
            else:
                found = cursor.last()
            if not found:
                return NO_ENTRY
            led, ent = ENTRY_KEY.unpack(cursor.key())
        return int(ent) if led == ledger else NO_ENTRY

    async def ledgers(self) -> list[int]:
        """Ids of every ledger with state on this bookie (for garbage collection and audits)."""
        self._check_open()
        with self._env.begin() as txn:
            cursor = txn.cursor(db=self._ledgers)
            return [LEDGER_KEY.unpack(k)[0] for k in cursor.iternext(keys=True, values=False)]

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("bookie storage is closed")

    async def close(self) -> None:
        """Finish every queued write, stop the writer thread and close the environment."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._queue.append(_Op("stop", 0))
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)
        self._env.close()
