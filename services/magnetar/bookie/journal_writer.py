"""The thread that makes journal records durable: one ``pwrite`` and one ``fdatasync`` per batch.

Why a thread of its own, and why in C when it can be: the bookie acknowledges an add once the
journal holds it, so the sync is on every message's path. A Python thread must take the GIL back
after each blocking call and again to hand its result to the event loop; on a busy 2-core machine
each hand-over cost more than the ``fdatasync`` itself (a Python journal writer's batch took
0.34 ms in the server against 0.09 ms alone). The C writer (``_journal_writer.c``, built when a
compiler is present) never touches a Python object: the loop appends records (a ``memcpy`` under a
mutex), the thread writes everything appended so far, syncs it, publishes the highest durable
sequence number and writes to an eventfd that the loop watches. ``PyWriter`` is the same thing in
Python, used where the extension is not built (or with ``MAGNETAR_JOURNAL_WRITER=python``, which
the tests use to run both).

Both: ``append(data) -> seq`` (sequence numbers from 1), ``state() -> (durable seq, errno)``,
``switch(fd, offset)`` (wait until everything appended is durable, then write to another file),
``close()`` (write and sync what was appended, then stop), and ``eventfd``, readable after every
batch. After an error (``errno`` non-zero) nothing more is written.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol

ENV = "MAGNETAR_JOURNAL_WRITER"  # "c" (the default when built) or "python"


class Writer(Protocol):
    @property
    def eventfd(self) -> int: ...

    def append(self, data: bytes) -> int: ...

    def state(self) -> tuple[int, int]: ...

    def switch(self, fd: int, offset: int) -> None: ...

    def close(self) -> None: ...


class PyWriter:
    """``_journal_writer.Writer`` in Python (module docstring)."""

    def __init__(self, fd: int, offset: int, sync: bool = True) -> None:
        self._fd = fd
        self._offset = offset
        self._sync = sync
        self._buf: list[bytes] = []
        self._appended = 0
        self._durable = 0
        self._error = 0
        self._writing = False
        self._stop = False
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._drained = threading.Condition(self._lock)
        self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="magnetar-journal-writer", daemon=True)
        self._thread.start()

    def append(self, data: bytes) -> int:
        with self._lock:
            if self._stop:
                raise RuntimeError("journal writer is closed")
            self._buf.append(data)
            self._appended += 1
            self._wake.notify()
            return self._appended

    def state(self) -> tuple[int, int]:
        with self._lock:
            return self._durable, self._error

    def switch(self, fd: int, offset: int) -> None:
        with self._lock:
            while (self._buf or self._writing) and not self._error:
                self._drained.wait()
            if self._error:
                raise OSError(self._error, os.strerror(self._error))
            self._fd, self._offset = fd, offset

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify()
        self._thread.join()
        os.close(self.eventfd)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._buf and not self._stop:
                    self._wake.wait()
                if not self._buf:
                    return
                data, self._buf = b"".join(self._buf), []
                seq, fd, offset, failed = self._appended, self._fd, self._offset, self._error
                self._writing = True
            err = failed
            if not err:
                try:
                    done = 0
                    while done < len(data):
                        done += os.pwrite(fd, data[done:], offset + done)
                    if self._sync:
                        os.fdatasync(fd)
                except OSError as exc:
                    err = exc.errno or 5  # EIO
            with self._lock:
                self._writing = False
                if err:
                    self._error = self._error or err
                else:
                    self._durable = seq
                    self._offset = offset + len(data)
                self._drained.notify_all()
            os.eventfd_write(self.eventfd, 1)


def make_writer(fd: int, offset: int, sync: bool = True) -> Writer:
    """The C writer when it is built and not switched off, else ``PyWriter``."""
    if os.environ.get(ENV, "c").strip().lower() != "python":
        try:
            from magnetar.bookie._journal_writer import Writer as CWriter
        except ImportError:
            pass
        else:
            writer: Writer = CWriter(fd, offset, sync)
            return writer
    return PyWriter(fd, offset, sync)


def implementation() -> str:
    """Which writer ``make_writer`` gives: ``"c"`` or ``"python"``."""
    if os.environ.get(ENV, "c").strip().lower() == "python":
        return "python"
    try:
        from magnetar.bookie import _journal_writer  # noqa: F401
    except ImportError:
        return "python"
    return "c"
