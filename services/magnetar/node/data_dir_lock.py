"""``DataDirLock``: one server process per data directory, and the one line that says who has it.

A second ``magnetar standalone`` (or ``magnetar bookie``) started on the directory of a running
one would otherwise get as far as the embedded metadata store's own lock, deep in its start,
and die with a traceback; a second bookie would share LMDB files and a journal with the first.
The node takes an exclusive ``flock`` on the directory itself before opening anything, so the
refusal is one line naming the directory. The lock is on the directory, not on a file in it: a
bookie takes any file in its directory for data it must have a cookie for. The kernel drops the
lock when the process dies, even by ``kill -9``, so nothing stale is ever left to block a start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


class DataDirInUse(Exception):
    """Another process holds the data directory's lock."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(f"data directory {data_dir} is in use by another magnetar process")
        self.data_dir = data_dir


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (creating the directory), or raise ``DataDirInUse``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirInUse(self.data_dir.resolve()) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
