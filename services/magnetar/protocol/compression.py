"""Batch compression codecs, named after Pulsar's ``CompressionType``.

Compression is done by the producer over a whole batch and undone by the consumer; the broker and
bookies only ever see compressed bytes. SNAPPY has no maintained pure-wheel binding in our stack,
so it is refused with a clear error instead of being silently sent uncompressed.
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.block
import zstandard

from magnetar.protocol.errors import Unsupported


class CompressionType(IntEnum):
    NONE = 0
    LZ4 = 1
    ZLib = 2
    ZSTD = 3
    SNAPPY = 4


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
    if kind == CompressionType.LZ4:
        return bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
    if kind == CompressionType.ZLib:
        return zlib.decompress(data)
    if kind == CompressionType.ZSTD:
        return bytes(_zstd_d.decompress(data, max_output_size=uncompressed_size))
    raise Unsupported(f"compression type {kind} is not supported")
