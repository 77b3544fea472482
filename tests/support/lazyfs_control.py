"""Clusters whose bookies' data directories are lazyfs mounts (``lazyfs.py``), for the power-loss
and slow-disk scenarios: start/close the mounts with the cluster, cut the power of some bookies
(and brokers) at once, power them back on, look at what a bookie's disk kept, and scrape metrics.
"""

from __future__ import annotations

import contextlib
import signal
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support.cluster import LocalCluster, Proc
from tests.support.lazyfs import LazyFS

from magnetar.bookie.journal import Journal, JournalPosition
from magnetar.bookie.storage import JOURNAL_DIR, JOURNAL_KEY, decode_record


class LazyCluster:
    """A ``LocalCluster`` whose bookies' data directories are lazyfs mounts."""

    def __init__(self, base: Path, *, sync_data: bool = True, **options: Any) -> None:
        args = [] if sync_data else ["--journal-sync-data", "false"]
        self.cluster = LocalCluster(base, bookie_args=args, **options)
        self.mounts: dict[str, LazyFS] = {}
        for b in self.cluster.bookies:
            assert b.data_dir is not None
            self.mounts[b.name] = LazyFS(
                base / "backing" / b.name, b.data_dir, log_path=self.cluster.logs / f"lazyfs-{b.name}.log"
            )

    def start(self) -> None:
        for fs in self.mounts.values():
            fs.start()
        self.cluster.start()

    def close(self) -> None:
        self.cluster.close()
        for fs in self.mounts.values():
            fs.close()

    def power_loss(self, bookies: Sequence[Proc], brokers: Sequence[Proc] = ()) -> None:
        """Cut the power of ``bookies`` (and their disks' page caches) and ``brokers``, together."""
        for b in bookies:
            fs = self.mounts[b.name]
            assert fs.proc is not None
            fs.proc.send_signal(signal.SIGKILL)
        for p in [*bookies, *brokers]:
            p.kill9()
        for b in bookies:
            self.mounts[b.name].power_loss()  # reap, and detach the dead mount

    def power_on(self, bookies: Sequence[Proc]) -> None:
        """New lazyfs mounts over the same backing directories, then the bookies (together)."""
        for b in bookies:
            self.mounts[b.name].start()
        for b in bookies:
            b.spawn()
        for b in bookies:
            b.wait_ready(90)

    def entries_on_disk(self, bookie: str) -> set[tuple[int, int]]:
        """(ledger, entry) keys in the bookie's LMDB in its BACKING directory, and in journal mode
        those its journal holds past what was applied (a restart replays them): what survived."""
        import lmdb

        path = self.mounts[bookie].backing / "ledgers"
        data = path / "data.mdb"
        if not data.exists() or data.stat().st_size == 0:
            return set()
        env = lmdb.open(str(path), max_dbs=3, subdir=True, readonly=True, lock=False)
        try:
            db = env.open_db(b"entries", create=False)
            meta = env.open_db(b"meta", create=False)
            with env.begin(db=db) as txn:
                keys = {struct.unpack(">QQ", k) for k in txn.cursor().iternext(keys=True, values=False)}
            with env.begin() as txn:
                applied = txn.get(JOURNAL_KEY, db=meta)
        except lmdb.NotFoundError:
            return set()
        finally:
            env.close()
        journal_dir = self.mounts[bookie].backing / JOURNAL_DIR
        if applied is not None and journal_dir.exists():  # journal mode: acknowledged, not yet applied
            for body, _ in Journal(journal_dir).replay(JournalPosition.unpack(bytes(applied))):
                op = decode_record(body)
                if op.kind == "add":
                    keys.add((op.ledger, op.entry))
                elif op.kind == "delete":
                    keys = {k for k in keys if k[0] != op.ledger}
        return keys


@contextlib.contextmanager
def lazy_cluster(base: Path, **options: Any) -> Iterator[LazyCluster]:
    """A started ``LazyCluster`` (options: ``sync_data`` and ``LocalCluster``'s), always closed;
    the process logs' tails are printed at the end (pytest shows them for a failed test)."""
    c = LazyCluster(base, **options)
    try:
        c.start()
    except BaseException:
        print(f"\n===== cluster failed to start; logs under {c.cluster.logs} =====\n{c.cluster.log_tails()}")
        c.close()
        raise
    try:
        yield c
    finally:
        c.close()
        print(f"\n===== process logs (tails) under {c.cluster.logs} =====\n{c.cluster.log_tails(15)}")
