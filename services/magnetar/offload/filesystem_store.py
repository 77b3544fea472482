"""Pulsar's ``filesystem`` offload driver: objects as files under a local or mounted directory.

A key ``a/b/c`` is the file ``<root>/a/b/c``. A put writes a temporary file beside the final one,
fsyncs it, renames it over the final name and fsyncs the directory, so a crash at any point leaves
either the old object or the new one under the key, never a half-written one; leftover temporary
files are never listed or read. User metadata lives in a sidecar ``<key>.meta.json``, written (the
same way) before the object's rename, so an object is never visible without its metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO, TypeVar

from magnetar.offload.blob_store import BlobSource, ObjectInfo
from magnetar.offload.errors import (
    InvalidOffloadConfig,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreUnavailable,
)

T = TypeVar("T")

META_SUFFIX = ".meta.json"
# Temporary files start with this (a key's last part may not), so they are told apart from objects.
TEMP_PREFIX = ".tmp-"
_COPY_CHUNK = 1 << 20
DEFAULT_READ_BUFFER_SIZE = 1024 * 1024


def root_from_uri(uri: str) -> Path:
    """``file:///x`` or ``/x`` (Pulsar's ``fileSystemURI``) as a path; other schemes are refused."""
    if uri.startswith("file://"):
        path = uri[len("file://") :]
    elif "://" in uri:
        raise InvalidOffloadConfig(f"fileSystemURI {uri!r}: only file:// URIs and plain paths are supported")
    else:
        path = uri
    if not path.startswith("/"):
        raise InvalidOffloadConfig(f"fileSystemURI {uri!r} must be an absolute path")
    return Path(path)


class FileSystemStore:
    """A directory as a ``BlobStore``; the directory is created if missing."""

    def __init__(self, root: Path | str, read_buffer_size: int = DEFAULT_READ_BUFFER_SIZE) -> None:
        self._root = root_from_uri(root) if isinstance(root, str) else root
        if read_buffer_size <= 0:
            raise InvalidOffloadConfig(f"filesystem read buffer size must be positive, not {read_buffer_size}")
        self._read_buffer_size = read_buffer_size

    @property
    def location(self) -> str:
        return f"filesystem {str(self._root)!r}"

    @property
    def read_buffer_size(self) -> int:
        return self._read_buffer_size

    @property
    def root(self) -> Path:
        return self._root

    def path_of(self, key: str) -> Path:
        """The file holding ``key``; keys that would leave the root or collide with sidecars are refused."""
        parts = key.split("/")
        if (
            not key
            or key.startswith("/")
            or any(p in ("", ".", "..") for p in parts)
            or parts[-1].startswith(TEMP_PREFIX)
            or key.endswith(META_SUFFIX)
        ):
            raise ObjectStoreError(f"{self.location}: invalid key {key!r}")
        return self._root.joinpath(*parts)

    # ----------------------------------------------------------------------------- the BlobStore calls

    async def put(self, key: str, data: BlobSource, metadata: Mapping[str, str] | None = None) -> ObjectInfo:
        path = self.path_of(key)
        meta = dict(metadata or {})
        return await self._call("put", key, lambda: self._put(key, path, data, meta))

    async def read(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"bad byte range [{start}, {end})")
        path = self.path_of(key)

        def read_range() -> bytes:
            with path.open("rb") as f:
                f.seek(start)
                return f.read(end - start)

        return await self._call("read", key, read_range)

    async def read_all(self, key: str) -> bytes:
        path = self.path_of(key)
        return await self._call("read", key, path.read_bytes)

    async def info(self, key: str) -> ObjectInfo | None:
        path = self.path_of(key)

        def stat() -> ObjectInfo | None:
            try:
                size = path.stat().st_size
            except (FileNotFoundError, NotADirectoryError):
                return None
            if not path.is_file():
                return None
            try:
                metadata = json.loads(_sidecar(path).read_text())
            except FileNotFoundError:
                metadata = {}
            return ObjectInfo(key=key, size=size, metadata={str(k): str(v) for k, v in metadata.items()})

        return await self._call("info", key, stat)

    async def delete(self, key: str) -> None:
        path = self.path_of(key)

        def remove() -> None:
            for p in (path, _sidecar(path)):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            with contextlib.suppress(FileNotFoundError):
                _fsync_dir(path.parent)

        await self._call("delete", key, remove)

    async def list(self, prefix: str = "") -> list[str]:
        return await self._call("list", prefix, lambda: sorted(k for k in self._walk(prefix) if k.startswith(prefix)))

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> FileSystemStore:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------------- internals

    def _put(self, key: str, path: Path, data: BlobSource, metadata: dict[str, str]) -> ObjectInfo:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(_sidecar(path), lambda f: f.write(json.dumps(metadata, sort_keys=True).encode()))
        size = _write_atomically(path, lambda f: _copy_into(data, f))
        _fsync_dir(path.parent)
        return ObjectInfo(key=key, size=size, metadata=metadata)

    def _walk(self, prefix: str) -> Iterator[str]:
        """The keys under the deepest directory the prefix names (all of the root if it names none)."""
        directory_part = prefix.rpartition("/")[0]
        parts = directory_part.split("/") if directory_part else []
        start = self._root.joinpath(*parts) if all(p not in ("", ".", "..") for p in parts) else self._root
        if not start.is_dir():
            return
        for directory, _dirs, files in os.walk(start):
            base = Path(directory).relative_to(self._root)
            for name in files:
                if name.startswith(TEMP_PREFIX) or name.endswith(META_SUFFIX):
                    continue
                yield (base / name).as_posix() if base.parts else name

    async def _call(self, operation: str, key: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a thread and turn OS errors into the offload errors."""
        try:
            return await asyncio.to_thread(fn)
        except ObjectStoreError:
            raise
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(f"{self.location}: {operation} {key!r}: no such object") from None
        except PermissionError as e:
            raise ObjectStoreAccessDenied(
                f"{self.location}: {operation} {key!r} refused: {e.strerror} (the broker's file permissions)"
            ) from None
        except IsADirectoryError:
            raise ObjectNotFound(f"{self.location}: {operation} {key!r}: no such object (a directory)") from None
        except OSError as e:
            name = errno.errorcode.get(e.errno or 0, "OSError")
            raise ObjectStoreUnavailable(f"{self.location}: {operation} {key!r} failed: {name} {e.strerror}") from None


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + META_SUFFIX)


def _copy_into(data: BlobSource, out: BinaryIO) -> int:
    if isinstance(data, bytes):
        out.write(data)
        return len(data)
    if isinstance(data, Path):
        with data.open("rb") as f:
            shutil.copyfileobj(f, out, _COPY_CHUNK)
        return data.stat().st_size
    written = 0
    while chunk := data.read(_COPY_CHUNK):
        out.write(chunk)
        written += len(chunk)
    return written


def _write_atomically(path: Path, write: Callable[[BinaryIO], int | None]) -> int:
    """Write a temp file beside ``path``, fsync it and rename it over ``path``; returns its size."""
    temp = path.with_name(f"{TEMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
    try:
        with temp.open("xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    return size


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
