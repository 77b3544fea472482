"""The interface every object-store driver implements, and the verified write built on it.

A ledger is offloaded as one object; its metadata may say "offloaded" only once the object is known
to be whole. ``put_verified`` therefore reads the object back after writing it and compares its size
and CRC32C with what was written (the CRC32C is also stored in the object's user metadata, so a
reader can check an object later with ``verify_object``). A mismatch deletes the bad object and
raises ``CorruptObject``: the ledger stays on the bookies.

Byte ranges are half-open, ``[start, end)``, as Python slices: ``read(key, 0, size)`` is the whole
object, and a range past the end is cut at the end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from magnetar.offload.errors import CorruptObject
from magnetar.protocol.checksum import crc32c

# The user-metadata key holding the CRC32C (lowercase: S3 lowercases user-metadata keys).
CRC32C_METADATA_KEY = "magnetar-crc32c"
# Pieces of a file read at once when computing its CRC32C.
_CRC_CHUNK = 1 << 20

# What a put accepts: the bytes, a file to upload, or a readable binary stream (read to its end).
BlobSource = bytes | Path | BinaryIO


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows about one object: its size and user metadata (``etag`` where the store has one)."""

    key: str
    size: int
    metadata: Mapping[str, str] = field(default_factory=dict)
    etag: str = ""


class BlobStore(Protocol):
    """An object store holding offloaded ledgers, keyed by ``/``-separated names.

    Every method is a coroutine; drivers run their blocking I/O in threads. Errors are those of
    ``magnetar.offload.errors``.
    """

    @property
    def location(self) -> str:
        """The store as messages name it (driver and bucket, or driver and root path)."""
        ...

    @property
    def read_buffer_size(self) -> int:
        """Bytes fetched per read request; callers read big objects in pieces of this size."""
        ...

    async def put(self, key: str, data: BlobSource, metadata: Mapping[str, str] | None = None) -> ObjectInfo:
        """Store ``data`` under ``key`` whole or not at all (large objects go up in parts)."""
        ...

    async def read(self, key: str, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of the object (cut at its end); ``ObjectNotFound`` if absent."""
        ...

    async def read_all(self, key: str) -> bytes:
        """The whole object; ``ObjectNotFound`` if absent."""
        ...

    async def info(self, key: str) -> ObjectInfo | None:
        """Size and user metadata of the object, or None if there is none under ``key``."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; an absent object is not an error."""
        ...

    async def list(self, prefix: str = "") -> list[str]:
        """The keys that start with ``prefix``, sorted."""
        ...

    async def close(self) -> None:
        """Release connections and threads."""
        ...


def crc32c_of(data: bytes | Path) -> tuple[int, int]:
    """``(size, crc32c)`` of bytes or of a file's content (read in pieces, never whole in memory)."""
    if isinstance(data, bytes):
        return len(data), crc32c(data)
    size, crc = 0, 0
    with data.open("rb") as f:
        while chunk := f.read(_CRC_CHUNK):
            size += len(chunk)
            crc = crc32c(chunk, crc)
    return size, crc


async def _stored_crc32c(store: BlobStore, key: str, size: int) -> tuple[int, int]:
    """Read the stored object back in ``read_buffer_size`` pieces: ``(bytes read, crc32c)``."""
    step = max(1, store.read_buffer_size)
    read, crc = 0, 0
    while read < size:
        chunk = await store.read(key, read, min(size, read + step))
        if not chunk:
            break
        read += len(chunk)
        crc = crc32c(chunk, crc)
    return read, crc


async def verify_object(store: BlobStore, key: str, expected_size: int, expected_crc: int) -> ObjectInfo:
    """Check the object under ``key`` against a size and CRC32C; ``CorruptObject`` if either differs.

    The object is read back in full (not trusting the store's own listing of its size), so a
    truncated, padded or altered object is caught whatever the store reports.
    """
    info = await store.info(key)
    if info is None:
        raise CorruptObject(f"{store.location}: object {key!r} is missing after it was written")
    if info.size != expected_size:
        raise CorruptObject(f"{store.location}: object {key!r} has {info.size} bytes, expected {expected_size}")
    read, crc = await _stored_crc32c(store, key, info.size)
    if read != expected_size or crc != expected_crc:
        raise CorruptObject(
            f"{store.location}: object {key!r} reads back {read} bytes with CRC32C {crc:#010x}, "
            f"expected {expected_size} bytes with {expected_crc:#010x}"
        )
    return info


async def put_verified(
    store: BlobStore,
    key: str,
    data: bytes | Path,
    metadata: Mapping[str, str] | None = None,
    *,
    before_verify: Callable[[], Awaitable[None]] | None = None,
) -> ObjectInfo:
    """Put ``data`` under ``key``, then read it back and compare size and CRC32C with what was sent.

    The CRC32C goes into the object's user metadata (``magnetar-crc32c``, decimal). On a mismatch the
    bad object is deleted and ``CorruptObject`` raised, so no key ever names a half or wrong object
    that a caller believes verified. ``before_verify`` runs between the write and the read-back (a
    seam for tests that alter the object there).
    """
    size, crc = crc32c_of(data)
    meta = dict(metadata or {})
    meta[CRC32C_METADATA_KEY] = str(crc)
    await store.put(key, data, meta)
    if before_verify is not None:
        await before_verify()
    try:
        return await verify_object(store, key, size, crc)
    except CorruptObject:
        await store.delete(key)
        raise


def stored_crc32c(info: ObjectInfo) -> int | None:
    """The CRC32C recorded in an object's user metadata by ``put_verified``, if any."""
    raw = info.metadata.get(CRC32C_METADATA_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None
