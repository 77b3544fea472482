"""Fixtures for the bookie tests: a real LMDB storage in a temp dir, and real servers on port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie.storage import BookieStorage
from magnetar.protocol.checksum import crc32c


def entry(data: bytes) -> tuple[bytes, int]:
    """An entry's payload with its correct CRC32C."""
    return data, crc32c(data)


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[BookieStorage]:
    s = BookieStorage(tmp_path / "bookie")
    try:
        yield s
    finally:
        await s.close()
