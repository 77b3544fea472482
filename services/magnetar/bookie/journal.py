"""The bookie journal: an append-only log of writes, synced before they are acknowledged.

Why: an LMDB commit with ``sync=True`` costs two fdatasyncs (the data pages, then the meta page)
and, in the writer thread, several hand-overs of the GIL; at low load every add paid all of it
before its acknowledgement (about 0.8 ms of a 1.2 ms publish). With the journal, an add is
acknowledged once its record is in a preallocated segment file and synced once
(``journal_writer.py``: one ``pwrite`` + one ``fdatasync`` per batch, in a thread that never
needs the GIL), and LMDB is brought up to date behind it by the storage's writer thread
(``storage/group_commit.py``). BookKeeper's bookies are split the same way (journal plus ledger storage).

Layout: ``<data>/journal/<segment:016d>.log``, each ``segment_bytes`` long (a record larger than
that gets a segment of its own size), allocated in full before its first record
(``posix_fallocate``, or zeros written where the filesystem lacks it), so a sync never changes the
file's size and unwritten space reads as zeros. A record is ``>II`` (body length, CRC32C of the
record's position and its body) followed by the body. The CRC binds a record to where it was
written, so neither a torn write nor leftover bytes can pass for a record. Records never span
segments: one that does not fit starts the next segment.

Replay reads from a position onwards and stops at the first record that is empty or fails its
check, then goes on at the next segment if that file exists. Only records whose sync returned
were acknowledged, and every later record lies after them, so a torn tail loses only writes that
nobody was told about.

Threads: ``append`` and ``durable`` belong to the event loop; ``prepare_next`` and
``remove_before`` may run on the storage's writer thread, and touch only files the loop is not
writing (``_files`` serializes preparing).
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from magnetar.bookie.journal_writer import Writer, make_writer
from magnetar.protocol.checksum import crc32c

HEAD = struct.Struct(">II")  # body length, CRC32C(POSITION + body)
POSITION = struct.Struct(">QQ")  # segment, offset
DEFAULT_SEGMENT_BYTES = 4 * 1024 * 1024  # the current one and the next, prepared: 8 MiB of a bookie's disk
SUFFIX = ".log"
_ZEROS = bytes(1 << 20)


@dataclass(frozen=True, order=True, slots=True)
class JournalPosition:
    """Where a record starts (or where the next one will): a segment number and a byte offset."""

    segment: int
    offset: int

    def pack(self) -> bytes:
        return POSITION.pack(self.segment, self.offset)

    @classmethod
    def unpack(cls, raw: bytes) -> JournalPosition:
        segment, offset = POSITION.unpack(raw)
        return cls(segment, offset)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check(segment: int, offset: int, body: bytes | memoryview) -> int:
    """CRC32C of the record's position followed by its body (continued, not concatenated: the
    body is a whole entry, and appending is on every add's path)."""
    return crc32c(body, crc32c(POSITION.pack(segment, offset)))


