"""A real in-process storage stack: LMDB metadata store, one bookie's LMDB storage, ledgers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.resolver import StaticBookieResolver
from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.lmdb_store import LmdbMetadataStore


@dataclass
class Stack:
    store: LmdbMetadataStore
    storage: BookieStorage
    ledgers: LedgerManager


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    store = await LmdbMetadataStore.open(tmp_path / "meta")
    storage = BookieStorage(tmp_path / "bookie")
    resolver = StaticBookieResolver({"b1": LocalBookieClient(storage, "b1")})
    yield Stack(store, storage, LedgerManager(store, resolver))
    await storage.close()
    await store.close()
