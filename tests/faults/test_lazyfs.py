"""The power-loss filesystem itself (``tests/support/lazyfs.py``): it must keep what was synced and
lose what was not, or the power-loss scenarios prove nothing either way.

Each test mounts a real lazyfs process (FUSE) over a backing directory under ``tmp_path`` and
simulates a power loss by ``kill -9`` of the lazyfs process (and of the writer, when the writer is
a separate process), a lazy unmount and a new lazyfs over the same backing directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.lazyfs import LazyFS, lazyfs_available

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

why_not = lazyfs_available()
if why_not is not None:
    pytestmark.append(pytest.mark.skip(reason=f"lazyfs cannot run here: {why_not}"))


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[LazyFS]:
    lazy = LazyFS(tmp_path / "backing", tmp_path / "mnt", log_path=tmp_path / "lazyfs.log").start()
    try:
        yield lazy
    finally:
        lazy.close()


def _write(path: Path, data: bytes, *, sync: bool) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def test_synced_data_survives_a_power_loss_and_unsynced_data_does_not(fs: LazyFS) -> None:
    m = fs.mountpoint
    _write(m / "synced", b"A" * 10_000, sync=True)
    _write(m / "unsynced", b"B" * 10_000, sync=False)
    # Overwrite part of a synced file and grow it, without syncing: it must come back as synced.
    with open(m / "synced", "r+b") as f:
        f.seek(5000)
        f.write(b"C" * 9000)
    # A pending truncate of a synced file is lost too.
    _write(m / "truncated", b"D" * 8192, sync=True)
    os.truncate(m / "truncated", 100)
    # The running program sees its own writes.
    assert (m / "unsynced").read_bytes() == b"B" * 10_000
    assert (m / "synced").read_bytes() == b"A" * 5000 + b"C" * 9000
    assert (m / "truncated").read_bytes() == b"D" * 100
    stats = fs.stats()
    assert stats["unsynced_bytes"] >= 10_000, stats
    assert stats["fsyncs"] >= 2, stats

    fs.power_loss()
    fs.start()

    assert (m / "synced").read_bytes() == b"A" * 10_000
    assert (m / "unsynced").read_bytes() == b""  # created (a directory operation), data never synced
    assert (m / "truncated").read_bytes() == b"D" * 8192
    assert fs.stats()["unsynced_bytes"] == 0


def test_truncate_then_sync_is_durable_and_reads_zeros_where_the_file_regrew(fs: LazyFS) -> None:
    m = fs.mountpoint
    _write(m / "f", b"X" * 9000, sync=True)
    with open(m / "f", "r+b") as f:
        f.truncate(10)
        f.seek(8000)
        f.write(b"Y" * 10)
        assert f.seek(0) == 0 and f.read() == b"X" * 10 + bytes(7990) + b"Y" * 10
        os.fsync(f.fileno())
    fs.power_loss()
    fs.start()
    assert (m / "f").read_bytes() == b"X" * 10 + bytes(7990) + b"Y" * 10


def test_rename_mode_and_owner_are_durable_and_o_dsync_writes_are_synced(fs: LazyFS) -> None:
    """The cookie's write pattern (temp file, fsync, rename, fsync the directory), chmod/chown,
    and a write through an ``O_DSYNC`` descriptor (how LMDB writes its meta page)."""
    m = fs.mountpoint
    (m / "d").mkdir()
    _write(m / "d" / "cookie", b"old cookie", sync=True)
    _write(m / "d" / "cookie.tmp", b"cookie", sync=True)
    os.rename(m / "d" / "cookie.tmp", m / "d" / "cookie")  # replaces the old one
    assert (m / "d" / "cookie").read_bytes() == b"cookie"
    dfd = os.open(m / "d", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    os.chmod(m / "d" / "cookie", 0o600)
    os.chown(m / "d" / "cookie", 1234, 5678)
    fd = os.open(m / "dsync", os.O_CREAT | os.O_WRONLY | os.O_DSYNC, 0o644)
    try:
        os.write(fd, b"meta page")
    finally:
        os.close(fd)
    fs.power_loss()
    fs.start()
    assert sorted(os.listdir(m / "d")) == ["cookie"]
    assert (m / "d" / "cookie").read_bytes() == b"cookie"
    st = os.stat(m / "d" / "cookie")
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o600, 1234, 5678)
    assert (m / "dsync").read_bytes() == b"meta page"


_LMDB_WRITER = textwrap.dedent(
    """
    import sys, lmdb
    path, sync = sys.argv[1], sys.argv[2] == "1"
    env = lmdb.open(path, map_size=1 << 26, max_dbs=2, sync=sync, metasync=sync, subdir=True)
    db = env.open_db(b"entries")
    for i in range(200):
        with env.begin(write=True, db=db) as txn:
            txn.put(i.to_bytes(8, "big"), b"v" * 500)
    with env.begin(db=db) as txn:
        print("committed", txn.stat(db)["entries"], flush=True)
    sys.stdin.read()  # hold the environment open (mmaps included) until killed
    """
)


def _lmdb_entries(path: Path) -> int:
    import lmdb

    if (path / "data.mdb").stat().st_size == 0:
        return 0  # the file was created (a directory operation) but none of its data was synced
    env = lmdb.open(str(path), max_dbs=2, subdir=True, readonly=True, lock=False)
    try:
        db = env.open_db(b"entries", create=False)
        with env.begin(db=db) as txn:
            return int(txn.stat(db)["entries"])
    finally:
        env.close()


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "nosync"])
def test_lmdb_commits_survive_only_when_synced(fs: LazyFS, sync: bool) -> None:
    """py-lmdb as the bookie opens it (``data.mdb`` mapped read-only and written with pwrite,
    ``lock.mdb`` mapped read-write shared) works through the mount; after a power loss every
    synced commit is there, and with sync off they are gone (the control for the whole layer)."""
    path = fs.mountpoint / "ledgers"
    writer = subprocess.Popen(
        [sys.executable, "-c", _LMDB_WRITER, str(path), "1" if sync else "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        line = writer.stdout.readline()
        assert line.strip() == "committed 200", line
        before = fs.stats()
    finally:
        # Power loss: the writer and the filesystem die together.
        writer.send_signal(signal.SIGKILL)
        fs.power_loss()
        writer.wait(30)
    fs.start()
    t0 = time.monotonic()
    survived = _lmdb_entries(path)
    print(f"lmdb sync={sync}: {survived} of 200 commits survived ({time.monotonic() - t0:.2f}s); stats {before}")
    if sync:
        assert survived == 200
        assert before["fsyncs"] >= 200, before
    else:
        assert survived == 0
        assert before["unsynced_bytes"] > 0, before


def test_fsync_delay_is_set_at_run_time(fs: LazyFS) -> None:
    """The delay applies from the request on and goes with the next one. Whether an fsync waited
    is read from the filesystem's own count, not from how long it took (on a loaded machine an
    undelayed fsync can be slow too); a delayed one takes at least the delay."""

    def timed_fsync() -> float:
        with open(fs.mountpoint / "slow", "wb") as f:
            f.write(b"x")
            f.flush()
            t0 = time.monotonic()
            os.fsync(f.fileno())
            return time.monotonic() - t0

    timed_fsync()
    assert fs.stats()["delayed_syncs"] == 0
    fs.set_fsync_delay(300)
    slow = timed_fsync()
    assert slow >= 0.3, slow
    assert fs.stats()["delayed_syncs"] == 1
    fs.set_fsync_delay(0)
    timed_fsync()
    stats = fs.stats()
    assert stats["delayed_syncs"] == 1 and stats["fsync_delay_ms"] == 0, stats
