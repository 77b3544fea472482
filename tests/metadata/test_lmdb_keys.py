"""The embedded store's key-length limit: LMDB refuses keys over 511 bytes with ``BadValsizeError``,
which reached the admin API as a 500 (tests/fuzz/test_admin.py, a long subscription under a long
topic). The store refuses such a write as the caller's mistake and treats such a key as absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol.errors import InvalidCommand, NotFound

LONG = "/a/" + "x" * 600


async def test_a_key_over_lmdbs_limit_is_refused_and_reads_as_absent(tmp_path: Path) -> None:
    store = await LmdbMetadataStore.open(tmp_path)
    try:
        with pytest.raises(InvalidCommand, match="name too long"):
            await store.put(LONG, b"v")
        with pytest.raises(InvalidCommand, match="name too long"):
            await store.increment(LONG)
        with pytest.raises(NotFound):
            await store.delete(LONG)
        assert await store.get(LONG) is None
        assert not await store.exists(LONG)
        assert await store.children(LONG) == []
        # The limit is the key's bytes: the longest key that fits still works.
        longest = "/a/" + "y" * (511 - 3)
        await store.put(longest, b"v")
        assert (await store.get(longest)) is not None
        assert await store.children("/a") == ["y" * 508]
    finally:
        await store.close()
