"""The workload on a healthy cluster: the harness and the checker agree that nothing goes wrong."""

from __future__ import annotations

import pytest
from tests.faults.nemesis import record
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


async def test_a_healthy_cluster_loses_nothing(cluster: LocalCluster, topic: str) -> None:
    wl = QueueWorkload(cluster.service_url, topic)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(500, within=60)
    await wl.stop()
    await wl.drain()
    res = wl.check()
    record("baseline", **res.counts(), **wl.stats())
    assert res.valid, res.summary()
    assert res.ok >= 500 and res.lost == 0 and res.duplicated == 0
