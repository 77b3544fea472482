"""R14, R15: reads with replica failover and checksum verification; the LAC of an open ledger."""

from __future__ import annotations

import pytest
from tests.ledger.cluster import Cluster

from magnetar.ledger.metadata_format import LedgerState
from magnetar.ledger.read_handle import ReadHandle
from magnetar.protocol.errors import ChecksumError, NoSuchEntry, NoSuchLedger, NotConnected


def payload(i: int) -> bytes:
    return bytes([i % 256]) * (10 + i)


async def closed_ledger(cluster: Cluster, n: int = 6, qa: int = 2) -> ReadHandle:
    handle = await cluster.manager.create(3, 3, qa)
    for i in range(n):
        await handle.append(payload(i))
    await handle.close()
    return await cluster.manager.open(handle.ledger_id)


async def test_r14_reads_fail_over_to_another_replica(cluster: Cluster) -> None:
    reader = await closed_ledger(cluster)
    first = cluster.bookie(reader.metadata.last_ensemble[0])
    first.kill()
    assert await reader.read(0, 5) == [payload(i) for i in range(6)]
    first.dead = False
    first.fail_reads = True
    assert await reader.read(0, 5) == [payload(i) for i in range(6)]


async def test_r14_a_copy_failing_its_checksum_is_skipped(cluster: Cluster) -> None:
    reader = await closed_ledger(cluster, qa=3)  # all three copies exist once acked
    bookies = [cluster.bookie(b) for b in reader.metadata.last_ensemble]
    bookies[0].corrupt_reads = True
    bookies[1].corrupt_reads = True
    assert await reader.read(0, 5) == [payload(i) for i in range(6)]
    bookies[2].corrupt_reads = True
    with pytest.raises(ChecksumError):
        await reader.read(0, 0)


async def test_r14_a_read_fails_only_when_every_replica_failed(cluster: Cluster) -> None:
    reader = await closed_ledger(cluster)
    for b in reader.metadata.last_ensemble:
        cluster.bookie(b).kill()
    with pytest.raises(NotConnected):
        await reader.read(3, 3)


async def test_r14_reads_past_the_last_entry_are_refused(cluster: Cluster) -> None:
    reader = await closed_ledger(cluster, 3)
    assert reader.last_entry_id == 2
    with pytest.raises(NoSuchEntry):
        await reader.read(2, 3)
    with pytest.raises(NoSuchEntry):
        await reader.read(2, 1)
    with pytest.raises(NoSuchEntry):
        await reader.read(-1, 0)


async def test_r15_open_without_recovery_reads_up_to_the_bookies_lac(cluster: Cluster) -> None:
    writer = await cluster.manager.create(3, 3, 2)
    for i in range(10):
        await writer.append(payload(i))
    reader = await cluster.manager.open(writer.ledger_id, recovery=False)
    assert not reader.is_closed
    assert reader.last_entry_id == 8  # entry 9 carried LAC 8; the LAC lags, never leads
    assert await reader.read(0, 8) == [payload(i) for i in range(9)]
    with pytest.raises(NoSuchEntry):
        await reader.read(9, 9)

    assert await writer.append(payload(10)) == 10  # the writer was not fenced
    assert await reader.read_lac() == 9
    assert await reader.read(9, 9) == [payload(9)]
    assert (await cluster.manager.get_metadata(writer.ledger_id)).state is LedgerState.OPEN


async def test_r15_lac_of_an_open_ledger_without_entries(cluster: Cluster) -> None:
    writer = await cluster.manager.create(3, 3, 2)
    reader = await cluster.manager.open(writer.ledger_id, recovery=False)
    assert reader.last_entry_id == -1
    assert await reader.read_lac() == -1


async def test_r15_read_lac_follows_the_writer_across_an_ensemble_change(cluster: Cluster) -> None:
    writer = await cluster.manager.create(3, 3, 2)
    await writer.append(payload(0))
    reader = await cluster.manager.open(writer.ledger_id, recovery=False)
    cluster.bookie(writer.metadata.last_ensemble[0]).kill()
    for i in range(1, 6):
        await writer.append(payload(i))
    assert len(writer.metadata.fragments) == 2
    assert await reader.read_lac() == 4
    assert await reader.read(0, 4) == [payload(i) for i in range(5)]
    assert len(reader.metadata.fragments) == 2


async def test_r15_read_lac_of_a_closed_ledger_is_its_last_entry(cluster: Cluster) -> None:
    reader = await closed_ledger(cluster, 4)
    assert await reader.read_lac() == 3
    assert reader.is_closed


async def test_open_of_a_missing_ledger_raises_no_such_ledger(cluster: Cluster) -> None:
    with pytest.raises(NoSuchLedger):
        await cluster.manager.open(12345)
    with pytest.raises(NoSuchLedger):
        await cluster.manager.open(12345, recovery=False)
