"""CRC32C (Castagnoli), the checksum carried by every entry and checked on add and on receipt."""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return int(_crc32c.crc32c(data))
