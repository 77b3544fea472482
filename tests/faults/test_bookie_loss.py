"""Losing bookies under a running workload: one of the ensemble (a), two at once (b).

With E = 3 on exactly three bookies there is no bookie to replace a dead one, so the writer cannot
change its ensemble: writes stall until the bookie is back (the 3-bookie variant of (a)). The
"ledger gets a new fragment" half of (a) therefore runs with one spare bookie (E = 3 on 4).
"""

from __future__ import annotations

import time

import pytest
from tests.faults.nemesis import (
    acks_beyond_close,
    current_ledger,
    eventually,
    finish,
    hold_until,
    in_thread,
    ledger_metadata,
    underreplicated,
    wait_gauge,
    wait_underreplicated_zero,
)
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


@pytest.mark.parametrize("cluster", [{"bookies": 4}], indirect=True, ids=["4-bookies"])
async def test_kill9_one_bookie_of_the_ensemble_changes_the_ensemble_and_loses_nothing(
    cluster: LocalCluster, topic: str
) -> None:
    wl = QueueWorkload(cluster.service_url, topic)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    ledger_id, before = await current_ledger(cluster, wl)
    victim = cluster.bookie(before.last_ensemble[0])
    t_kill = time.monotonic()
    victim.kill9()
    wl.event(f"kill -9 {victim.name} (ensemble of ledger {ledger_id}: {before.last_ensemble})")
    t_first = await wl.wait_acked(1, after=t_kill, within=60)
    await wl.wait_acked(200, after=t_kill, within=60)
    after = await ledger_metadata(cluster, ledger_id)

    async def marked() -> dict[int, bytes]:
        return await underreplicated(cluster)

    seen = await eventually(marked, within=60, what=f"ledger {ledger_id} marked under-replicated")
    t_marked = time.monotonic()
    t_gauge_up = await wait_gauge(cluster, lambda v: v >= 1, within=15)
    # The ledger is still open (its writer replaced the bookie in the fragment it writes), so the
    # replication workers leave it to its writer; the marker goes when the bookie is back.
    await in_thread(victim.start)
    t_restart = time.monotonic()
    wl.event(f"{victim.name} restarted")
    t_zero = await wait_underreplicated_zero(cluster, within=120)
    t_gauge_zero = await wait_gauge(cluster, lambda v: v == 0, within=30)
    await wl.wait_acked(200, after=t_restart, within=60)
    res = await finish(
        cluster,
        wl,
        "a-kill9-one-ensemble-bookie-4-bookies",
        ledger=ledger_id,
        killed=victim.name,
        fragments_before=[[f.first_entry, *f.bookies] for f in before.fragments],
        fragments_after=[[f.first_entry, *f.bookies] for f in after.fragments] if after else None,
        underreplicated_marked=sorted(seen),
        first_ack_after_kill_s=round(t_first - t_kill, 3),
        underreplicated_marked_after_kill_s=round(t_marked - t_kill, 3),
        bookie_down_s=round(t_restart - t_kill, 3),
        underreplicated_zero_after_restart_s=round(t_zero - t_restart, 3),
        underreplicated_zero_after_kill_s=round(t_zero - t_kill, 3),
        gauge_up_after_kill_s=round(t_gauge_up - t_kill, 3) if t_gauge_up else None,
        gauge_zero_after_restart_s=round(t_gauge_zero - t_restart, 3) if t_gauge_zero else None,
    )
    beyond = await acks_beyond_close(cluster, wl)
    assert res.valid, res.summary()
    assert not beyond, beyond
    assert after is not None and len(after.fragments) > len(before.fragments), after
    assert victim.name not in after.last_ensemble


async def test_kill9_one_bookie_with_no_spare_stalls_writes_and_loses_nothing(
    cluster: LocalCluster, topic: str
) -> None:
    wl = QueueWorkload(cluster.service_url, topic)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    ledger_id, before = await current_ledger(cluster, wl)
    victim = cluster.bookie(before.last_ensemble[0])
    t_kill = time.monotonic()
    victim.kill9()
    wl.event(f"kill -9 {victim.name} (ensemble of ledger {ledger_id}: {before.last_ensemble})")
    await eventually(lambda: underreplicated(cluster), within=60, what=f"ledger {ledger_id} marked under-replicated")
    t_marked = time.monotonic()
    await in_thread(victim.start)
    t_restart = time.monotonic()
    wl.event(f"{victim.name} restarted")
    t_resumed = await wl.wait_acked(1, after=t_restart, within=60)
    await wl.wait_acked(200, after=t_restart, within=60)
    t_zero = await wait_underreplicated_zero(cluster, within=120)
    acked_while_down = len([op for op in wl.acked_after(t_kill + 2.0) if op.t_complete and op.t_complete < t_restart])
    res = await finish(
        cluster,
        wl,
        "a-kill9-one-ensemble-bookie-3-bookies",
        ledger=ledger_id,
        killed=victim.name,
        ledgers_after=sorted({op.pos[0] for op in wl.ops if op.pos is not None}),
        acked_while_down=acked_while_down,
        underreplicated_marked_after_kill_s=round(t_marked - t_kill, 3),
        writes_resumed_after_restart_s=round(t_resumed - t_restart, 3),
        underreplicated_zero_after_restart_s=round(t_zero - t_restart, 3),
    )
    beyond = await acks_beyond_close(cluster, wl)
    assert res.valid, res.summary()
    assert not beyond, beyond


async def test_kill9_two_bookies_at_once_never_acks_below_the_ack_quorum(cluster: LocalCluster, topic: str) -> None:
    wl = QueueWorkload(cluster.service_url, topic)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    ledger_id, before = await current_ledger(cluster, wl)
    victims = [cluster.bookie(b) for b in before.last_ensemble[:2]]
    t_kill = time.monotonic()
    for v in victims:
        v.kill9()
    wl.event(f"kill -9 {[v.name for v in victims]} (ensemble of ledger {ledger_id}: {before.last_ensemble})")
    # With one bookie of three left no entry can reach Qa = 2: nothing may be acknowledged while
    # they are down (after a short grace for acks already on their way when the signal landed).
    down_for = 8.0
    await hold_until(t_kill + down_for, what="the bookies stayed down")
    t_restart = time.monotonic()
    acked_while_down = [op for op in wl.acked_after(t_kill + 2.0) if op.t_complete and op.t_complete < t_restart]
    for v in victims:
        await in_thread(v.start)
    wl.event(f"{[v.name for v in victims]} restarted")
    t_resumed = await wl.wait_acked(1, after=t_restart, within=60)
    await wl.wait_acked(200, after=t_restart, within=60)
    res = await finish(
        cluster,
        wl,
        "b-kill9-two-bookies",
        ledger=ledger_id,
        killed=[v.name for v in victims],
        down_s=round(t_restart - t_kill, 3),
        acked_while_down=len(acked_while_down),
        writes_resumed_after_restart_s=round(t_resumed - t_restart, 3),
        ledgers_after=sorted({op.pos[0] for op in wl.ops if op.pos is not None}),
    )
    beyond = await acks_beyond_close(cluster, wl)
    assert res.valid, res.summary()
    assert not beyond, beyond
    assert not acked_while_down, [(op.value, op.pos) for op in acked_while_down[:5]]
