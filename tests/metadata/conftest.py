"""The ``store`` fixture, parametrized over every ``MetadataStore`` implementation.

A backend knows how to make an empty store (``fresh``), how to open the same data again in a
new session (``reopen``), and how a child process opens it (``child_prelude``: Python source
defining ``async def open_store()``), so the contract tests can end a session by killing a real
process. The etcd store adds its backend here as a new param.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import pytest

from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.metadata.store import MetadataStore


class StoreBackend(Protocol):
    name: str

    async def fresh(self) -> MetadataStore: ...

    async def reopen(self) -> MetadataStore: ...

    def child_prelude(self) -> str: ...


class LmdbBackend:
    name = "lmdb"

    def __init__(self, root: Path) -> None:
        self._root = root
        self._count = 0
        self._current = root / "store0"

    async def fresh(self) -> MetadataStore:
        self._count += 1
        self._current = self._root / f"store{self._count}"
        return await LmdbMetadataStore.open(self._current)

    async def reopen(self) -> MetadataStore:
        return await LmdbMetadataStore.open(self._current)

    def child_prelude(self) -> str:
        return (
            "from magnetar.metadata.lmdb_store import LmdbMetadataStore\n"
            "async def open_store():\n"
            f"    return await LmdbMetadataStore.open({str(self._current)!r})\n"
        )


@pytest.fixture(params=["lmdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreBackend:
    if request.param == "lmdb":
        return LmdbBackend(tmp_path)
    raise AssertionError(f"unknown backend {request.param}")


@pytest.fixture
async def store(backend: StoreBackend) -> AsyncIterator[MetadataStore]:
    s = await backend.fresh()
    try:
        yield s
    finally:
        await s.close()
