"""LMDB behind the key-value seam (``kv.py``): the one engine a bookie stores its ledgers in today.

One environment in ``<data_dir>/ledgers`` with three named databases (``entry_format.py``). Why
LMDB: a B-tree in a memory map, so a read of a cached page is a few microseconds and can run
inline on the event loop; one writer at a time, which suits the single group-commit thread; and a
synced commit is durable. Its ``Transaction`` and ``Cursor`` objects satisfy the seam's protocols
as they are, and ``begin`` is the environment's own bound method: nothing wraps a call.

LMDB does not checksum its pages; the entry format does (``entry_format.py``). What LMDB does
report is a broken B-tree (``CORRUPTION`` below), and on some damage it aborts the process instead
(an assertion in ``mdb.c``): ``verify_directory`` walks a directory read-only so that the scrubber
can run it in a child process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import lmdb

from magnetar.bookie.storage.entry_format import ENTRIES_TABLE, FORMAT_KEY, LEDGERS_TABLE, META_TABLE
from magnetar.bookie.storage.verify import VerifyReport, walk

LMDB_DIR = "ledgers"  # the environment's directory inside the bookie's data directory
DEFAULT_MAP_SIZE = 1 << 40  # 1 TiB of address space; LMDB's file grows only as data is written
# LMDB errors that mean the environment is damaged (not a transient condition): the storage stops
# serving, and a bookie that meets one while opening or replaying its journal refuses to start.
# Each comes from pages that are not what LMDB wrote: a page of the wrong type or missing, a
# B-tree deeper than any LMDB builds (cursor full: a branch page that points back up), a page
# with less room than its header says (page full), a meta page that is not LMDB's or not of this
# format version (invalid, version mismatch), a named database's record that no longer says it is
# one (incompatible), a failed page checksum, a fatal error or a transaction LMDB had to abort
# (panic, bad txn: what a read or write on a damaged page reports here, seen in
# tests/faults/test_bitflips.py; a fresh transaction never gets it otherwise), an "unexpected
# problem" (MDB_PROBLEM). Not damage: limits (map, readers, txn, dbs full), I/O errors and a full
# disk (DiskError: read-only mode handles those), misuse (bad DBI, bad value size, bad reader
# slot, invalid parameter, read-only), and not-found / key-exists answers.
CORRUPTION: tuple[type[BaseException], ...] = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.PanicError,
    lmdb.BadTxnError,
    lmdb.CursorFullError,
    lmdb.PageFullError,
    lmdb.InvalidError,
    lmdb.VersionMismatchError,
    lmdb.IncompatibleError,
    lmdb.BadChecksumError,
    lmdb.ProblemError,
)


class LmdbEngine:
    """An LMDB environment opened for one bookie storage (``kv.KeyValueStorage``)."""

    corruption = CORRUPTION

    def __init__(self, data_dir: Path, *, map_size: int = DEFAULT_MAP_SIZE, sync: bool = True) -> None:
        """``sync``: a commit returns after its data and the meta page are on disk (``False``
        only for tests and benchmarks that measure everything but the device)."""
        self._path = data_dir / LMDB_DIR
        self._env = lmdb.open(str(self._path), map_size=map_size, max_dbs=3, sync=sync, metasync=sync, subdir=True)
        #: ``begin(write=False)``: the environment's own method, so that a transaction costs no extra call.
        self.begin = self._env.begin

    def table(self, name: bytes) -> lmdb._Database:
        return self._env.open_db(name)

    def size_bytes(self) -> int:
        data_file = self._path / "data.mdb"
        return data_file.stat().st_blocks * 512 if data_file.exists() else 0

    def info(self) -> Mapping[str, object]:
        """LMDB's own figures (map size, last transaction, readers in use): for diagnostics."""
        return self._env.info()

    def close(self) -> None:
        self._env.close()


def verify_directory(data_dir: str | os.PathLike[str]) -> VerifyReport:
    """``verify_all`` on a data directory opened read-only (another process may have it open):
    the scrubber runs this in a child process, because LMDB answers some damage to its pages by
    aborting the process (an assertion in ``mdb.c``) rather than with ``MDB_CORRUPTED``. Raises
    the LMDB error if it reports damage."""
    env = lmdb.open(str(Path(data_dir) / LMDB_DIR), readonly=True, max_dbs=3, subdir=True, lock=True)
    try:
        with env.begin() as txn:
            try:
                meta = env.open_db(META_TABLE, txn=txn, create=False)
                found = txn.get(FORMAT_KEY, db=meta)
            except lmdb.NotFoundError:
                found = None
            fmt = int(bytes(found)) if found is not None else 1
            entries_db = env.open_db(ENTRIES_TABLE, txn=txn, create=False)
            ledgers_db = env.open_db(LEDGERS_TABLE, txn=txn, create=False)
            return walk(txn, entries_db, ledgers_db, fmt)
    finally:
        env.close()
