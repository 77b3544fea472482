"""The embedded metadata store: ``MetadataStore`` on one LMDB environment, for standalone mode.

Layout (one environment in a directory, three named databases):

- ``kv``: key = the path as UTF-8, value = msgpack ``[version, ephemeral, value]``.
- ``ephemeral``: key = path of every ephemeral key, so that ending a session touches only those
  keys instead of scanning the tree.
- ``meta``: ``revision``, the store-wide write counter.

Versions come from the store-wide revision (as etcd's ``mod_revision`` does), not from a per-key
counter that restarts at zero. A key that is deleted and created again therefore never gets back
a version it had before, so a stale compare-and-set from before the delete cannot succeed.

Sessions. The embedded store serves exactly one process: a ``flock`` on ``store.lock`` in the
directory makes a second opener (another process, or a second store in this one) fail instead
of silently sharing ephemeral keys. Every ephemeral key belongs to the current session. ``close``
deletes them; a process killed with -9 leaves them on disk, so opening the store deletes every
ephemeral key left by an earlier session (nobody else can own them: the lock says so).

Threading decision (measured on the build machine: a durable LMDB commit costs ~2 ms of fsync,
a point read ~7 µs). Writes run on one dedicated thread, so an fsync never stalls the event loop
for milliseconds, and writes are serialized in submission order, which keeps compare-and-set
simple. They are group-committed: the writes queued while a commit runs go into the next
transaction together (at most ``MAX_GROUP``), each checked and applied in order, and each answered
only after that transaction's commit. One fsync then serves many writes: loading a topic takes
several, and one transaction each made topic loading wait on the disk (about 300 topics/s).
Reads run inline on the loop: at microseconds, a thread hop (~50 µs) would cost more than it
saves. A read after an awaited write always sees it (the write committed first).

Watches are in-process only. Callbacks are scheduled with ``loop.call_soon`` after the write has
committed, so a watcher that reacts by reading sees the new state.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgpack

from magnetar.metadata.store import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    Notification,
    Stat,
    Versioned,
    Watcher,
    check_path,
    is_under,
)
from magnetar.protocol.errors import AlreadyClosed, BadVersion, InvalidCommand, NotFound

T = TypeVar("T")
_Queued = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]

# Most operations one group commit carries: bounds how long the first of them waits for the rest.
MAX_GROUP = 256

DEFAULT_MAP_SIZE = 64 * 1024**3  # virtual: LMDB's map is sparse, this is only an upper bound
_REVISION_KEY = b"revision"
_U64 = struct.Struct(">Q")


class LmdbMetadataStore:
    """``MetadataStore`` on LMDB. ``LmdbMetadataStore(path)`` opens synchronously (one short
    cleanup transaction); ``await LmdbMetadataStore.open(path)`` does the same off the loop."""

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        self._dir = Path(path)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self._dir / "store.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise RuntimeError(
                f"metadata store {self._dir} is already open (the embedded store serves one process)"
            ) from None
        self._env = lmdb.open(str(self._dir), map_size=map_size, max_dbs=3, sync=True, metasync=True, subdir=True)
        self._kv = self._env.open_db(b"kv")
        self._eph = self._env.open_db(b"ephemeral")
        self._meta = self._env.open_db(b"meta")
        self._max_key = int(self._env.max_key_size())
        self._watchers: dict[int, tuple[str, Watcher]] = {}
        self._next_watch = 0
        self._closed = False
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="magnetar-metadata")
        self._group_lock = threading.Lock()  # guards _queued and _draining (loop and writer thread)
        self._queued: list[_Queued] = []
        self._draining = False
        self._delete_ephemerals()  # left by a session that died without close()

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> LmdbMetadataStore:
        return await asyncio.to_thread(cls, path, map_size=map_size)

    def _key(self, path: str) -> bytes:
        """The LMDB key of ``path``. LMDB refuses keys over ``max_key_size`` (511 bytes) with
        ``BadValsizeError``, which would surface as a server error; names that are each valid can
        still add up past it (a 1,024-character subscription under a long topic: found by
        tests/fuzz/test_admin.py), so such a write is refused here as the caller's mistake."""
        key = path.encode()
        if len(key) > self._max_key:
            raise InvalidCommand(
                f"name too long for the embedded metadata store: its key {path[:80]!r}... is "
                f"{len(key)} bytes, over LMDB's limit of {self._max_key}"
            )
        return key

    def _fits(self, path: str) -> bool:
        """Whether ``path`` can be a key at all: a longer one is simply absent (reads, lists)."""
        return len(path.encode()) <= self._max_key

    # --- helpers run on the writer thread

    def _next_revision(self, txn: Any) -> int:
        raw = txn.get(_REVISION_KEY, db=self._meta)
        rev = (_U64.unpack(raw)[0] if raw is not None else 0) + 1
        txn.put(_REVISION_KEY, _U64.pack(rev), db=self._meta)
        return rev

    @staticmethod
    def _decode(raw: bytes) -> tuple[int, bool, bytes]:
        version, ephemeral, value = msgpack.unpackb(raw, raw=False)
        return int(version), bool(ephemeral), bytes(value)

    def _delete_ephemerals(self) -> list[str]:
        deleted: list[str] = []
        with self._env.begin(write=True) as txn:
            cursor = txn.cursor(db=self._eph)
            for key in list(cursor.iternext(keys=True, values=False)):
                txn.delete(key, db=self._kv)
                txn.delete(key, db=self._eph)
                deleted.append(bytes(key).decode())
        return deleted

    # Each ``_*_txn`` runs inside a group's write transaction and checks everything that can
    # refuse it before it writes anything, so a refused operation leaves the transaction as it
    # found it and the others of its group still commit.

    def _put_txn(self, txn: Any, path: str, value: bytes, expected: int, ephemeral: bool) -> Stat:
        key = self._key(path)
        raw = txn.get(key, db=self._kv)
        current = self._decode(raw)[0] if raw is not None else None
        if expected == MUST_NOT_EXIST and current is not None:
            raise BadVersion(f"{path} already exists (version {current})")
        if expected >= 0 and current != expected:
            raise BadVersion(f"{path}: expected version {expected}, found {current}")
        rev = self._next_revision(txn)
        txn.put(key, msgpack.packb([rev, ephemeral, value], use_bin_type=True), db=self._kv)
        if ephemeral:
            txn.put(key, b"", db=self._eph)
        else:
            txn.delete(key, db=self._eph)
        return Stat(rev, ephemeral)

    def _delete_txn(self, txn: Any, path: str, expected: int) -> None:
        if not self._fits(path):
            raise NotFound(f"{path[:80]}... does not exist")
        key = path.encode()
        raw = txn.get(key, db=self._kv)
        if raw is None:
            raise NotFound(f"{path} does not exist")
        current = self._decode(raw)[0]
        if expected >= 0 and current != expected:
            raise BadVersion(f"{path}: expected version {expected}, found {current}")
        txn.delete(key, db=self._kv)
        txn.delete(key, db=self._eph)

    def _increment_txn(self, txn: Any, path: str) -> int:
        key = self._key(path)
        raw = txn.get(key, db=self._kv)
        current = 0
        ephemeral = False
        if raw is not None:
            _, ephemeral, value = self._decode(raw)
            try:
                current = int(value.decode())
            except ValueError:
                raise ValueError(f"{path} does not hold a counter: {value[:40]!r}") from None
        rev = self._next_revision(txn)
        new = current + 1
        txn.put(key, msgpack.packb([rev, ephemeral, str(new).encode()], use_bin_type=True), db=self._kv)
        return new

    # --- group commit

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(txn, *args)`` in the next group's transaction; its result once that committed."""
        self._check_open()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._group_lock:
            self._queued.append((fn, args, fut))
            start = not self._draining
            self._draining = True
        if start:
            self._writer.submit(self._drain, loop)
        return await fut

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Writer thread: commit what is queued as groups, until the queue is empty."""
        while True:
            with self._group_lock:
                group, self._queued = self._queued[:MAX_GROUP], self._queued[MAX_GROUP:]
                if not group:
                    self._draining = False
                    return
            for fut, ok, value in self._commit_group(group):
                loop.call_soon_threadsafe(_settle, fut, ok, value)

    def _commit_group(self, group: list[_Queued]) -> list[tuple[asyncio.Future[Any], bool, Any]]:
        outcomes: list[tuple[asyncio.Future[Any], bool, Any]] = []
        try:
            with self._env.begin(write=True) as txn:
                for fn, args, fut in group:
                    try:
                        outcomes.append((fut, True, fn(txn, *args)))
                    except lmdb.Error:
                        raise  # the transaction itself is broken: nothing of the group is kept
                    except Exception as exc:  # refused before writing (see above): the rest go on
                        outcomes.append((fut, False, exc))
        except Exception as exc:  # an LMDB failure or the commit's: no operation of the group happened
            return [(fut, False, exc) for _, _, fut in group]
        return outcomes

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("the metadata store is closed")

    def _notify(self, kind: str, path: str) -> None:
        if not self._watchers:
            return
        loop = asyncio.get_running_loop()
        note = Notification(kind, path)
        for prefix, callback in list(self._watchers.values()):
            if is_under(path, prefix):
                loop.call_soon(callback, note)

    # --- MetadataStore

    async def get(self, path: str) -> Versioned | None:
        self._check_open()
        if not self._fits(check_path(path)):
            return None
        with self._env.begin(db=self._kv) as txn:
            raw = txn.get(path.encode())
        if raw is None:
            return None
        version, ephemeral, value = self._decode(raw)
        return Versioned(value, Stat(version, ephemeral))

    async def put(
        self, path: str, value: bytes, expected_version: int = ANY_VERSION, *, ephemeral: bool = False
    ) -> Stat:
        if check_path(path) == "/":
            raise ValueError("the root path holds no value")
        stat = await self._write(self._put_txn, path, bytes(value), expected_version, ephemeral)
        self._notify("put", path)
        return stat

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await self._write(self._delete_txn, check_path(path), expected_version)
        self._notify("delete", path)

    async def children(self, path: str) -> list[str]:
        self._check_open()
        prefix = check_path(path).rstrip("/") + "/"
        pre = prefix.encode()
        names: set[str] = set()
        if not self._fits(prefix):
            return []
        with self._env.begin(db=self._kv) as txn:
            cursor = txn.cursor()
            found = cursor.set_range(pre)
            while found:
                key = bytes(cursor.key())
                if not key.startswith(pre):
                    break
                name, sep, _ = key[len(pre) :].partition(b"/")
                names.add(name.decode())
                # Skip the whole subtree below ``name`` in one seek ('0' sorts right after '/').
                found = cursor.set_range(pre + name + b"0") if sep else cursor.next()
        return sorted(names)

    async def exists(self, path: str) -> bool:
        return await self.get(path) is not None

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        check_path(prefix)
        token = self._next_watch
        self._next_watch += 1
        self._watchers[token] = (prefix, callback)

        def unsubscribe() -> None:
            self._watchers.pop(token, None)

        return unsubscribe

    async def increment(self, path: str) -> int:
        if check_path(path) == "/":
            raise ValueError("the root path holds no value")
        value = await self._write(self._increment_txn, path)
        self._notify("put", path)
        return value

    async def close(self) -> None:
        """Delete this session's ephemeral keys (watchers hear about it), then release the
        environment and the directory lock. Closing twice is harmless."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        deleted = await loop.run_in_executor(self._writer, self._delete_ephemerals)
        self._closed = True
        for path in deleted:
            self._notify("delete", path)
        self._writer.shutdown(wait=True)
        self._env.close()
        os.close(self._lock_fd)

    @property
    def path(self) -> Path:
        return self._dir


def _conformance() -> None:
    """Never called: makes mypy prove that ``LmdbMetadataStore`` implements ``MetadataStore``."""
    from magnetar.metadata.store import MetadataStore

    _impl: type[MetadataStore] = LmdbMetadataStore


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():  # the caller was cancelled meanwhile; the write happened (or not) all the same
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)
