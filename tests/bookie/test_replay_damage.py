"""Every LMDB error that means a damaged environment is treated as damage, wherever it surfaces.

Damaged pages surface as whichever error LMDB meets first, which depends on what the journal
replays over them: a flipped page header once came up as ``MDB_CURSOR_FULL`` from a ``put`` of the
journal replay, and the bookie died with a traceback instead of refusing to start. Here an engine
wrapper behind the storage's key-value seam (``kv.KeyValueOpener``) raises each damage error of
``lmdb_engine.CORRUPTION`` at each place a store meets it while opening (the environment's open,
a read, a write, a commit): the storage must raise ``StorageCorrupt`` and leave ``CORRUPT``, so
that the bookie refuses to start now and on every later start. Errors that are not damage (a full
disk, a full map) must not mark the directory. After start, damage met by the writer thread while
it brings journaled writes into the store fails the storage the same way instead of being retried
forever.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest

from magnetar.bookie.storage import CORRUPT_FILE, BookieStorage, StorageCorrupt
from magnetar.bookie.storage.kv import KeyValueStorage, KvCursor
from magnetar.bookie.storage.lmdb_engine import CORRUPTION, LmdbEngine
from magnetar.protocol.errors import PersistenceError

from .conftest import entry

PLACES = ("open", "get", "put", "commit")
NOT_DAMAGE = (lmdb.DiskError, lmdb.MapFullError, lmdb.TxnFullError, lmdb.ReadersFullError)

# A bookie that journaled 100 adds and a fence, none in LMDB yet, then was killed: its next start replays them.
KILLED = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from magnetar.bookie.storage import BookieStorage
    from magnetar.protocol.checksum import crc32c

    async def main(directory):
        storage = BookieStorage(directory, journal=True, lmdb_interval=3600)
        for e in range(100):
            data = f"e{e}".encode() * 10
            await storage.add(3, e, data, crc32c(data), e - 1)
        await storage.fence(4)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(sys.argv[1]))
    """
)


class FaultyTxn:
    """A transaction of the wrapped store that raises the engine's error at its place."""

    def __init__(self, inner: Any, engine: FaultyEngine, write: bool) -> None:
        self._inner = inner
        self._engine = engine
        self._write = write
        self._puts = 0

    def __enter__(self) -> FaultyTxn:
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None and self._write and self._puts and self._engine.fires("commit"):
            self._inner.__exit__(RuntimeError, RuntimeError("aborted"), None)  # abandoned, as a failed commit is
            raise self._engine.error("mdb_txn_commit: injected")
        self._inner.__exit__(*exc)

    def get(self, key: bytes, default: None = None, db: Any = None) -> bytes | None:
        if self._engine.fires("get"):
            raise self._engine.error("mdb_get: injected")
        found: bytes | None = self._inner.get(key, default, db=db)
        return found

    def put(
        self,
        key: bytes,
        value: bytes,
        dupdata: bool = True,
        overwrite: bool = True,
        append: bool = False,
        db: Any = None,
    ) -> bool:
        if self._engine.fires("put"):
            raise self._engine.error("mdb_put: injected")
        self._puts += 1
        return bool(self._inner.put(key, value, dupdata=dupdata, overwrite=overwrite, append=append, db=db))

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        return bool(self._inner.delete(key, value, db=db))

    def cursor(self, db: Any = None) -> KvCursor:
        cursor: KvCursor = self._inner.cursor(db=db)
        return cursor

    def stat(self, db: Any = None) -> Any:
        return self._inner.stat(db)


class FaultyStore:
    """``LmdbEngine`` with its transactions wrapped (``kv.KeyValueStorage``)."""

    corruption = CORRUPTION

    def __init__(self, inner: LmdbEngine, engine: FaultyEngine) -> None:
        self._inner = inner
        self._engine = engine

    def table(self, name: bytes) -> Any:
        return self._inner.table(name)

    def begin(self, *, write: bool = False) -> FaultyTxn:
        return FaultyTxn(self._inner.begin(write=write), self._engine, write)

    def size_bytes(self) -> int:
        return self._inner.size_bytes()

    def close(self) -> None:
        self._inner.close()


class FaultyEngine:
    """A ``kv.KeyValueOpener``: opens LMDB and raises ``error`` once, at ``place``, once armed."""

    corruption = CORRUPTION

    def __init__(self, error: type[lmdb.Error], place: str, *, armed: bool = True) -> None:
        self.error = error
        self.place = place
        self.armed = armed
        self.fired = 0

    def fires(self, place: str) -> bool:
        if self.armed and place == self.place:
            self.fired += 1
            self.armed = False
            return True
        return False

    def __call__(self, data_dir: Path, *, map_size: int, sync: bool) -> KeyValueStorage[Any]:
        if self.fires("open"):
            raise self.error("mdb_env_open: injected")
        return FaultyStore(LmdbEngine(data_dir, map_size=map_size, sync=sync), self)


