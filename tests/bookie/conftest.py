"""Fixtures for the bookie tests: a real storage in a temp dir (once per engine), and real servers on port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie.storage import BookieStorage
from magnetar.protocol.checksum import crc32c


def entry(data: bytes) -> tuple[bytes, int]:
    """An entry's payload with its correct CRC32C."""
    return data, crc32c(data)


#: The storage engines the storage contract tests run against, and the MAGNETAR_BOOKIE_JOURNAL
#: value that selects each for a ``BookieStorage`` built without ``journal=``: LMDB committing
#: each group of writes itself, and LMDB behind the journal. Another engine is one more entry.
STORAGE_ENGINES = {"lmdb": "0", "lmdb+journal": "1"}


@pytest.fixture(params=list(STORAGE_ENGINES))
def storage_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every ``BookieStorage`` the test builds (the ``storage`` fixture's, and its own) uses this engine."""
    engine: str = request.param
    monkeypatch.setenv("MAGNETAR_BOOKIE_JOURNAL", STORAGE_ENGINES[engine])
    return engine


@pytest.fixture
async def storage(tmp_path: Path, storage_engine: str) -> AsyncIterator[BookieStorage]:
    s = BookieStorage(tmp_path / "bookie")
    try:
        yield s
    finally:
        await s.close()