class Journal:
    """The segment files of one bookie, and the writer appending to the current one."""

    def __init__(self, directory: Path, segment_bytes: int = DEFAULT_SEGMENT_BYTES, *, sync: bool = True) -> None:
        """``sync=False`` skips the fdatasync (a storage opened with ``sync=False``: tests only)."""
        if segment_bytes < 4096:
            raise ValueError(f"journal segments must be at least 4096 bytes, got {segment_bytes}")
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.sync = sync
        if not directory.exists():
            directory.mkdir(parents=True)
            _fsync_directory(directory.parent)  # the new directory's entry, before records rely on it
        self._files = threading.Lock()
        self._fd = -1
        self._size = segment_bytes  # of the current segment
        self._writer: Writer | None = None
        self.position = JournalPosition(0, 0)  # where the next record goes (after ``start``)

    def path(self, segment: int) -> Path:
        return self.directory / f"{segment:016d}{SUFFIX}"

    def segments(self) -> list[int]:
        """The numbers of the segment files present, in order."""
        return sorted(int(p.stem) for p in self.directory.iterdir() if p.suffix == SUFFIX and p.stem.isdigit())

    # --- replay

    def replay(self, start: JournalPosition) -> Iterator[tuple[bytes, JournalPosition]]:
        """Every valid record from ``start`` on, with the position just after it (module docstring)."""
        segment, offset = start.segment, start.offset
        while True:
            path = self.path(segment)
            if not path.exists():
                return
            data = path.read_bytes()
            while offset + HEAD.size <= len(data):
                length, crc = HEAD.unpack_from(data, offset)
                end = offset + HEAD.size + length
                if length == 0 or end > len(data):
                    break
                body = data[offset + HEAD.size : end]
                if _check(segment, offset, body) != crc:
                    break
                yield body, JournalPosition(segment, end)
                offset = end
            segment, offset = segment + 1, 0

    # --- appending (the event loop)

    def start(self, position: JournalPosition) -> None:
        """Append from ``position`` on (its segment is created if needed), with a new writer."""
        self._prepare(position.segment)
        fd = os.open(self.path(position.segment), os.O_RDWR | os.O_CLOEXEC)
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._writer = make_writer(fd, position.offset, self.sync)
        self.position = position

    @property
    def eventfd(self) -> int:
        assert self._writer is not None
        return self._writer.eventfd

    def append(self, body: bytes) -> tuple[int, JournalPosition]:
        """Queue ``body`` as a record; returns its sequence number for ``durable`` and the position
        after it. A record that does not fit the segment starts the next one (which waits for the
        current one's last sync). Raises ``OSError`` when the next segment cannot be allocated
        (a full disk)."""
        assert self._writer is not None
        size = HEAD.size + len(body)
        pos = self.position
        if pos.offset + size > self._size:
            self._roll(size)
            pos = self.position
        seq = self._writer.append(HEAD.pack(len(body), _check(pos.segment, pos.offset, body)) + body)
        self.position = JournalPosition(pos.segment, pos.offset + size)
        return seq, self.position

    def durable(self) -> tuple[int, int]:
        """(the last durable sequence number, errno of a failed write or 0)."""
        assert self._writer is not None
        return self._writer.state()

    def _roll(self, record: int) -> None:
        assert self._writer is not None
        segment = self.position.segment + 1
        size = max(self.segment_bytes, -(-record // 4096) * 4096)
        self._prepare(segment, size)
        fd = os.open(self.path(segment), os.O_RDWR | os.O_CLOEXEC)
        try:
            self._writer.switch(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        os.close(self._fd)
        self._fd = fd
        self._size = size
        self.position = JournalPosition(segment, 0)

    def close(self) -> tuple[int, int]:
        """Write and sync what was appended, stop the writer and close the segment; returns the
        writer's last ``durable()``."""
        state = (0, 0)
        if self._writer is not None:
            self._writer.close()
            state = self._writer.state()
            self._writer = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        return state

    # --- segment files (either thread)

    def prepare_next(self) -> None:
        """Allocate the segment after the current one ahead of need, so that rolling over does not
        allocate on the loop. Errors (a full disk) are left for the roll to meet and report."""
        try:
            self._prepare(self.position.segment + 1)
        except OSError:
            pass

    def _prepare(self, segment: int, size: int | None = None) -> None:
        size = size or self.segment_bytes
        with self._files:
            path = self.path(segment)
            if path.exists() and path.stat().st_size >= size:
                return
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        raise
                    for off in range(0, size, len(_ZEROS)):
                        os.pwrite(fd, _ZEROS[: min(len(_ZEROS), size - off)], off)
                os.fsync(fd)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.close(fd)
            os.replace(tmp, path)
            _fsync_directory(self.directory)

    def remove_before(self, segment: int) -> None:
        """Delete the segments before ``segment`` (everything in them is in LMDB, synced)."""
        for n in self.segments():
            if n >= segment:
                break
            self.path(n).unlink(missing_ok=True)

    def remove_all(self) -> None:
        for n in self.segments():
            self.path(n).unlink(missing_ok=True)
        _fsync_directory(self.directory)

    def size_bytes(self) -> int:
        total = 0
        for n in self.segments():
            try:
                total += self.path(n).stat().st_blocks * 512
            except FileNotFoundError:
                pass
        return total
