"""R11, R16-R21: open-with-recovery after a writer crash, fencing, concurrent recoveries."""

from __future__ import annotations

import asyncio

import pytest
from tests.ledger.cluster import Cluster, FaultyBookie

from magnetar.ledger.metadata_format import LedgerState, ledger_path
from magnetar.ledger.write_handle import WriteHandle
from magnetar.protocol.errors import LedgerFenced, NoSuchEntry, NoSuchLedger, NotEnoughBookies


def payload(i: int) -> bytes:
    return f"<{i}>".encode() * (1 + i % 5)


def ensemble(cluster: Cluster, handle: WriteHandle) -> list[FaultyBookie]:
    return [cluster.bookie(b) for b in handle.metadata.last_ensemble]


def has_entry(bookie: FaultyBookie, ledger_id: int, entry_id: int) -> bool:
    try:
        bookie.storage.read_sync(ledger_id, entry_id)
    except (NoSuchEntry, NoSuchLedger):
        return False
    return True


async def written(cluster: Cluster, n: int, e: int = 3, qw: int = 3, qa: int = 2) -> WriteHandle:
    handle = await cluster.manager.create(e, qw, qa)
    for i in range(n):
        assert await handle.append(payload(i)) == i
    return handle


async def test_r16_recovering_a_closed_ledger_changes_nothing(cluster: Cluster) -> None:
    handle = await written(cluster, 3)
    await handle.close()
    before = await cluster.store.get(ledger_path(handle.ledger_id))
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 2
    assert await cluster.store.get(ledger_path(handle.ledger_id)) == before


async def test_r16_r21_recovery_after_a_crash_finds_exactly_the_acked_entries(cluster: Cluster) -> None:
    handle = await written(cluster, 10)
    del handle  # the writer "crashes": no close
    reader = await cluster.manager.open(1)
    assert reader.is_closed
    assert reader.last_entry_id == 9  # bookies knew LAC 8; entry 9 was read forward
    assert await reader.read(0, 9) == [payload(i) for i in range(10)]
    md = await cluster.manager.get_metadata(1)
    assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 9)


async def test_r16_recovery_of_an_empty_open_ledger(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == -1
    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, -1, 0)
    with pytest.raises(LedgerFenced):
        await handle.append(b"late")


async def test_r18_r19_unacknowledged_entry_on_one_bookie_is_found_and_re_replicated(
    cluster: Cluster,
) -> None:
    handle = await written(cluster, 10)
    b0, b1, b2 = ensemble(cluster, handle)
    tail = set(range(10, 15))
    b1.stall_adds(tail)  # these adds never reach b1 and b2: only b0 stores them
    b2.stall_adds(tail)
    futures = [handle.append_nowait(payload(i)) for i in range(10, 15)]
    await b0.stored(handle.ledger_id, 14).wait()
    assert not any(f.done() for f in futures)  # one copy each, Qa = 2

    reader = await cluster.manager.open(handle.ledger_id)  # the writer is presumed dead
    assert reader.last_entry_id == 14  # maybe more than acknowledged, never fewer
    for b in (b1, b2):
        assert all(has_entry(b, handle.ledger_id, e) for e in tail)  # R19
    b1.kill()
    b0.kill()
    assert await reader.read(0, 14) == [payload(i) for i in range(15)]

    b0.dead = b1.dead = False
    b1.release()
    b2.release()  # the stalled adds finally arrive, at fenced bookies
    for f in futures:
        with pytest.raises(LedgerFenced):
            await f


async def test_r11_r17_fencing_stops_the_old_writer(cluster: Cluster) -> None:
    handle = await written(cluster, 5)
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 4
    late = [handle.append_nowait(payload(i)) for i in range(5, 8)]
    for f in late:
        with pytest.raises(LedgerFenced):
            await f
    with pytest.raises(LedgerFenced):
        await handle.append(b"later")
    assert handle.last_add_confirmed == 4
    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, 4)
    with pytest.raises(NoSuchEntry):
        await reader.read(5, 5)


async def test_r11_acks_of_entries_stored_before_the_fence_stay_within_the_recovered_ledger(
    cluster: Cluster,
) -> None:
    handle = await written(cluster, 5)
    bookies = ensemble(cluster, handle)
    for b in bookies:
        b.hold_acks()
    future = handle.append_nowait(payload(5))
    for b in bookies:
        await b.stored(handle.ledger_id, 5).wait()
    reader = await cluster.manager.open(handle.ledger_id)
    for b in bookies:
        b.release()
    # stored before the fence, so the writer may learn of it; recovery must then include it
    assert await future == 5
    assert reader.last_entry_id == 5


