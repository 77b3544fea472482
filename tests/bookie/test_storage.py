"""BookieStorage rules: durable adds, CRC on add, LAC, fencing, delete, read-only mode."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.errors import (
    AlreadyClosed,
    BookieReadOnly,
    ChecksumError,
    InvalidCommand,
    LedgerFenced,
    NoSuchEntry,
    NoSuchLedger,
)

from .conftest import entry

#: The storage contract: every test here runs against each engine (conftest.STORAGE_ENGINES).
pytestmark = pytest.mark.usefixtures("storage_engine")


async def test_added_entry_reads_back_with_its_crc_and_lac(storage: BookieStorage) -> None:
    data, crc = entry(b"hello")
    await storage.add(1, 0, data, crc, NO_ENTRY)
    result = await storage.read(1, 0)
    assert (result.data, result.crc, result.lac) == (b"hello", crc, NO_ENTRY)


async def test_read_of_unknown_ledger_and_entry(storage: BookieStorage) -> None:
    with pytest.raises(NoSuchLedger):
        await storage.read(9, 0)
    data, crc = entry(b"x")
    await storage.add(9, 0, data, crc, NO_ENTRY)
    with pytest.raises(NoSuchEntry):
        await storage.read(9, 1)
    with pytest.raises(NoSuchLedger):
        await storage.read_lac(10)


async def test_add_with_a_wrong_crc_is_refused_and_not_stored(storage: BookieStorage) -> None:
    data, crc = entry(b"payload")
    with pytest.raises(ChecksumError):
        await storage.add(1, 0, data, crc ^ 1, NO_ENTRY)
    with pytest.raises(NoSuchLedger):
        await storage.read(1, 0)


async def test_negative_ids_are_invalid(storage: BookieStorage) -> None:
    data, crc = entry(b"x")
    with pytest.raises(InvalidCommand):
        await storage.add(-1, 0, data, crc, NO_ENTRY)


async def test_lac_is_the_highest_piggybacked_value(storage: BookieStorage) -> None:
    for e, lac in [(0, -1), (1, 0), (3, 2), (2, 1)]:  # out of order: the LAC never goes back
        data, crc = entry(bytes([e]))
        await storage.add(5, e, data, crc, lac)
    assert await storage.read_lac(5) == 2
    assert (await storage.read(5, 0)).lac == 2
    assert await storage.last_entry(5) == 3


async def test_last_entry_ignores_neighbouring_ledgers(storage: BookieStorage) -> None:
    for ledger, e in [(1, 7), (2, 0), (2, 4), (3, 1)]:
        data, crc = entry(b"x")
        await storage.add(ledger, e, data, crc, NO_ENTRY)
    assert [await storage.last_entry(led) for led in (1, 2, 3)] == [7, 4, 1]
    await storage.fence(4)
    assert await storage.last_entry(4) == NO_ENTRY
    with pytest.raises(NoSuchLedger):
        await storage.last_entry(99)


async def test_fence_refuses_later_adds_but_not_recovery_adds(storage: BookieStorage) -> None:
    data, crc = entry(b"x")
    await storage.add(1, 0, data, crc, NO_ENTRY)
    await storage.add(1, 1, data, crc, 0)
    assert await storage.fence(1) == 0
    with pytest.raises(LedgerFenced):
        await storage.add(1, 2, data, crc, 1)
    await storage.add(1, 2, data, crc, 1, recovery=True)
    assert (await storage.read(1, 2)).data == b"x"
    assert await storage.is_fenced(1)


async def test_fence_of_an_unknown_ledger_blocks_a_late_writer(storage: BookieStorage) -> None:
    assert await storage.fence(42) == NO_ENTRY
    data, crc = entry(b"late")
    with pytest.raises(LedgerFenced):
        await storage.add(42, 0, data, crc, NO_ENTRY)


async def test_a_fence_queued_before_an_add_wins_in_the_same_batch(storage: BookieStorage) -> None:
    data, crc = entry(b"x")
    fence = storage.fence_nowait(3)
    add = storage.add_nowait(3, 0, data, crc, NO_ENTRY)
    assert await fence == NO_ENTRY
    with pytest.raises(LedgerFenced):
        await add


async def test_fence_and_entries_survive_reopen(tmp_path: Path) -> None:
    storage = BookieStorage(tmp_path)
    data, crc = entry(b"kept")
    await storage.add(1, 0, data, crc, NO_ENTRY)
    await storage.add(1, 1, data, crc, 0)
    await storage.fence(1)
    await storage.close()
    reopened = BookieStorage(tmp_path)
    try:
        assert (await reopened.read(1, 1)).data == b"kept"
        assert await reopened.read_lac(1) == 0
        with pytest.raises(LedgerFenced):
            await reopened.add(1, 2, data, crc, 1)
    finally:
        await reopened.close()


async def test_delete_removes_only_that_ledger_and_is_idempotent(storage: BookieStorage) -> None:
    data, crc = entry(b"x")
    for ledger in (1, 2, 3):
        for e in range(5):
            await storage.add(ledger, e, data, crc, e - 1)
    await storage.delete_ledger(2)
    with pytest.raises(NoSuchLedger):
        await storage.read(2, 0)
    assert await storage.ledgers() == [1, 3]
    assert await storage.last_entry(1) == 4 and await storage.last_entry(3) == 4
    await storage.delete_ledger(2)  # again: no error
    await storage.add(2, 0, data, crc, NO_ENTRY)  # a fresh ledger under the old id starts clean
    assert await storage.read_lac(2) == NO_ENTRY


async def test_concurrent_adds_share_group_commits(storage: BookieStorage) -> None:
    data, crc = entry(b"y" * 100)
    before = storage.commits
    await asyncio.gather(*(storage.add(7, e, data, crc, e - 1) for e in range(500)))
    commits = storage.commits - before
    assert commits < 500 / 5, f"{commits} commits for 500 concurrent adds"
    assert await storage.last_entry(7) == 499
    assert await storage.read_lac(7) == 498


async def test_read_only_past_the_threshold_refuses_adds_but_serves_reads(tmp_path: Path) -> None:
    writable = BookieStorage(tmp_path)
    data, crc = entry(b"x")
    await writable.add(1, 0, data, crc, NO_ENTRY)
    await writable.close()
    storage = BookieStorage(tmp_path, readonly_threshold=0.0)  # any disk usage is too much
    try:
        assert storage.read_only
        with pytest.raises(BookieReadOnly):
            await storage.add(1, 1, data, crc, 0)
        assert (await storage.read(1, 0)).data == b"x"
        assert 0.0 < storage.disk_usage().fraction < 1.0
        assert storage.disk_usage().data_bytes > 0
    finally:
        await storage.close()


async def test_read_only_mode_ends_when_the_threshold_is_not_reached(tmp_path: Path) -> None:
    storage = BookieStorage(tmp_path, readonly_threshold=0.0)
    try:
        assert storage.read_only
        storage.readonly_threshold = 1.01  # as if space had been freed
        assert not storage.read_only
        data, crc = entry(b"x")
        await storage.add(1, 0, data, crc, NO_ENTRY)
    finally:
        await storage.close()


async def test_closed_storage_refuses_work(tmp_path: Path) -> None:
    storage = BookieStorage(tmp_path)
    await storage.close()
    data, crc = entry(b"x")
    with pytest.raises(AlreadyClosed):
        await storage.add(1, 0, data, crc, NO_ENTRY)
    with pytest.raises(AlreadyClosed):
        await storage.read(1, 0)


async def test_close_finishes_queued_adds(tmp_path: Path) -> None:
    storage = BookieStorage(tmp_path)
    data, crc = entry(b"x")
    pending = [storage.add_nowait(1, e, data, crc, e - 1) for e in range(50)]
    await storage.close()
    await asyncio.gather(*pending)
    reopened = BookieStorage(tmp_path)
    try:
        assert await reopened.last_entry(1) == 49
    finally:
        await reopened.close()
