"""R6-R13: striping, pipelining, ack quorum, in-order acks, sticky failure, ensemble change, close.

Bookies are real (``BookieStorage``); faults are injected by ``FaultyBookie`` (conftest).
"""

from __future__ import annotations

import asyncio

import pytest
from tests.ledger.cluster import Cluster, FaultyBookie

from magnetar.ledger.distribution import contains_slot
from magnetar.ledger.metadata_format import Fragment, LedgerState, encode, ledger_path
from magnetar.ledger.write_handle import WriteHandle
from magnetar.protocol.errors import LedgerClosed, LedgerFenced, NoSuchEntry, NoSuchLedger, NotEnoughBookies


def payload(i: int) -> bytes:
    return f"entry-{i}".encode() * (1 + i % 7)


def ensemble(cluster: Cluster, handle: WriteHandle) -> list[FaultyBookie]:
    return [cluster.bookie(b) for b in handle.metadata.last_ensemble]


def has_entry(bookie: FaultyBookie, ledger_id: int, entry_id: int) -> bool:
    try:
        bookie.storage.read_sync(ledger_id, entry_id)
    except (NoSuchEntry, NoSuchLedger):
        return False
    return True


async def test_r6_each_bookie_stores_exactly_the_entries_of_its_slot(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 2, 2)
    for i in range(12):
        assert await handle.append(payload(i)) == i
    for slot, bookie in enumerate(ensemble(cluster, handle)):
        stored = [e for e in range(12) if has_entry(bookie, handle.ledger_id, e)]
        assert stored == [e for e in range(12) if contains_slot(e, slot, 3, 2)]


async def test_r6_lac_is_piggybacked_on_adds(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 3)  # Qa = 3: an ack means every copy is stored
    for i in range(5):
        await handle.append(payload(i))
    # entry 4 was sent while the LAC was 3; every bookie received it (Qw = E)
    lacs = [await b.storage.read_lac(handle.ledger_id) for b in ensemble(cluster, handle)]
    assert lacs == [3, 3, 3]
    assert handle.last_add_confirmed == 4