async def test_r17_recovery_needs_fence_answers_covering_every_ack_quorum(cluster: Cluster) -> None:
    handle = await written(cluster, 5)
    b0, b1, _ = ensemble(cluster, handle)
    b0.kill()
    b1.kill()  # one fenced bookie leaves write sets with Qa = 2 unfenced
    with pytest.raises(NotEnoughBookies):
        await cluster.manager.open(handle.ledger_id)
    assert (await cluster.manager.get_metadata(handle.ledger_id)).state is LedgerState.IN_RECOVERY
    b1.dead = False  # two of three fenced: Qw - Qa + 1 = 2 in every write set
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 4
    assert await reader.read(0, 4) == [payload(i) for i in range(5)]


async def test_r17_with_qw_below_e_fewer_than_e_minus_qa_plus_one_fences_can_suffice(
    cluster: Cluster,
) -> None:
    handle = await written(cluster, 6, e=4, qw=2, qa=2)
    bookies = ensemble(cluster, handle)
    # write sets are {s, s+1}; each needs Qw - Qa + 1 = 1 fenced bookie
    bookies[0].fail_fences = True
    bookies[1].fail_fences = True  # write set {0, 1} has none fenced
    with pytest.raises(NotEnoughBookies):
        await cluster.manager.open(handle.ledger_id)
    bookies[0].fail_fences = False
    bookies[3].fail_fences = True  # slots 0 and 2 fenced: 2 < E - Qa + 1 = 3, yet all covered
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 5
    assert await reader.read(0, 5) == [payload(i) for i in range(6)]
    with pytest.raises(LedgerFenced):  # every write set has a fenced bookie
        await handle.append(b"late")


async def test_r18_an_entry_that_cannot_be_proven_missing_stops_recovery(cluster: Cluster) -> None:
    handle = await written(cluster, 5)
    b0, b1, _ = ensemble(cluster, handle)
    b0.fail_reads = True
    b1.fail_reads = True  # only one "no such entry" for entry 5: it might have 2 copies
    with pytest.raises(NotEnoughBookies):
        await cluster.manager.open(handle.ledger_id)
    b1.fail_reads = False  # two answers prove entry 5 has fewer than Qa copies
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 4


async def test_r20_recovered_length_counts_every_entry(cluster: Cluster) -> None:
    handle = await written(cluster, 7)
    b0, b1, b2 = ensemble(cluster, handle)
    b1.stall_adds({7, 8})
    b2.stall_adds({7, 8})
    futures = [handle.append_nowait(payload(7)), handle.append_nowait(payload(8))]
    await b0.stored(handle.ledger_id, 8).wait()
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 8
    assert reader.metadata.length == sum(len(payload(i)) for i in range(9))
    b1.release()
    b2.release()
    for f in futures:
        with pytest.raises(LedgerFenced):
            await f


async def test_recovery_reads_across_an_ensemble_change(cluster: Cluster) -> None:
    handle = await written(cluster, 4)
    ensemble(cluster, handle)[2].kill()
    for i in range(4, 9):
        await handle.append(payload(i))
    assert len(handle.metadata.fragments) == 2
    reader = await cluster.manager.open(handle.ledger_id)  # the dead bookie stays dead
    assert reader.last_entry_id == 8
    assert await reader.read(0, 8) == [payload(i) for i in range(9)]


async def test_r21_concurrent_recoveries_agree_while_the_writer_keeps_adding(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    acked: list[int] = []
    warmed_up = asyncio.Event()
    errors: list[BaseException] = []

    async def keep_writing() -> None:
        i = 0
        while True:
            batch = [handle.append_nowait(payload(i + k)) for k in range(4)]
            i += 4
            for outcome in await asyncio.gather(*batch, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    errors.append(outcome)
                else:
                    acked.append(outcome)
            if len(acked) >= 40:
                warmed_up.set()
            if errors:
                return

    writer = asyncio.create_task(keep_writing())
    await warmed_up.wait()
    readers = await asyncio.gather(*(cluster.manager.open(handle.ledger_id) for _ in range(5)))
    await writer

    lasts = {r.last_entry_id for r in readers}
    assert len(lasts) == 1
    (last,) = lasts
    assert acked == list(range(len(acked)))  # in order, no gaps
    assert max(acked) <= last
    assert all(isinstance(e, LedgerFenced) for e in errors)
    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, last)
    assert await readers[0].read(0, last) == [payload(i) for i in range(last + 1)]
