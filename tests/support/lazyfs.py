"""A FUSE filesystem that loses unsynced file data at a "power loss" (for the power-loss and
slow-disk fault scenarios).

The idea is Jepsen's lazyfs; this is our own small implementation on pyfuse3 (trio), written for
these tests. It is a passthrough over a backing directory with one difference that matters: the
DATA written to a file is kept in this process's memory (an overlay of written 4 KiB pages plus the
file's pending size / truncation) and reaches the backing file only when the program asks for it
to be durable: ``fsync``/``fdatasync`` of the file (the kernel also sends one after every write
through a descriptor opened with ``O_SYNC``/``O_DSYNC``, which is how LMDB writes its meta page),
or ``fsync`` of the file's directory (which flushes the files directly in it). Reads merge the
overlay over the backing file, so the running program sees its own writes as on a normal disk.

A simulated power loss is therefore: ``kill -9`` the program AND ``kill -9`` this process (the
overlay is gone, exactly like a page cache at power loss), lazily unmount the dead mount, and start
a new lazyfs over the same backing directory: what survives is what was synced.

Simplifications, stated so that nobody reads more into a pass than it proves:

- Directory operations (create, mkdir, rename, unlink, rmdir, link, symlink, and ``setattr`` of
  anything but the size: mode, owner, times) go straight to the backing directory, i.e. they are
  durable at once (a real filesystem may lose a rename that was not followed by a directory
  fsync; here it never does). A file created and never synced survives as an empty file.
- Loss is page-granular: an unsynced write loses every page it touched, never half a page, and
  unsynced writes are lost all together (no reordering / partial persistence among them).
- The backing file itself is not fsynced on flush (the backing disk is not power-cycled).

The kernel's page cache stays on (no ``direct_io``): LMDB maps ``data.mdb`` read-only and
``lock.mdb`` read-write shared, which FUSE allows only with cached I/O; writes to a shared mapping
reach us as ordinary ``write`` requests when the kernel writes the pages back.

A control socket (``--control PATH``, a unix stream socket, one JSON object per line each way)
lets a test change the fsync delay at run time (``{"cmd": "set_fsync_delay", "ms": 200}``: every
flush waits that long first, a slow disk) and read counters (``{"cmd": "stats"}``: unsynced
bytes, fsyncs, flushes, bytes written and flushed). ``LazyFS`` below is the wrapper tests use.

Run: ``python3 -m tests.support.lazyfs BACKING MOUNTPOINT [--fsync-delay-ms N] [--control PATH]``;
it prints ``lazyfs ready: MOUNTPOINT pid N`` once mounted.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAGE = 4096
READY = "lazyfs ready:"


# ---------------------------------------------------------------------------------------- overlay


@dataclass
class Overlay:
    """The unsynced state of one file: written pages, its logical size, and the lowest size it was
    truncated to since the last flush (backing bytes at or beyond ``floor`` read as zeros)."""

    size: int
    floor: int
    pages: dict[int, bytearray] = field(default_factory=dict)

    def unsynced_bytes(self) -> int:
        return len(self.pages) * PAGE


class FileState:
    """What lazyfs knows about one backing file (by FUSE inode)."""

    def __init__(self) -> None:
        self.overlay: Overlay | None = None
        self.fds: dict[int, int] = {}  # fh -> backing fd (O_RDWR)


def _pread_backing(fd: int, off: int, size: int, floor: int | None) -> bytes:
    """Backing bytes [off, off+size), zeros at or past ``floor``, short at the backing EOF."""
    if floor is not None:
        if off >= floor:
            return b""
        size = min(size, floor - off)
    return os.pread(fd, size, off) if size > 0 else b""


# ---------------------------------------------------------------------------------------- the fs


def _build_ops(backing: str, delay_ms: list[float], counters: dict[str, int]) -> Any:
    """The pyfuse3 ``Operations`` subclass (built here so that importing this module for the
    ``LazyFS`` wrapper never needs pyfuse3)."""
    import pyfuse3
    import trio

    FUSEError = pyfuse3.FUSEError

    def oserr(exc: OSError) -> Exception:
        return FUSEError(exc.errno or errno.EIO)

    class LazyOps(pyfuse3.Operations):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.paths: dict[int, bytes] = {pyfuse3.ROOT_INODE: os.fsencode(backing)}
            self.by_backing: dict[tuple[int, int], int] = {}
            self.files: dict[int, FileState] = {}
            self.fh_inode: dict[int, int] = {}
            self.next_inode = pyfuse3.ROOT_INODE + 1
            self.next_fh = 1
            st = os.lstat(backing)
            self.by_backing[(st.st_dev, st.st_ino)] = pyfuse3.ROOT_INODE

        # -- inodes / attributes --------------------------------------------------------------

        def _path(self, inode: int) -> bytes:
            try:
                return self.paths[inode]
            except KeyError:
                raise FUSEError(errno.ENOENT) from None

        def _inode_for(self, path: bytes, st: os.stat_result) -> int:
            key = (st.st_dev, st.st_ino)
            inode = self.by_backing.get(key)
            if inode is None:
                inode = self.next_inode
                self.next_inode += 1
                self.by_backing[key] = inode
            self.paths[inode] = path
            return inode

        def _attrs(self, inode: int, st: os.stat_result) -> Any:
            a = pyfuse3.EntryAttributes()
            a.st_ino = inode
            a.generation = 0
            a.entry_timeout = 1.0
            a.attr_timeout = 1.0
            a.st_mode = st.st_mode
            a.st_nlink = st.st_nlink
            a.st_uid = st.st_uid
            a.st_gid = st.st_gid
            a.st_rdev = st.st_rdev
            size = st.st_size
            fs = self.files.get(inode)
            if fs is not None and fs.overlay is not None:
                size = fs.overlay.size
            a.st_size = size
            a.st_blksize = PAGE
            a.st_blocks = (size + 511) // 512
            a.st_atime_ns = st.st_atime_ns
            a.st_mtime_ns = st.st_mtime_ns
            a.st_ctime_ns = st.st_ctime_ns
            return a

        def _stat(self, inode: int) -> os.stat_result:
            fs = self.files.get(inode)
            if fs is not None and fs.fds:
                return os.fstat(next(iter(fs.fds.values())))
            try:
                return os.lstat(self._path(inode))
            except OSError as exc:
                raise oserr(exc) from None

        async def lookup(self, parent_inode: int, name: bytes, ctx: Any) -> Any:
            parent = self._path(parent_inode)
            path = parent if name == b"." else os.path.dirname(parent) if name == b".." else os.path.join(parent, name)
            try:
                st = os.lstat(path)
            except OSError as exc:
                raise oserr(exc) from None
            return self._attrs(self._inode_for(path, st), st)

        async def forget(self, inode_list: Any) -> None:
            return None  # inodes are kept for the life of the mount (a test filesystem is small)

        async def getattr(self, inode: int, ctx: Any) -> Any:
            return self._attrs(inode, self._stat(inode))

        async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> Any:
            path = self._path(inode)
            try:
                if fields.update_size:
                    self._truncate(inode, attr.st_size)
                if fields.update_mode:
                    os.chmod(path, stat.S_IMODE(attr.st_mode))
                if fields.update_uid or fields.update_gid:
                    uid = attr.st_uid if fields.update_uid else -1
                    gid = attr.st_gid if fields.update_gid else -1
                    os.chown(path, uid, gid, follow_symlinks=False)
                if fields.update_atime or fields.update_mtime:
                    st = os.lstat(path)
                    atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
                    mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
                    os.utime(path, ns=(atime, mtime), follow_symlinks=False)
            except OSError as exc:
                raise oserr(exc) from None
            return self._attrs(inode, self._stat(inode))

        async def statfs(self, ctx: Any) -> Any:
            sv = os.statvfs(backing)
            out = pyfuse3.StatvfsData()
            for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
                setattr(out, name, getattr(sv, name))
            out.f_namemax = sv.f_namemax
            return out

        async def access(self, inode: int, mode: int, ctx: Any) -> bool:
            return True

        # -- directory operations: straight to the backing directory --------------------------

        async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> Any:
            path = os.path.join(self._path(parent_inode), name)
            try:
                os.mkdir(path, mode)
                st = os.lstat(path)
            except OSError as exc:
                raise oserr(exc) from None
            return self._attrs(self._inode_for(path, st), st)

        async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
            try:
                os.rmdir(os.path.join(self._path(parent_inode), name))
            except OSError as exc:
                raise oserr(exc) from None

        async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
            path = os.path.join(self._path(parent_inode), name)
            try:
                st = os.lstat(path)
                os.unlink(path)
            except OSError as exc:
                raise oserr(exc) from None
            if st.st_nlink <= 1:
                self._gone(st)

        def _gone(self, st: os.stat_result) -> None:
            """Forget a backing file that no longer has a name (its overlay too, once closed)."""
            inode = self.by_backing.pop((st.st_dev, st.st_ino), None)
            if inode is None:
                return
            fs = self.files.get(inode)
            if fs is not None and not fs.fds:
                self.files.pop(inode, None)  # nothing can ever read or flush it again
            self.paths.pop(inode, None)

        async def rename(
            self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes, flags: int, ctx: Any
        ) -> None:
            if flags:
                raise FUSEError(errno.EINVAL)
            old = os.path.join(self._path(parent_inode_old), name_old)
            new = os.path.join(self._path(parent_inode_new), name_new)
            try:
                replaced = os.lstat(new)
            except OSError:
                replaced = None
            try:
                os.rename(old, new)
                st = os.lstat(new)
            except OSError as exc:
                raise oserr(exc) from None
            if replaced is not None and replaced.st_ino != st.st_ino and replaced.st_nlink <= 1:
                self._gone(replaced)  # the file the rename replaced: as if unlinked
            inode = self.by_backing.get((st.st_dev, st.st_ino))
            if inode is not None:
                self.paths[inode] = new
                if stat.S_ISDIR(st.st_mode):  # re-root the paths of everything below it
                    prefix = old + b"/"
                    for ino, p in list(self.paths.items()):
                        if p.startswith(prefix):
                            self.paths[ino] = new + b"/" + p[len(prefix) :]

        async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Any) -> Any:
            new = os.path.join(self._path(new_parent_inode), new_name)
            try:
                os.link(self._path(inode), new)
                st = os.lstat(new)
            except OSError as exc:
                raise oserr(exc) from None
            return self._attrs(inode, st)

        async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: Any) -> Any:
            path = os.path.join(self._path(parent_inode), name)
            try:
                os.symlink(target, path)
                st = os.lstat(path)
            except OSError as exc:
                raise oserr(exc) from None
            return self._attrs(self._inode_for(path, st), st)

        async def readlink(self, inode: int, ctx: Any) -> bytes:
            try:
                return os.readlink(self._path(inode))
            except OSError as exc:
                raise oserr(exc) from None

        async def opendir(self, inode: int, ctx: Any) -> int:
            self._path(inode)
            return inode

        async def readdir(self, fh: int, start_id: int, token: Any) -> None:
            path = self._path(fh)
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                raise oserr(exc) from None
            for i, name in enumerate(names[start_id:], start=start_id):
                child = os.path.join(path, name)
                try:
                    st = os.lstat(child)
                except OSError:
                    continue
                if not pyfuse3.readdir_reply(token, name, self._attrs(self._inode_for(child, st), st), i + 1):
                    break

        async def releasedir(self, fh: int) -> None:
            return None

        async def fsyncdir(self, fh: int, datasync: bool) -> None:
            """Directory entries are always durable here; the files directly in it are flushed."""
            path = self._path(fh)
            inodes = [ino for ino, p in self.paths.items() if os.path.dirname(p) == path and ino in self.files]
            await self._delay()
            for ino in inodes:
                self._flush_inode(ino)

        # -- files ----------------------------------------------------------------------------

        def _new_fh(self, inode: int, fd: int) -> int:
            fh = self.next_fh
            self.next_fh += 1
            self.files.setdefault(inode, FileState()).fds[fh] = fd
            self.fh_inode[fh] = inode
            return fh

        async def open(self, inode: int, flags: int, ctx: Any) -> Any:
            try:
                fd = os.open(self._path(inode), os.O_RDWR)
            except OSError as exc:
                raise oserr(exc) from None
            return pyfuse3.FileInfo(fh=self._new_fh(inode, fd), keep_cache=True, direct_io=False)

        async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Any) -> Any:
            path = os.path.join(self._path(parent_inode), name)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | (flags & os.O_EXCL), mode)
                st = os.fstat(fd)
            except OSError as exc:
                raise oserr(exc) from None
            inode = self._inode_for(path, st)
            fh = self._new_fh(inode, fd)
            return pyfuse3.FileInfo(fh=fh, keep_cache=True, direct_io=False), self._attrs(inode, st)

        def _fd(self, inode: int) -> int:
            fs = self.files.get(inode)
            if fs is not None and fs.fds:
                return next(iter(fs.fds.values()))
            raise FUSEError(errno.EBADF)

        def _overlay(self, inode: int, fd: int) -> Overlay:
            fs = self.files.setdefault(inode, FileState())
            if fs.overlay is None:
                size = os.fstat(fd).st_size
                fs.overlay = Overlay(size=size, floor=size)
            return fs.overlay

        def _page(self, ov: Overlay, fd: int, n: int) -> bytearray:
            page = ov.pages.get(n)
            if page is None:
                base = _pread_backing(fd, n * PAGE, PAGE, ov.floor)
                page = bytearray(base) + bytearray(PAGE - len(base))
                ov.pages[n] = page
            return page

        def _truncate(self, inode: int, size: int) -> None:
            fs = self.files.get(inode)
            if fs is not None and fs.fds:
                fd = self._fd(inode)
                close_after = False
            else:
                fd = os.open(self._path(inode), os.O_RDWR)
                close_after = True
            try:
                ov = self._overlay(inode, fd)
                if size < ov.size:
                    for n in [n for n in ov.pages if n * PAGE >= size]:
                        del ov.pages[n]
                    last = ov.pages.get(size // PAGE)
                    if last is not None:
                        cut = size % PAGE
                        last[cut:] = bytearray(PAGE - cut)
                    ov.floor = min(ov.floor, size)
                ov.size = size
                counters["truncates"] += 1
            finally:
                if close_after:
                    self.files.setdefault(inode, FileState())
                    os.close(fd)

        async def read(self, fh: int, off: int, size: int) -> bytes:
            inode = self.fh_inode[fh]
            fd = self.files[inode].fds[fh]
            ov = self.files[inode].overlay
            if ov is None:
                return os.pread(fd, size, off)
            end = min(off + size, ov.size)
            out = bytearray()
            pos = off
            while pos < end:
                n, inpage = divmod(pos, PAGE)
                take = min(PAGE - inpage, end - pos)
                page = ov.pages.get(n)
                if page is not None:
                    out += page[inpage : inpage + take]
                else:
                    chunk = _pread_backing(fd, pos, take, ov.floor)
                    out += chunk + bytes(take - len(chunk))
                pos += take
            return bytes(out)

        async def write(self, fh: int, off: int, buf: bytes) -> int:
            inode = self.fh_inode[fh]
            fd = self.files[inode].fds[fh]
            ov = self._overlay(inode, fd)
            pos, view = off, memoryview(buf)
            while view:
                n, inpage = divmod(pos, PAGE)
                take = min(PAGE - inpage, len(view))
                self._page(ov, fd, n)[inpage : inpage + take] = view[:take]
                view = view[take:]
                pos += take
            ov.size = max(ov.size, off + len(buf))
            counters["writes"] += 1
            counters["bytes_written"] += len(buf)
            return len(buf)

        async def flush(self, fh: int) -> None:
            return None  # close() is not a sync

        async def release(self, fh: int) -> None:
            inode = self.fh_inode.pop(fh, None)
            if inode is None:
                return
            fs = self.files.get(inode)
            if fs is None:
                return
            fd = fs.fds.pop(fh, None)
            if fs.fds or fd is None:
                if fd is not None:
                    os.close(fd)
                return
            if fs.overlay is not None and inode not in self.paths:
                fs.overlay = None  # unlinked and now closed: its data can never be seen again
            if fs.overlay is not None:
                # Keep one descriptor, so that a later fsync (of a reopened file) or the directory
                # can still flush what this handle left unsynced.
                fs.fds[-fh] = fd
            else:
                os.close(fd)

        async def fsync(self, fh: int, datasync: bool) -> None:
            counters["fsyncs"] += 1
            await self._delay()
            inode = self.fh_inode.get(fh)
            if inode is not None:
                self._flush_inode(inode)

        async def _delay(self) -> None:
            if delay_ms[0] > 0:
                counters["delayed_syncs"] += 1
                await trio.sleep(delay_ms[0] / 1000.0)

        def _flush_inode(self, inode: int) -> None:
            fs = self.files.get(inode)
            if fs is None or fs.overlay is None:
                return
            ov, fd = fs.overlay, next(iter(fs.fds.values()), None)
            if fd is None:
                return
            if ov.floor < os.fstat(fd).st_size:
                os.ftruncate(fd, ov.floor)
            for n in sorted(ov.pages):
                start = n * PAGE
                if start >= ov.size:
                    continue
                data = ov.pages[n][: min(PAGE, ov.size - start)]
                os.pwrite(fd, data, start)
                counters["bytes_flushed"] += len(data)
            if os.fstat(fd).st_size != ov.size:
                os.ftruncate(fd, ov.size)
            fs.overlay = None
            counters["flushes"] += 1
            for fh in [k for k in fs.fds if k < 0]:  # descriptors kept only for this flush
                os.close(fs.fds.pop(fh))

        def unsynced(self) -> int:
            return sum(fs.overlay.unsynced_bytes() for fs in self.files.values() if fs.overlay is not None)

    return LazyOps


def _serve_control(path: str, ops: Any, delay_ms: list[float], counters: dict[str, int]) -> Any:
    import trio

    async def handle(stream: Any) -> None:
        buf = b""
        async with stream:
            while True:
                data = await stream.receive_some(4096)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        req = json.loads(line)
                        cmd = req.get("cmd")
                        if cmd == "set_fsync_delay":
                            delay_ms[0] = float(req["ms"])
                            resp: dict[str, Any] = {"ok": True, "fsync_delay_ms": delay_ms[0]}
                        elif cmd == "stats":
                            resp = {
                                "ok": True,
                                **counters,
                                "unsynced_bytes": ops.unsynced(),
                                "fsync_delay_ms": delay_ms[0],
                            }
                        else:
                            resp = {"ok": False, "error": f"unknown command {cmd!r}"}
                    except Exception as exc:  # a bad request must not kill the filesystem
                        resp = {"ok": False, "error": repr(exc)}
                    await stream.send_all(json.dumps(resp).encode() + b"\n")

    async def serve(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(path)
        sock.listen(8)
        listener = trio.SocketListener(sock)
        task_status.started()  # listening: only now may the ready line go out (main)
        await trio.serve_listeners(handle, [listener])

    return serve


def main(argv: list[str] | None = None) -> None:
    import pyfuse3
    import trio

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    ap.add_argument("--fsync-delay-ms", type=float, default=0.0)
    ap.add_argument("--control")
    args = ap.parse_args(argv)
    delay_ms = [args.fsync_delay_ms]
    counters = {
        "fsyncs": 0,
        "delayed_syncs": 0,  # fsyncs and directory fsyncs that waited for the delay
        "flushes": 0,
        "writes": 0,
        "bytes_written": 0,
        "bytes_flushed": 0,
        "truncates": 0,
    }
    ops = _build_ops(os.path.abspath(args.backing), delay_ms, counters)()
    options = set(pyfuse3.default_options)
    options.add("fsname=lazyfs")
    pyfuse3.init(ops, args.mountpoint, options)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            if args.control:
                # Started, not start_soon: the ready line promises a control socket that listens
                # (a request right after it was refused under load, in CI).
                await nursery.start(_serve_control(args.control, ops, delay_ms, counters))
            print(f"{READY} {args.mountpoint} pid {os.getpid()}", flush=True)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()

    try:
        trio.run(run)
    finally:
        pyfuse3.close(unmount=True)


# ---------------------------------------------------------------------------------------- wrapper


def lazyfs_available() -> str | None:
    """None if lazyfs can run here, else why not (for a skip message). Under ``CI=true`` a missing
    piece is an error instead: CI installs all of them, and a skipped power-loss test proves nothing."""
    reason = _lazyfs_missing()
    if reason is not None and os.environ.get("CI", "").lower() == "true":
        raise RuntimeError(f"CI=true but lazyfs cannot run here: {reason}")
    return reason


def _lazyfs_missing() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed"
    try:
        import pyfuse3  # noqa: F401
    except ImportError:
        return "pyfuse3 is not installed"
    return None


class LazyFS:
    """One lazyfs process mounting ``backing`` at ``mountpoint``; ``power_loss()`` then
    ``restart()`` simulates losing power (unsynced data gone); ``close()`` unmounts cleanly."""

    def __init__(self, backing: Path, mountpoint: Path, *, log_path: Path, fsync_delay_ms: float = 0.0) -> None:
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.log_path = Path(log_path)
        self.control = self.log_path.with_suffix(".sock")
        self.fsync_delay_ms = fsync_delay_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 30.0) -> LazyFS:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        root = Path(__file__).resolve().parents[2]
        argv = [sys.executable, "-m", "tests.support.lazyfs", str(self.backing), str(self.mountpoint)]
        argv += ["--fsync-delay-ms", str(self.fsync_delay_ms), "--control", str(self.control)]
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== lazyfs start #{self.starts}: {' '.join(argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root
        )
        ready = threading.Event()
        proc = self.proc
        assert proc.stdout is not None
        out = proc.stdout

        def pump() -> None:
            with log:
                for raw in out:
                    log.write(raw)
                    log.flush()
                    if READY.encode() in raw:
                        ready.set()
                log.write(f"===== lazyfs exited with {proc.wait()}\n".encode())

        threading.Thread(target=pump, name=f"lazyfs-{self.mountpoint.name}", daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"lazyfs on {self.mountpoint} did not start; see {self.log_path}")
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the filesystem process (its unsynced data is gone) and detach the dead mount."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._detach()

    def _detach(self) -> None:
        for cmd in (["fusermount3", "-u", "-z", str(self.mountpoint)], ["umount", "-l", str(self.mountpoint)]):
            if not self._mounted():
                return
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    def _mounted(self) -> bool:
        target = os.path.realpath(self.mountpoint)
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == target for line in f)

    power_loss = kill9

    def restart(self, timeout: float = 30.0) -> LazyFS:
        self.kill9()
        return self.start(timeout)

    def close(self) -> None:
        """Unmount cleanly if alive (unsynced data is still dropped: nothing flushes on close)."""
        self.kill9()

    def request(self, **req: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(self.control))
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        resp: dict[str, Any] = json.loads(buf)
        if not resp.get("ok"):
            raise RuntimeError(f"lazyfs control: {resp}")
        return resp

    def set_fsync_delay(self, ms: float) -> None:
        self.fsync_delay_ms = ms
        self.request(cmd="set_fsync_delay", ms=ms)

    def stats(self) -> dict[str, Any]:
        return self.request(cmd="stats")


@contextlib.contextmanager
def mounted(backing: Path, mountpoint: Path, log_path: Path) -> Iterator[LazyFS]:
    fs = LazyFS(backing, mountpoint, log_path=log_path).start()
    try:
        yield fs
    finally:
        fs.close()


if __name__ == "__main__":
    main()
