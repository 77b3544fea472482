"""Batch compression codecs, named after Pulsar's ``CompressionType``.

Compression is done by the producer over a whole batch and undone by the consumer; the broker and
bookies only ever see compressed bytes. SNAPPY has no maintained pure-wheel binding in our stack,
so it is refused with a clear error instead of being silently sent uncompressed.

Decompression reads what a producer declared (``usize``) and bytes it did not check, so it is
bounded: a declared size outside ``0..MAX_UNCOMPRESSED_SIZE`` and bytes that do not decompress to
at most the declared size are refused with ``InvalidMessage`` (never a codec's own exception, a
``MemoryError`` from a forged size, or a zip bomb's gigabytes).
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.block
import zstandard

from magnetar.protocol.errors import InvalidMessage, Unsupported


class CompressionType(IntEnum):
    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


# The largest batch a consumer decompresses: far above the 5 MiB message limit of a producer's
# batch, far below what would exhaust a client's memory.
MAX_UNCOMPRESSED_SIZE = 256 * 1024 * 1024

_zstd_c = zstandard.ZstdCompressor(level=1)
_zstd_d = zstandard.ZstdDecompressor()


def compress(kind: CompressionType | int, data: bytes) -> bytes:
    if kind == CompressionType.NONE:
        return data
    if kind == CompressionType.LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    if kind == CompressionType.ZLib:
        return zlib.compress(data, 1)
    if kind == CompressionType.ZSTD:
        return bytes(_zstd_c.compress(data))
    raise Unsupported(f"compression type {CompressionType(kind).name} is not supported")


def decompress(kind: CompressionType | int, data: bytes, uncompressed_size: int) -> bytes:
    if kind == CompressionType.NONE:
        return data
    if not isinstance(uncompressed_size, int) or not 0 <= uncompressed_size <= MAX_UNCOMPRESSED_SIZE:
        raise InvalidMessage(f"uncompressed size {uncompressed_size!r} is out of range")
    try:
        if kind == CompressionType.LZ4:
            return bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
        if kind == CompressionType.ZLib:
            inflate = zlib.decompressobj()
            out = inflate.decompress(data, uncompressed_size + 1)
            if len(out) > uncompressed_size or inflate.unconsumed_tail:
                raise InvalidMessage(f"ZLib batch inflates to more than its declared {uncompressed_size} bytes")
            if not inflate.eof:
                raise InvalidMessage("ZLib batch is truncated")
            return out
        if kind == CompressionType.ZSTD:
            declared = zstandard.frame_content_size(data)
            if declared > uncompressed_size:
                raise InvalidMessage(f"ZSTD batch declares {declared} bytes, more than its {uncompressed_size}")
            return bytes(_zstd_d.decompress(data, max_output_size=uncompressed_size))
    except (ValueError, lz4.block.LZ4BlockError, zlib.error, zstandard.ZstdError) as exc:
        raise InvalidMessage(f"{CompressionType(kind).name} batch does not decompress: {exc}") from None
    raise Unsupported(f"compression type {kind} is not supported")
