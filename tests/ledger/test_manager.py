"""R3, R5, R22: ledger ids, bookie choice, deletion."""

from __future__ import annotations

import pytest
from tests.ledger.cluster import Cluster

from magnetar.ledger.metadata_format import LEDGER_ID_COUNTER, InvalidLedgerMetadata, ledger_path
from magnetar.metadata.store import MUST_NOT_EXIST
from magnetar.protocol.errors import BadVersion, NoSuchEntry, NoSuchLedger, NotEnoughBookies


async def test_r3_ids_come_from_the_counter_and_are_never_reused(cluster: Cluster) -> None:
    ids = [(await cluster.manager.create()).ledger_id for _ in range(3)]
    assert ids == sorted(set(ids))
    counter = await cluster.store.get(LEDGER_ID_COUNTER)
    assert counter is not None and int(counter.value) == ids[-1]
    await cluster.manager.delete(ids[-1])
    assert (await cluster.manager.create()).ledger_id == ids[-1] + 1


async def test_r3_creation_never_overwrites_an_existing_record(cluster: Cluster) -> None:
    first = await cluster.manager.create()
    squatter = ledger_path(first.ledger_id + 1)
    await cluster.store.put(squatter, b"someone else's", MUST_NOT_EXIST)
    with pytest.raises(BadVersion):
        await cluster.manager.create()
    record = await cluster.store.get(squatter)
    assert record is not None and record.value == b"someone else's"


async def test_r2_impossible_quorums_are_refused_before_allocating_an_id(cluster: Cluster) -> None:
    with pytest.raises(InvalidLedgerMetadata):
        await cluster.manager.create(2, 3, 2)
    assert await cluster.store.get(LEDGER_ID_COUNTER) is None


async def test_r5_ensemble_is_e_distinct_writable_bookies(cluster: Cluster) -> None:
    cluster.bookie("bookie-2").kill()
    for _ in range(10):
        handle = await cluster.manager.create(3, 2, 1, custom={"k": "v"})
        md = await cluster.manager.get_metadata(handle.ledger_id)
        assert set(md.last_ensemble) == {"bookie-0", "bookie-1", "bookie-3"}
        assert md.custom == {"k": "v"}
    with pytest.raises(NotEnoughBookies):
        await cluster.manager.create(4, 2, 1)


async def test_r22_delete_removes_metadata_and_bookie_data(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 3)
    for i in range(4):
        await handle.append(b"x" * i)
    await handle.close()
    bookies = [cluster.bookie(b) for b in handle.metadata.last_ensemble]
    await cluster.manager.delete(handle.ledger_id)
    assert await cluster.store.get(ledger_path(handle.ledger_id)) is None
    for b in bookies:
        with pytest.raises(NoSuchLedger):
            b.storage.read_sync(handle.ledger_id, 0)
    with pytest.raises(NoSuchLedger):
        await cluster.manager.open(handle.ledger_id)
    with pytest.raises(NoSuchLedger):
        await cluster.manager.delete(handle.ledger_id)


async def test_r22_a_dead_bookie_does_not_block_deletion(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 3)
    await handle.append(b"data")
    dead, *alive = (cluster.bookie(b) for b in handle.metadata.last_ensemble)
    dead.kill()
    await cluster.manager.delete(handle.ledger_id)
    with pytest.raises(NoSuchLedger):
        await cluster.manager.get_metadata(handle.ledger_id)
    for b in alive:
        with pytest.raises((NoSuchLedger, NoSuchEntry)):
            b.storage.read_sync(handle.ledger_id, 0)
    assert dead.storage.read_sync(handle.ledger_id, 0).data == b"data"  # left to its GC
