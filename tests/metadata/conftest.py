"""The ``store`` fixture, parametrized over every ``MetadataStore`` implementation.

A backend knows how to make an empty store (``fresh``), how to open the same data again in a
new session (``reopen``), and how a child process opens it (``child_prelude``: Python source
defining ``async def open_store()``), so the contract tests can end a session by killing a real
process. ``session_timeout`` is how long ephemeral keys of a killed session may outlive it: zero
for LMDB (the next open deletes them), the lease TTL for etcd (etcd expires the lease).

The etcd backend runs on the session's real etcd (``etcd_server`` in tests/conftest.py); every
``fresh()`` store gets a new key prefix, so tests never see each other's keys.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

import pytest
from tests.support.etcd import EtcdProcess

from magnetar.metadata.etcd_store import EtcdMetadataStore
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.metadata.store import MetadataStore

# Short enough that lease-expiry tests finish quickly, long enough for a loaded machine to renew.
ETCD_TEST_LEASE_TTL = 3.0


class StoreBackend(Protocol):
    name: str
    session_timeout: float

    async def fresh(self) -> MetadataStore: ...

    async def reopen(self) -> MetadataStore: ...

    def child_prelude(self) -> str: ...


class LmdbBackend:
    name = "lmdb"
    session_timeout = 0.0

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


class EtcdBackend:
    name = "etcd"
    session_timeout = ETCD_TEST_LEASE_TTL

    def __init__(self, etcd: EtcdProcess) -> None:
        self.url = etcd.url
        self.prefix = ""

    async def fresh(self) -> MetadataStore:
        self.prefix = f"/test-{uuid.uuid4().hex[:12]}"
        return await self.reopen()

    async def reopen(self) -> MetadataStore:
        return await EtcdMetadataStore.connect(self.url, prefix=self.prefix, lease_ttl=ETCD_TEST_LEASE_TTL)

    def child_prelude(self) -> str:
        return (
            "from magnetar.metadata.etcd_store import EtcdMetadataStore\n"
            "async def open_store():\n"
            f"    return await EtcdMetadataStore.connect({self.url!r}, prefix={self.prefix!r},"
            f" lease_ttl={ETCD_TEST_LEASE_TTL!r})\n"
        )


@pytest.fixture(params=["lmdb", "etcd"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreBackend:
    if request.param == "lmdb":
        return LmdbBackend(tmp_path)
    if request.param == "etcd":
        return EtcdBackend(request.getfixturevalue("etcd_server"))
    raise AssertionError(f"unknown backend {request.param}")


@pytest.fixture
async def store(backend: StoreBackend) -> AsyncIterator[MetadataStore]:
    s = await backend.fresh()
    try:
        yield s
    finally:
        await s.close()
