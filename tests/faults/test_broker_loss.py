"""Losing the broker that owns the topic: kill -9 (c), and a pause past its lease (d).

Both run with message deduplication on and must store no duplicate: a batch the old owner stored
but never acknowledged is resent by the client to the new owner, which knows its sequence ids (the
snapshot plus the replay of the log) and acknowledges it with -1:-1 instead of storing it again.
Scenario c also runs with deduplication off, to show what it prevents (duplicates allowed there).
"""

from __future__ import annotations

import time

import pytest
from tests.faults.nemesis import (
    acks_beyond_close,
    enable_dedup,
    finish,
    first_ack_outside,
    in_flight_at,
    in_thread,
    outcome_counts,
    owner_of,
    wait_new_owner,
)
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "no-dedup"])
async def test_kill9_of_the_owning_broker_fails_over_and_loses_nothing(
    cluster: LocalCluster, topic: str, dedup: bool
) -> None:
    if dedup:
        await enable_dedup(cluster)
    wl = QueueWorkload(cluster.service_url, topic, dedup=dedup)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    owner = await owner_of(cluster, topic)
    assert owner is not None
    ttl = max(await in_thread(cluster.granted_lease_ttls), default=int(cluster.lease_ttl))
    old_ledgers = {op.pos[0] for op in wl.ops if op.pos is not None}
    t_kill = time.monotonic()
    owner.kill9()
    wl.event(f"kill -9 {owner.name} (owner of {topic})")
    in_flight = in_flight_at(wl, t_kill)
    new_owner = await wait_new_owner(cluster, topic, owner, within=ttl + 30)
    t_owner = time.monotonic()
    first = await first_ack_outside(wl, after=t_kill, ledgers=old_ledgers, within=ttl + 60)
    await wl.wait_acked(200, after=first.t_complete, within=60)
    await in_thread(owner.start)  # back to two brokers
    wl.event(f"{owner.name} restarted")
    res = await finish(
        cluster,
        wl,
        "c-kill9-owning-broker",
        dedup=dedup,
        killed=owner.name,
        new_owner=new_owner.name,
        lease_ttl_s=ttl,
        ownership_moved_after_s=round(t_owner - t_kill, 3),
        failover_s=round(first.t_complete - t_kill, 3),
        in_flight_at_kill=len(in_flight),
        in_flight_outcomes=outcome_counts(in_flight),
    )
    beyond = await acks_beyond_close(cluster, wl)
    assert res.valid, res.summary()
    assert not beyond, beyond
    assert new_owner is not owner
    if dedup:
        assert res.duplicated == 0, res.summary()


async def test_a_paused_owner_loses_its_lease_and_acknowledges_nothing_after_the_takeover(
    cluster: LocalCluster, topic: str
) -> None:
    await enable_dedup(cluster)
    wl = QueueWorkload(cluster.service_url, topic, dedup=True)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    owner = await owner_of(cluster, topic)
    assert owner is not None
    ttl = max(await in_thread(cluster.granted_lease_ttls), default=int(cluster.lease_ttl))
    old_url = cluster.broker_address(cluster.broker_index(owner)).service_url
    old_ledgers = {op.pos[0] for op in wl.ops if op.pos is not None}
    t_pause = time.monotonic()
    owner.pause()
    wl.event(f"SIGSTOP {owner.name} (owner of {topic})")
    new_owner = await wait_new_owner(cluster, topic, owner, within=ttl + 60)
    t_owner = time.monotonic()
    first = await first_ack_outside(wl, after=t_pause, ledgers=old_ledgers, within=60)
    await wl.wait_acked(100, after=first.t_complete, within=60)
    t_resume = time.monotonic()
    owner.resume()
    wl.event(f"SIGCONT {owner.name}")
    try:
        code: int | None = await in_thread(owner.wait_exit, ttl + 20)
    except Exception:
        code = None
    t_exit = time.monotonic()
    await wl.wait_acked(100, after=t_exit, within=60)
    late_via_old = [op for op in wl.acked_after(t_resume) if op.via == old_url]
    if code is not None:
        await in_thread(owner.start)  # back to two brokers for the drain
    res = await finish(
        cluster,
        wl,
        "d-sigstop-owner-past-lease",
        dedup=True,
        paused=owner.name,
        lease_ttl_s=ttl,
        new_owner=new_owner.name,
        ownership_moved_after_s=round(t_owner - t_pause, 3),
        failover_s=round(first.t_complete - t_pause, 3),
        old_owner_exit_code=code,
        old_owner_exit_after_sigcont_s=round(t_exit - t_resume, 3) if code is not None else None,
        acks_via_old_owner_after_sigcont=len(late_via_old),
    )
    beyond = await acks_beyond_close(cluster, wl)
    assert res.valid, res.summary()
    assert not beyond, beyond
    assert not late_via_old, [(op.value, op.pos) for op in late_via_old[:5]]
    assert code == 3, f"the paused owner should exit with 3 after SIGCONT, got {code}"
    assert res.duplicated == 0, res.summary()
