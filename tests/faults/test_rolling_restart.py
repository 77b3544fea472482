"""Rolling restart of every bookie, one at a time, then of both brokers (g): nothing is lost.

Each process gets SIGTERM (a bookie deregisters and finishes its queued adds; a broker unloads its
bundles, telling clients to look their topics up again), is started again on the same data
directory and ports, and the next one waits until it is ready and writes are flowing again.
Message deduplication is on: a batch resent across a broker's restart is not stored twice.
"""

from __future__ import annotations

import time

import pytest
from tests.faults.nemesis import acks_beyond_close, enable_dedup, finish, in_thread
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


async def test_rolling_restart_of_all_bookies_then_both_brokers_loses_nothing(
    cluster: LocalCluster, topic: str
) -> None:
    await enable_dedup(cluster)
    wl = QueueWorkload(cluster.service_url, topic, dedup=True)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    pauses: dict[str, float] = {}
    for proc in [*cluster.bookies, *cluster.brokers]:
        t_stop = time.monotonic()
        code = await in_thread(proc.stop)
        wl.event(f"SIGTERM {proc.name}: exit {code}")
        await in_thread(proc.start)
        wl.event(f"{proc.name} ready again")
        await wl.wait_acked(100, after=time.monotonic(), within=60)
        pauses[proc.name] = round(time.monotonic() - t_stop, 3)
        assert code == 0, f"{proc.name} did not stop cleanly on SIGTERM (exit {code})"
    res = await finish(cluster, wl, "g-rolling-restart", dedup=True, restart_to_100_acks_s=pauses)
    beyond = await acks_beyond_close(cluster, wl)
    assert res.valid, res.summary()
    assert not beyond, beyond
    assert res.duplicated == 0, res.summary()
