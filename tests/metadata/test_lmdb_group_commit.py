"""The embedded store's group commit: concurrent writes share transactions (one fsync for many),
each is still checked on its own (a refused compare-and-set does not sink the others of its group),
and every answer comes after the commit that holds it (a fresh open of the directory sees it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.metadata.store import MUST_NOT_EXIST, Stat
from magnetar.protocol.errors import BadVersion


async def test_concurrent_writes_share_commits_and_fail_alone(tmp_path: Path) -> None:
    store = await LmdbMetadataStore.open(tmp_path / "m")
    try:
        await store.put("/taken", b"first")
        txn_before = store._env.info()["last_txnid"]
        n = 200
        outcomes = await asyncio.gather(
            *(store.put(f"/k/{i}", str(i).encode()) for i in range(n)),
            store.put("/taken", b"second", MUST_NOT_EXIST),  # refused inside some group
            *(store.increment("/counter") for _ in range(n)),
            return_exceptions=True,
        )
        commits = store._env.info()["last_txnid"] - txn_before
        refused = outcomes[n]
        assert isinstance(refused, BadVersion), refused
        assert not any(isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != n)
        assert sorted(cast(list[int], outcomes[n + 1 :])) == list(range(1, n + 1))
        assert commits < (2 * n + 1) // 4, f"{commits} commits for {2 * n + 1} writes: not grouped"
        versions = [cast(Stat, o).version for o in outcomes[:n]]
        assert len(set(versions)) == n  # each write its own revision, within shared transactions
    finally:
        await store.close()
    again = await LmdbMetadataStore.open(tmp_path / "m")
    try:
        assert (await again.get("/taken")).value == b"first"  # type: ignore[union-attr]
        assert len(await again.children("/k")) == 200
        assert (await again.get("/counter")).value == b"200"  # type: ignore[union-attr]
    finally:
        await again.close()


async def test_a_cancelled_writer_does_not_stop_the_group(tmp_path: Path) -> None:
    store = await LmdbMetadataStore.open(tmp_path / "m")
    try:
        doomed = asyncio.ensure_future(store.put("/a", b"1"))
        kept = asyncio.ensure_future(store.put("/b", b"2"))
        await asyncio.sleep(0)  # both queued
        doomed.cancel()
        await kept
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert (await store.get("/b")) is not None
    finally:
        await store.close()