async def test_r7_appends_are_pipelined(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    bookies = ensemble(cluster, handle)
    for b in bookies:
        b.hold_acks()
    futures = [handle.append_nowait(payload(i)) for i in range(50)]
    # every entry reaches every bookie while not a single one has been acknowledged
    for b in bookies:
        await b.stored(handle.ledger_id, 49).wait()
    assert not any(f.done() for f in futures)
    for b in bookies:
        b.release()
    assert await asyncio.gather(*futures) == list(range(50))
    assert await handle.read(0, 49) == [payload(i) for i in range(50)]


async def test_r8_no_ack_with_fewer_than_qa_copies(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    b0, b1, b2 = ensemble(cluster, handle)
    b0.hold_acks()
    b1.hold_acks()
    future = handle.append_nowait(b"x")
    for b in (b0, b1, b2):
        await b.stored(handle.ledger_id, 0).wait()
    assert not future.done(), "acknowledged with one ack while Qa = 2"
    assert handle.last_add_confirmed == -1
    b1.release()
    assert await future == 0
    assert handle.last_add_confirmed == 0


async def test_r8_r12_lost_acks_without_replacement_fail_with_not_enough_bookies(
    small_cluster: Cluster,
) -> None:
    cluster = small_cluster
    handle = await cluster.manager.create(3, 3, 2)
    b0, b1, _ = ensemble(cluster, handle)
    b0.hold_acks()
    b1.hold_acks()
    future = handle.append_nowait(b"x")
    await b0.stored(handle.ledger_id, 0).wait()
    await b1.stored(handle.ledger_id, 0).wait()
    b0.kill()  # the data is on all three bookies, but only one ack ever arrives
    b1.kill()
    with pytest.raises(NotEnoughBookies):
        await future
    assert handle.last_add_confirmed == -1


async def test_r9_acks_are_delivered_in_entry_order(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 2, 2)
    b0, b1, _ = ensemble(cluster, handle)
    b0.hold_acks({0})  # entry 0 lives on slots 0 and 1; entry 1 on slots 1 and 2
    order: list[int] = []
    futures = [handle.append_nowait(payload(i)) for i in range(6)]
    for f in futures:
        f.add_done_callback(lambda f: order.append(f.result()))
    for e in range(6):  # every later entry is on its bookies, and acked by them
        for slot, bookie in enumerate(ensemble(cluster, handle)):
            if contains_slot(e, slot, 3, 2):
                await bookie.stored(handle.ledger_id, e).wait()
    assert b1 is not b0
    assert order == []
    assert not any(f.done() for f in futures)
    b0.release()
    await asyncio.gather(*futures)
    assert order == list(range(6))


async def test_r10_failure_is_sticky(small_cluster: Cluster) -> None:
    cluster = small_cluster
    handle = await cluster.manager.create(3, 3, 3)
    assert await handle.append(b"a") == 0
    ensemble(cluster, handle)[1].kill()
    first, second = handle.append_nowait(b"b"), handle.append_nowait(b"c")
    with pytest.raises(NotEnoughBookies):
        await first
    with pytest.raises(NotEnoughBookies):
        await second
    ensemble(cluster, handle)[1].dead = False  # coming back does not revive the handle
    with pytest.raises(NotEnoughBookies):
        await handle.append(b"d")
    assert handle.last_add_confirmed == 0


async def test_r12_ensemble_change_replaces_a_dead_bookie_by_cas(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    old = handle.metadata.last_ensemble
    (spare,) = set(cluster.bookies) - set(old)
    before = await cluster.store.get(ledger_path(handle.ledger_id))
    assert before is not None
    for i in range(5):
        await handle.append(payload(i))
    cluster.bookie(old[1]).kill()
    futures = [handle.append_nowait(payload(i)) for i in range(5, 10)]
    assert await asyncio.gather(*futures) == list(range(5, 10))

    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert md.fragments == (Fragment(0, old), Fragment(5, (old[0], spare, old[2])))
    assert md.state is LedgerState.OPEN
    assert md == handle.metadata
    after = await cluster.store.get(ledger_path(handle.ledger_id))
    assert after is not None and after.version > before.version
    for e in range(5, 10):  # acked by Qa = 2 bookies; the third copy may still be in flight
        await cluster.bookie(spare).stored(handle.ledger_id, e).wait()
    stored = [e for e in range(10) if has_entry(cluster.bookie(spare), handle.ledger_id, e)]
    assert stored == list(range(5, 10))

    await handle.close()
    reader = await cluster.manager.open(handle.ledger_id)
    assert await reader.read(0, 9) == [payload(i) for i in range(10)]  # old[1] is still dead


async def test_r12_unacknowledged_entries_move_to_the_replacement(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    b0, b1, b2 = ensemble(cluster, handle)
    (spare,) = set(cluster.bookies) - set(handle.metadata.last_ensemble)
    later = set(range(10, 20))
    b1.hold_acks(later)
    b2.hold_acks(later)
    futures = [handle.append_nowait(payload(i)) for i in range(20)]
    for b in (b0, b1, b2):
        await b.stored(handle.ledger_id, 19).wait()
    assert await asyncio.gather(*futures[:10]) == list(range(10))
    assert not any(f.done() for f in futures[10:])  # one ack each (b0)

    b1.kill()  # its held acks are lost: entries 10..19 must be re-sent to the spare
    assert await asyncio.gather(*futures[10:]) == list(range(10, 20))
    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert md.fragments[-1] == Fragment(10, (b0.bookie_id, spare, b2.bookie_id))
    stored = [e for e in range(20) if has_entry(cluster.bookie(spare), handle.ledger_id, e)]
    assert stored == list(range(10, 20))
    b2.release()


async def test_r12_ensemble_change_on_a_recovering_ledger_fails_with_ledger_fenced(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    await handle.append(b"a")
    current = await cluster.store.get(ledger_path(handle.ledger_id))
    assert current is not None
    md = handle.metadata.in_state(LedgerState.IN_RECOVERY)
    await cluster.store.put(ledger_path(handle.ledger_id), encode(md), current.version)
    ensemble(cluster, handle)[0].kill()
    with pytest.raises(LedgerFenced):
        await handle.append(b"b")
    assert (await cluster.manager.get_metadata(handle.ledger_id)).fragments == md.fragments


async def test_r13_close_records_last_entry_and_length(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 2, 2, custom={"owner": "test"})
    for i in range(5):
        await handle.append(payload(i))
    await handle.close()
    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert md.state is LedgerState.CLOSED
    assert md.last_entry_id == 4
    assert md.length == sum(len(payload(i)) for i in range(5)) == handle.length
    assert md.custom == {"owner": "test"}
    await handle.close()  # idempotent
    with pytest.raises(LedgerClosed):
        await handle.append(b"late")


async def test_r13_close_of_an_empty_ledger(cluster: Cluster) -> None:
    handle = await cluster.manager.create()
    await handle.close()
    md = await cluster.manager.get_metadata(handle.ledger_id)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, -1, 0)


async def test_r13_close_waits_for_outstanding_adds(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    bookies = ensemble(cluster, handle)
    for b in bookies:
        b.hold_acks()
    futures = [handle.append_nowait(payload(i)) for i in range(3)]
    closing = asyncio.create_task(handle.close())
    for b in bookies:
        await b.stored(handle.ledger_id, 2).wait()
    assert not closing.done()
    assert (await cluster.manager.get_metadata(handle.ledger_id)).state is LedgerState.OPEN
    for b in bookies:
        b.release()
    await closing
    assert await asyncio.gather(*futures) == [0, 1, 2]
    assert (await cluster.manager.get_metadata(handle.ledger_id)).last_entry_id == 2


async def test_r13_close_after_recovery_at_a_higher_entry_raises_ledger_fenced(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 3, 2)
    await handle.append(b"a")
    _, b1, b2 = ensemble(cluster, handle)
    b1.hold_acks()
    b2.hold_acks()
    future = handle.append_nowait(b"b")  # stored everywhere, acked by b0 only
    await b1.stored(handle.ledger_id, 1).wait()
    await b2.stored(handle.ledger_id, 1).wait()
    reader = await cluster.manager.open(handle.ledger_id)
    assert reader.last_entry_id == 1  # recovery found the unacknowledged entry
    b1.kill()
    b2.kill()  # the writer never gets a second ack for entry 1
    with pytest.raises((LedgerFenced, NotEnoughBookies)):
        await future
    with pytest.raises(LedgerFenced):
        await handle.close()


async def test_r14_writer_reads_only_confirmed_entries(cluster: Cluster) -> None:
    handle = await cluster.manager.create(3, 2, 2)
    for i in range(4):
        await handle.append(payload(i))
    assert await handle.read(1, 3) == [payload(i) for i in (1, 2, 3)]
    with pytest.raises(NoSuchEntry):
        await handle.read(2, 4)