@pytest.fixture(scope="module")
def journaled_crash(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory left by a killed bookie with 101 journal records to replay."""
    directory = tmp_path_factory.mktemp("killed") / "bookie"
    done = subprocess.run([sys.executable, "-c", KILLED, str(directory)], capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr.decode()
    return directory


@pytest.fixture
def crashed(journaled_crash: Path, tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "bookie"
    shutil.copytree(journaled_crash, directory)
    yield directory


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("error", CORRUPTION, ids=lambda e: e.__name__)
def test_damage_met_while_opening_or_replaying_refuses_the_store_for_good(
    crashed: Path, error: type[lmdb.Error], place: str
) -> None:
    engine = FaultyEngine(error, place)
    with pytest.raises(StorageCorrupt) as refused:
        BookieStorage(crashed, journal=True, engine=engine)
    assert engine.fired == 1
    assert error.__name__ in str(refused.value)
    stage = "opening the store" if place in ("open", "get") else "replaying the journal"
    assert stage in str(refused.value)
    assert "--reprovision" in str(refused.value)
    assert error.__name__ in (crashed / CORRUPT_FILE).read_text()
    with pytest.raises(StorageCorrupt):  # and on every later start, with a sound engine too
        BookieStorage(crashed, journal=True)


@pytest.mark.parametrize("error", NOT_DAMAGE, ids=lambda e: e.__name__)
async def test_an_error_that_is_not_damage_does_not_mark_the_store(crashed: Path, error: type[lmdb.Error]) -> None:
    with pytest.raises(error):
        BookieStorage(crashed, journal=True, engine=FaultyEngine(error, "put"))
    assert not (crashed / CORRUPT_FILE).exists()
    storage = BookieStorage(crashed, journal=True)  # the replay then runs in full
    try:
        assert storage.replayed == 101
        assert (await storage.read(3, 99)).data == b"e99" * 10
        assert await storage.is_fenced(4)
    finally:
        await storage.close()


@pytest.mark.parametrize("error", CORRUPTION, ids=lambda e: e.__name__)
async def test_damage_met_bringing_journaled_writes_into_the_store_fails_the_storage(
    tmp_path: Path, error: type[lmdb.Error]
) -> None:
    await BookieStorage(tmp_path, journal=True).close()  # the store exists: opening it writes nothing
    engine = FaultyEngine(error, "put", armed=False)
    storage = BookieStorage(tmp_path, journal=True, engine=engine)
    failed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_failure(reason: str) -> None:
        if not failed.done():
            failed.set_result(reason)

    storage.failure_listener = on_failure
    try:
        engine.armed = True
        await storage.add(1, 0, *entry(b"journaled"), lac=-1)  # acknowledged from the journal
        reason = await asyncio.wait_for(failed, 30)
        assert error.__name__ in reason
        assert (tmp_path / CORRUPT_FILE).exists()
        with pytest.raises(PersistenceError):
            await storage.add(1, 1, *entry(b"refused"), lac=0)
    finally:
        await storage.close()
    with pytest.raises(StorageCorrupt):
        BookieStorage(tmp_path, journal=True)


async def test_a_key_of_the_wrong_size_in_a_listing_is_damage(tmp_path: Path) -> None:
    """A damaged leaf page header LMDB does not notice can hand back a key of the wrong size
    (found over many seeds of tests/faults/test_bitflips.py: the scrubber's listing failed on it
    at every pass, so the bookie neither repaired nor left). It fails the storage as damage."""
    storage = BookieStorage(tmp_path, journal=False)
    await storage.add(1, 0, *entry(b"stored"), lac=-1)
    await storage.close()
    env = lmdb.open(str(tmp_path / "ledgers"), max_dbs=3, subdir=True)
    with env.begin(write=True) as txn:
        txn.put(b"\x00" * 7 + b"\x01" + b"\x00" * 6 + b"\x05", b"x", db=env.open_db(b"entries", txn=txn))  # 15 bytes
    env.close()
    storage = BookieStorage(tmp_path, journal=False)
    try:
        with pytest.raises(PersistenceError, match="bookie storage is corrupt"):
            storage.entry_ids(1)
        assert storage.failed is not None
        assert (tmp_path / CORRUPT_FILE).exists()
    finally:
        await storage.close()


async def test_a_key_of_the_wrong_size_met_by_last_entry_is_damage(tmp_path: Path) -> None:
    """Recovery asks a bookie for a ledger's last entry; a key of the wrong size there is the same
    damage as in a listing, not a ``struct.error`` escaping to the request."""
    storage = BookieStorage(tmp_path, journal=False)
    await storage.add(1, 0, *entry(b"stored"), lac=-1)
    await storage.close()
    env = lmdb.open(str(tmp_path / "ledgers"), max_dbs=3, subdir=True)
    with env.begin(write=True) as txn:  # after ledger 1's entries, before ledger 2's: what last_entry(1) meets
        txn.put(b"\x00" * 7 + b"\x01" + b"\x00" * 6 + b"\x05", b"x", db=env.open_db(b"entries", txn=txn))
    env.close()
    storage = BookieStorage(tmp_path, journal=False)
    try:
        with pytest.raises(PersistenceError, match="bookie storage is corrupt"):
            await storage.last_entry(1)
        assert storage.failed is not None
        assert (tmp_path / CORRUPT_FILE).exists()
    finally:
        await storage.close()
