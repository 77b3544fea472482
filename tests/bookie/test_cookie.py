"""Identity cookie: a wiped disk must not rejoin silently; re-provisioning is explicit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie.cookie import COOKIE_FILE, Cookie, CookieMismatch, read_local_cookie, verify_cookie
from magnetar.bookie.service import BookieService
from magnetar.metadata import paths
from magnetar.metadata.lmdb_store import LmdbMetadataStore


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LmdbMetadataStore]:
    s = await LmdbMetadataStore.open(tmp_path / "meta")
    try:
        yield s
    finally:
        await s.close()


async def _registered(store: LmdbMetadataStore, bookie_id: str) -> Cookie | None:
    got = await store.get(paths.bookie_cookie(bookie_id))
    return Cookie.from_bytes(got.value) if got else None


async def test_first_start_writes_the_same_cookie_locally_and_in_metadata(
    tmp_path: Path, store: LmdbMetadataStore
) -> None:
    cookie = await verify_cookie(tmp_path / "b1", "b1", store)
    assert read_local_cookie(tmp_path / "b1") == cookie
    assert await _registered(store, "b1") == cookie
    assert await verify_cookie(tmp_path / "b1", "b1", store) == cookie  # a restart is accepted


async def test_wiped_data_dir_refuses_to_start_and_says_how_to_reprovision(
    tmp_path: Path, store: LmdbMetadataStore
) -> None:
    service = BookieService(tmp_path / "b1", bookie_id="b1", store=store)
    await service.start()
    await service.stop()
    wiped = tmp_path / "b1-new-disk"  # the same bookie id, a fresh empty disk
    again = BookieService(wiped, bookie_id="b1", store=store)
    with pytest.raises(CookieMismatch, match="--reprovision"):
        await again.start()
    assert not wiped.exists() or not any(wiped.iterdir()), "a refused start must not touch the disk"


async def test_reprovision_replaces_the_registered_cookie(tmp_path: Path, store: LmdbMetadataStore) -> None:
    old = await verify_cookie(tmp_path / "old", "b1", store)
    new = await verify_cookie(tmp_path / "new", "b1", store, reprovision=True)
    assert new.instance_id != old.instance_id
    assert await _registered(store, "b1") == new
    with pytest.raises(CookieMismatch):  # the old disk is now the stranger
        await verify_cookie(tmp_path / "old", "b1", store)


async def test_data_dir_of_another_bookie_is_refused(tmp_path: Path, store: LmdbMetadataStore) -> None:
    await verify_cookie(tmp_path / "d", "b1", store)
    with pytest.raises(CookieMismatch, match="belongs to bookie 'b1'"):
        await verify_cookie(tmp_path / "d", "b2", store)


async def test_data_without_a_cookie_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "ledgers").mkdir()
    with pytest.raises(CookieMismatch, match="no cookie"):
        await verify_cookie(directory, "b1")


async def test_local_cookie_is_registered_when_metadata_lost_it(tmp_path: Path, store: LmdbMetadataStore) -> None:
    local = await verify_cookie(tmp_path / "d", "b1")  # started once without a metadata store
    assert await verify_cookie(tmp_path / "d", "b1", store) == local
    assert await _registered(store, "b1") == local


async def test_unreadable_cookie_is_a_mismatch(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / COOKIE_FILE).write_bytes(b"{not json")
    with pytest.raises(CookieMismatch, match="unreadable"):
        await verify_cookie(directory, "b1")
