"""Bookie storage: the durable entry store of one bookie, composed of the modules beside it.

BookKeeper's bookie keeps a ledger storage over a key-value storage, with a journal in front; so
does this one. ``BookieStorage`` (what the server, the local client and the scrubber use) owns the
data directory and the public API, and composes:

- ``entry_format.py``: the key layout and value encodings, with their CRC32C checks;
- ``kv.py`` / ``lmdb_engine.py``: the key-value seam and LMDB behind it;
- ``writes.py``: how a write is decided and applied; ``group_commit.py``: the writer thread that
  commits many writes in one transaction and one sync;
- ``journal_overlay.py``: journal mode (on by default): writes acknowledged once journaled, and
  readable from an overlay until they are in the store; ``journal.py`` and ``journal_writer.py``
  one level up are the journal itself;
- ``read_only.py``: refusing adds when the disk is (nearly) full; ``reads.py``: the reads;
  ``verify.py``: the scrub walk.

Failure. Damage found on a read is reported to ``damage_listener`` (the scrubber, ``scrub.py``,
which also walks everything periodically). An error by which the engine says the store itself is
broken (LMDB: ``MDB_CORRUPTED``, a missing page, a panic) fails the storage for good: every later
call raises ``PersistenceError``, a ``CORRUPT`` file is left in the data directory, and opening
the directory again raises ``StorageCorrupt`` (the bookie refuses to start rather than serve from
a broken index; its ledgers are re-replicated from the other bookies as for a lost one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar import write_batch
from magnetar.bookie.journal import DEFAULT_SEGMENT_BYTES
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.bookie.storage.entry_format import (
    CRC,
    ENTRIES_TABLE,
    ENTRY_HEAD,
    ENTRY_KEY,
    LEDGERS_TABLE,
    META_TABLE,
    check_ids,
    encode_entry,
)
from magnetar.bookie.storage.group_commit import GroupCommit
from magnetar.bookie.storage.journal_overlay import JournalOverlay, journal_default, replay_journal
from magnetar.bookie.storage.kv import KeyValueOpener, KeyValueStorage
from magnetar.bookie.storage.lmdb_engine import DEFAULT_MAP_SIZE, LmdbEngine
from magnetar.bookie.storage.read_only import DiskUsage, ReadOnlyMode
from magnetar.bookie.storage.reads import LedgerReads
from magnetar.bookie.storage.verify import VerifyReport, walk
from magnetar.bookie.storage.writes import KvWrites, Outcome, WriteOp, open_format
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import (
    AlreadyClosed,
    BookieReadOnly,
    ChecksumError,
    MagnetarError,
    PersistenceError,
)

log = logging.getLogger(__name__)

CORRUPT_FILE = "CORRUPT"
OPEN_FILE = "OPEN"  # present while a storage has the directory open: left behind by a crash


class StorageCorrupt(RuntimeError):
    """The data directory holds a damaged LMDB environment (found earlier, or now): the bookie
    must not serve from it. Wipe the directory and start with ``--reprovision``; the cluster
    re-replicates its ledgers from the other bookies meanwhile."""


def _refused(directory: Path, env: KeyValueStorage[Any] | None, what: str, exc: BaseException) -> StorageCorrupt:
    """Damage found while opening: leave ``CORRUPT`` (a restart refuses too), close the store."""
    reason = f"LMDB reported damage while {what}: {exc!r}"
    with contextlib.suppress(OSError):
        (directory / CORRUPT_FILE).write_text(reason + "\n")
    _close_quietly(env)
    return StorageCorrupt(
        f"bookie storage in {directory} was found corrupt ({reason}); it will not serve from it: "
        "wipe the data directory and start with --reprovision (the other bookies hold the replicas)"
    )


def _close_quietly(env: KeyValueStorage[Any] | None) -> None:
    if env is not None:
        with contextlib.suppress(Exception):  # a damaged environment may fail to close cleanly too
            env.close()


class BookieStorage(LedgerReads):
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
        engine: KeyValueOpener | None = None,
    ) -> None:
        """``journal``: acknowledge writes once the journal holds them and bring the store up to
        date behind (``journal_overlay.py``); ``None`` takes ``MAGNETAR_BOOKIE_JOURNAL`` (on unless
        ``0``). ``lmdb_interval``: how long journaled writes gather before one commit to the store.
        ``engine``: what opens the key-value store (``kv.KeyValueOpener``; LMDB unless given).
        Damage the engine reports while the store opens or the journal replays into it raises
        ``StorageCorrupt`` and leaves ``CORRUPT``, as damage found later does."""
        self._dir = Path(data_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        corrupt = self._dir / CORRUPT_FILE
        if corrupt.exists():
            raise StorageCorrupt(
                f"bookie storage in {self._dir} was found corrupt ({corrupt.read_text().strip()}); it will not "
                "serve from it: wipe the data directory and start with --reprovision (the other bookies hold "
                "the replicas)"
            )
        opener: KeyValueOpener = engine if engine is not None else LmdbEngine
        env: KeyValueStorage[Any] | None = None
        try:
            #: The key-value store beneath (``kv.py``).
            self._env = env = opener(self._dir, map_size=map_size, sync=sync)
            #: The previous process did not close this directory (it crashed or was killed).
            self.unclean = (self._dir / OPEN_FILE).exists()
            (self._dir / OPEN_FILE).touch()
            self._entries = env.table(ENTRIES_TABLE)
            self._ledgers = env.table(LEDGERS_TABLE)
            self._meta = env.table(META_TABLE)
            self.format = open_format(env, self._entries, self._ledgers, self._meta)
        except opener.corruption as exc:  # a damaged meta page, or named tables that are not
            raise _refused(self._dir, env, "opening the store", exc) from exc
        except BaseException:
            _close_quietly(env)  # a failed start leaves nothing open: the next attempt can open it
            raise
        self._writes = KvWrites(self._env, self.format, self._entries, self._ledgers, self._meta)
        #: Called on the loop with ``(ledger, entry)`` (entry -1: the ledger's state) when a read finds damage.
        self.damage_listener: Callable[[int, int], None] | None = None
        #: Called on the loop with the reason when the storage fails for good (a broken index).
        self.failure_listener: Callable[[str], None] | None = None
        #: Called on the loop with the new read-only flag whenever it changes.
        self.mode_listener: Callable[[bool], None] | None = None
        self.failed: str | None = None
        self._damaged: set[tuple[int, int]] = set()  # known damaged, not yet overwritten
        self._metrics = metrics
        self._closed = False
        self._journal: JournalOverlay | None = None
        self._mode = ReadOnlyMode(
            self._dir, self.disk_usage, readonly_threshold, disk_check_interval, metrics, self._mode_changed
        )
        self._group = GroupCommit(
            self,
            self._env,
            self._writes,
            self._mode,
            self._dir,
            metrics,
            max_ops=max_batch_ops,
            max_bytes=max_batch_bytes,
            lmdb_interval=lmdb_interval,
        )
        # The writer's queue and its lock, named here too: an add without the journal goes straight in.
        self._queue = self._group.queue
        self._cond = self._group.cond
        try:
            replayed = replay_journal(
                self._dir,
                self._env,
                self._writes,
                self._meta,
                enabled=journal_default() if journal is None else journal,
                segment_bytes=journal_segment_bytes,
                sync=sync,
            )
        except opener.corruption as exc:  # the index is broken: refuse to serve, as a read finding it would
            raise _refused(self._dir, env, "replaying the journal", exc) from exc
        except BaseException:
            _close_quietly(env)
            raise
        #: Journal records applied to the store when this storage opened (left by a crash).
        self.replayed = replayed.records
        #: Why journal mode was asked for but this storage runs without it (a full disk at open).
        self.journal_unavailable = replayed.unavailable
        # The overlay of writes not yet in the store, which reads consult first (reads.py); it
        # stays empty without the journal.
        self._overlay: dict[tuple[int, int], WriteOp] = {}
        self._deleting: dict[int, WriteOp] = {}
        self._view: dict[int, list[Any]] = {}
        if replayed.journal is not None:
            self._journal = JournalOverlay(replayed.journal, self, self._group, self._mode, self._stored_state, metrics)
            self._overlay, self._deleting, self._view = (
                self._journal.entries,
                self._journal.deleting,
                self._journal.view,
            )
            self._group.journal = replayed.journal
        self.check_disk(force=True)
        self._group.start()

    @property
    def journaled(self) -> bool:
        """Whether writes are acknowledged from the journal (``journal_overlay.py``)."""
        return self._journal is not None

    @property
    def data_dir(self) -> Path:
        return self._dir

    @property
    def closing(self) -> bool:
        """Whether ``close`` has begun: new writes are refused."""
        return self._closed

    @property
    def commits(self) -> int:
        """Write transactions committed to the store (group-commit evidence)."""
        return self._group.commits

    @property
    def ops_committed(self) -> int:
        """Writes those transactions carried."""
        return self._group.ops_committed

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

    # --- disk usage and read-only mode (read_only.py)

    def disk_usage(self) -> DiskUsage:
        fs = shutil.disk_usage(self._dir)
        data_bytes = self._env.size_bytes()
        if self._journal is not None:
            data_bytes += self._journal.journal.size_bytes()
        return DiskUsage(fs.total, fs.used, data_bytes)

    def check_disk(self, *, force: bool = False) -> bool:
        """Re-evaluate read-only mode (at most once per ``disk_check_interval`` unless forced)
        and return it. The bookie leaves read-only mode by itself once space is freed."""
        return self._mode.check(force=force)

    def _mode_changed(self, value: bool) -> None:
        if self.mode_listener is not None:
            self.mode_listener(value)

    @property
    def read_only(self) -> bool:
        return self._mode.read_only

    @property
    def readonly_threshold(self) -> float | None:
        """Fraction of the filesystem in use at which adds stop (None: never)."""
        return self._mode.threshold

    @readonly_threshold.setter
    def readonly_threshold(self, value: float | None) -> None:
        self._mode.set_threshold(value)

    # --- writes: journaled on the loop (journal_overlay.py), or queued to the writer thread (group_commit.py)

    def _submit(self, op: WriteOp) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        op.future = fut
        self._enqueue(op, loop)
        return fut

    def _enqueue(self, op: WriteOp, loop: asyncio.AbstractEventLoop) -> None:
        op.loop, op.started = loop, loop.time()
        if self._journal is not None:
            if self._closed:
                raise AlreadyClosed("bookie storage is closed")
            if self.failed is not None:
                raise PersistenceError(f"bookie storage has failed: {self.failed}")
            self._journal.append(op, loop)
            return
        with self._cond:
            if self._closed:
                raise AlreadyClosed("bookie storage is closed")
            if self.failed is not None:
                raise PersistenceError(f"bookie storage is corrupt: {self.failed}")
            self._queue.append(op)
            self._cond.notify()

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

    def _add_op(self, ledger: int, entry: int, data: bytes, crc: int, lac: int, recovery: bool) -> WriteOp:
        check_ids(ledger, entry)
        try:
            if crc32c(data) != crc:
                raise ChecksumError(f"CRC32C mismatch on add of {ledger}:{entry}")
            if self._mode.check():
                raise BookieReadOnly("bookie is read-only: disk usage above the threshold")
        except MagnetarError as exc:
            if self._metrics is not None:
                self._metrics.add_failed(str(exc.code))
            raise
        key = ENTRY_KEY.pack(ledger, entry)
        return WriteOp("add", ledger, entry, encode_entry(self.format, key, crc, bytes(data)), lac, recovery)

    async def add(self, ledger: int, entry: int, data: bytes, crc: int, lac: int, recovery: bool = False) -> None:
        await self.add_nowait(ledger, entry, data, crc, lac, recovery=recovery)

    def fence_nowait(self, ledger: int) -> asyncio.Future[int]:
        """Queue a fence: durably mark the ledger fenced (creating its state if this bookie never
        saw it, so that a late add from the old writer is refused too); the future gives the LAC.
        Queued in call order with adds, so an add submitted after a fence is refused."""
        check_ids(ledger)
        return self._submit(WriteOp("fence", ledger))

    async def fence(self, ledger: int) -> int:
        return int(await self.fence_nowait(ledger))

    def delete_ledger_nowait(self, ledger: int) -> asyncio.Future[None]:
        """Queue the deletion of every entry and the state of a ledger. Idempotent: deleting an
        unknown ledger succeeds, so a retried delete does not fail."""
        check_ids(ledger)
        return self._submit(WriteOp("delete", ledger))

    async def delete_ledger(self, ledger: int) -> None:
        await self.delete_ledger_nowait(ledger)

    async def restore_state(self, ledger: int, fenced: bool, lac: int) -> bool:
        """Rewrite a ledger state that fails its CRC with ``(fenced, lac)`` (the scrubber derives them
        from the ledger's metadata). Applied in the writer's queue order and only while the stored
        record is still damaged, so a fence or recovery add that rewrote it meanwhile wins.
        Returns whether it rewrote anything."""
        check_ids(ledger)
        return bool(await self._submit(WriteOp("restore", ledger, lac=lac, recovery=fenced)))

    # --- outcomes, on the loop

    def _applied(self, batch: list[WriteOp]) -> None:
        """Journaled writes are in the store (``batch``; empty after a failed commit, whose
        flags still take effect): drop them from the overlay."""
        self._take_writer_flags()
        if self._journal is not None:
            self._journal.applied(batch)

    def _take_writer_flags(self) -> None:
        """What the writer thread found (a broken index, a full disk) takes effect."""
        pending_failure = self._group.pending_failure
        if pending_failure is not None:
            self.fail(pending_failure)
        if self._mode.dirty:
            self._mode.take_dirty()

    def _resolve(self, items: list[Outcome]) -> None:
        # The receipts and dispatches this batch's callbacks write go out as it ends (write_batch.py).
        with write_batch.flushed_at_end():
            self._resolve_batch(items)

    def _resolve_batch(self, items: list[Outcome]) -> None:
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

    # --- the scrub walk, and closing

    def verify_all(self) -> VerifyReport:
        """Walk every entry and ledger state and check them (blocking: call it in a thread). A
        broken B-tree fails the storage (see the module docstring) and raises ``PersistenceError``.
        LMDB may also abort the process on some damage: ``verify_directory`` in a child process
        (what the scrubber uses) survives that."""
        self._check_open()
        self._group.wait_in_lmdb()
        try:
            with self._env.begin() as txn:
                return walk(txn, self._entries, self._ledgers, self.format)
        except self._env.corruption as exc:
            raise self._lmdb_failed(exc, "a scrub") from exc

    async def close(self) -> None:
        """Finish every queued write, stop the writer thread and close the store."""
        with self._cond:
            if self._closed:
                return
            self._closed = True  # new writes are refused from here on
        if self._journal is not None:
            await self._journal.close()  # syncs what was appended, acknowledged, handed to the writer thread
        await self._group.stop()
        self._env.close()
        (self._dir / OPEN_FILE).unlink(missing_ok=True)
