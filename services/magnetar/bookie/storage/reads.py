"""Reads of a bookie's storage: entries, LACs, fencing, listings, answered inline on the event loop.

Why inline: a read of a cached page is a few microseconds, less than a hop to a thread pool. A
cold read page-faults on the loop; a bookie serving mostly tailing reads (the common case) rarely
does. Every read consults the journal's overlay first (writes acknowledged but not yet in the
store), then one read transaction of the store, and checks what it found (``entry_format.py``):
damage is reported, never returned as data.

``LedgerReads`` is a base class of ``BookieStorage`` rather than an object it holds, so that the
server's call per read lands here directly, with no forwarding call in between; it uses the
storage's store, tables, overlay and failure handling, declared below.
"""

from __future__ import annotations

import struct
from typing import Any

from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.bookie.storage.entry_format import (
    ENTRY_KEY,
    LEDGER_KEY,
    U64_MAX,
    LedgerState,
    check_ids,
    decode_entry,
    decode_state,
)
from magnetar.bookie.storage.kv import KeyValueStorage, KvTransaction
from magnetar.bookie.storage.writes import WriteOp
from magnetar.ledger.bookie_api import NO_ENTRY, ReadResult
from magnetar.protocol.errors import (
    AlreadyClosed,
    ChecksumError,
    MagnetarError,
    NoSuchEntry,
    NoSuchLedger,
    PersistenceError,
)


class LedgerReads:
    """The read side of ``BookieStorage`` (which sets every attribute declared here)."""

    format: int
    failed: str | None
    _env: KeyValueStorage[Any]
    _entries: Any
    _ledgers: Any
    _metrics: BoundBookieMetrics | None
    _closed: bool
    # The journal's overlay (journal_overlay.py); empty without the journal.
    _overlay: dict[tuple[int, int], WriteOp]
    _deleting: dict[int, WriteOp]
    _view: dict[int, list[Any]]

    def _report_damage(self, ledger: int, entry: int) -> None:
        raise NotImplementedError

    def _lmdb_failed(self, exc: BaseException, what: str) -> PersistenceError:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("bookie storage is closed")
        if self.failed is not None:
            raise PersistenceError(f"bookie storage is corrupt: {self.failed}")

    def _read_ledger_state(self, txn: KvTransaction[Any], ledger: int) -> LedgerState | None:
        key = LEDGER_KEY.pack(ledger)
        raw = txn.get(key, db=self._ledgers)
        return decode_state(self.format, key, raw) if raw is not None else None

    def _ledger_state(self, ledger: int) -> LedgerState | None:
        """A ledger's state as readers see it: the overlay's (journal mode), else the store's."""
        viewed = self._view.get(ledger)
        if viewed is not None:
            state: LedgerState | None = viewed[0]
            return state
        with self._env.begin() as txn:
            return self._read_ledger_state(txn, ledger)

    def _stored_state(self, ledger: int) -> LedgerState | None:
        """A ledger's state in the store. A function of its own so that no frame that may be kept
        alive (by an exception's traceback) holds the read transaction: py-lmdb keeps a finished
        read transaction's reader slot until the object is freed, and 126 such slots stopped every
        read (``MDB_READERS_FULL``; the bookie fuzzer found it)."""
        try:
            with self._env.begin() as txn:
                return self._read_ledger_state(txn, ledger)
        except self._env.corruption as exc:
            raise self._lmdb_failed(exc, f"a state read of ledger {ledger}") from exc

    def read_sync(self, ledger: int, entry: int) -> ReadResult:
        self._check_open()
        check_ids(ledger, entry)
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
        except self._env.corruption as exc:
            raise self._lmdb_failed(exc, f"a read of {ledger}:{entry}") from exc
        try:
            if raw is None:
                if state is None:
                    raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
                raise NoSuchEntry(f"entry {ledger}:{entry} is not on this bookie")
            try:
                crc, data = decode_entry(self.format, key, raw, ledger, entry)
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
        check_ids(ledger)
        try:
            state = self._ledger_state(ledger)
        except self._env.corruption as exc:
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
        check_ids(ledger)
        overlay = max((e for (led, e) in list(self._overlay) if led == ledger), default=NO_ENTRY)
        viewed = self._view.get(ledger)
        with self._env.begin() as txn:
            state = viewed[0] if viewed is not None else self._read_ledger_state(txn, ledger)
            if state is None:
                raise NoSuchLedger(f"ledger {ledger} is not on this bookie")
            if ledger in self._deleting:
                return overlay
            try:
                cursor = txn.cursor(db=self._entries)
                if ledger < U64_MAX and cursor.set_range(ENTRY_KEY.pack(ledger + 1, 0)):
                    found = cursor.prev()
                else:
                    found = cursor.last()
                if not found:
                    return overlay
                led, ent = ENTRY_KEY.unpack(cursor.key())
            except self._listing_damage as exc:  # a key of the wrong size, as in a listing
                raise self._lmdb_failed(exc, f"the last entry of ledger {ledger}") from exc
        return max(int(ent), overlay) if led == ledger else overlay

    async def ledgers(self) -> list[int]:
        """Ids of every ledger with state on this bookie (for garbage collection and audits)."""
        self._check_open()
        viewed = dict(self._view)
        try:
            with self._env.begin() as txn:
                cursor = txn.cursor(db=self._ledgers)
                stored = [LEDGER_KEY.unpack(k)[0] for k in cursor.iternext(keys=True, values=False)]
        except self._listing_damage as exc:  # a key of the wrong size: as below
            raise self._lmdb_failed(exc, "the listing of ledgers") from exc
        if not viewed:
            return stored
        found = {ledger for ledger in stored if ledger not in viewed}
        found.update(ledger for ledger, (st, _) in viewed.items() if st is not None)
        return sorted(found)

    @property
    def _listing_damage(self) -> tuple[type[BaseException], ...]:
        """What a listing of keys takes as damage: the engine's damage errors, and a key of the
        wrong size (``struct.error``), which LMDB hands back from a page whose header was damaged
        without noticing it: every key of these tables has one size."""
        damage: tuple[type[BaseException], ...] = (*self._env.corruption, struct.error)
        return damage

    def entry_ids(self, ledger: int, first: int = 0, last: int = U64_MAX) -> list[int]:
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
        except self._listing_damage as exc:
            raise self._lmdb_failed(exc, f"a listing of ledger {ledger}") from exc
        if overlay:
            return sorted(set(out).union(overlay))
        return out
