"""A standalone's resolver leaves out its in-process bookie while that is read-only.

A cluster's resolver skips bookies registered read-only, so a ledger is never created on a full
one. The standalone's fixed resolver used to offer its one bookie whatever its state: each new
ledger was created (metadata written on the full disk), failed at its first add, and was replaced
at once by another. Now creating a ledger is refused up front with BookKeeper's words for it, and
allowed again as soon as the bookie is writable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.resolver import StaticBookieResolver
from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol.errors import NotEnoughBookies


async def test_a_read_only_in_process_bookie_is_not_offered_for_new_ledgers(tmp_path: Path) -> None:
    storage = BookieStorage(tmp_path / "bookie", readonly_threshold=None)
    store = LmdbMetadataStore(tmp_path / "metadata")
    resolver = StaticBookieResolver({"b1": LocalBookieClient(storage, "b1")})
    ledgers = LedgerManager(store, resolver)
    try:
        assert await resolver.writable_bookies() == ["b1"]
        storage.readonly_threshold = 0.0  # any use of the filesystem is over it: read-only now
        assert storage.read_only
        assert await resolver.writable_bookies() == []
        with pytest.raises(NotEnoughBookies, match="Not enough non-faulty bookies available"):
            await ledgers.create()
        assert await store.children("/ledgers") == [], "no ledger metadata is written for a refused ledger"

        storage.readonly_threshold = None  # space freed
        assert await resolver.writable_bookies() == ["b1"]
        handle = await ledgers.create()
        assert await store.children("/ledgers") != []
        await handle.append(b"written again")
        await handle.close()
    finally:
        await store.close()
        await storage.close()
