"""CRC32C (Castagnoli), the checksum carried by every entry and checked on add and on receipt."""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C of ``data``; ``value``, a previous result, continues it (the CRC of the two pieces
    joined, without copying them into one)."""
    return int(_crc32c.crc32c(data, value))
