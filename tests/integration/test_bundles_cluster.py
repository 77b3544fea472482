"""Namespace bundles on a real 3-broker cluster: split by hand under a stream, unload towards a
chosen broker, ``ownedNamespaces``, and ``brokers shutdown`` draining a broker under a stream.

etcd, one bookie and three brokers as processes, shared by the module's tests (the shutdown test
runs last: it ends one broker). The load manager is off, so only these tests move bundles.
Streams use ``QueueWorkload`` with deduplication on (named producers whose sequence ids carry
over reconnects): every run is judged for lost, duplicated and per-producer reordered messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster, http_json
from tests.support.polling import wait_for

from magnetar.broker.cluster.ownership import topic_hash
from magnetar.broker.loadbalance.bundle_ranges import BundleRanges
from magnetar.metadata import paths
from magnetar.protocol.topic_name import TopicName

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if shutil.which("etcd") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but etcd is not installed")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    base = tmp_path_factory.mktemp("bundles-cluster")
    with LocalCluster(
        base,
        bookies=1,
        brokers=3,
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        broker_args=["--load-balancer-enabled", "false"],
    ) as c:
        yield c


def _call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return http_json(base + path, method, body, timeout=60)


def _admin_cli(admin_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", admin_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _new_namespace(cluster: LocalCluster, bundles: int) -> str:
    ns = f"public/b-{uuid.uuid4().hex[:8]}"
    done = _admin_cli(cluster.admin_urls[0], "namespaces", "create", ns, "--bundles", str(bundles))
    assert done.returncode == 0, done.stderr
    status, _ = _call(cluster.admin_urls[0], "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)
    assert status == 204
    return ns


def _ranges(cluster: LocalCluster, ns: str, broker: int | None = None) -> BundleRanges:
    """The namespace's ranges, asked of ``broker`` (default: the first broker still running)."""
    if broker is None:
        broker = next(i for i, p in enumerate(cluster.brokers) if p.alive)
    status, doc = _call(cluster.admin_urls[broker], "GET", f"/admin/v2/namespaces/{ns}/bundles")
    assert status == 200, doc
    return BundleRanges.from_json(doc)


def _bundle_of(cluster: LocalCluster, topic: str) -> str:
    t = TopicName.parse(topic)
    return _ranges(cluster, f"{t.tenant}/{t.namespace}").find(topic_hash(t))


async def _owner(cluster: LocalCluster, topic: str) -> str | None:
    t = TopicName.parse(topic)
    bundle = await asyncio.to_thread(_bundle_of, cluster, topic)
    async with cluster.metadata() as md:
        found = await md.store.get(f"/ownership/{t.tenant}/{t.namespace}/{bundle}")
    return str(json.loads(found.value)["id"]) if found is not None else None


def _judge(wl: QueueWorkload) -> None:
    res = wl.check()
    assert res.valid, res.summary()
    assert res.lost == 0 and res.duplicated == 0 and res.reordered == 0, res.summary()


async def _finish(workloads: list[QueueWorkload]) -> None:
    await asyncio.gather(*(wl.stop() for wl in workloads))
    await asyncio.gather(*(wl.drain() for wl in workloads))
    for wl in workloads:
        _judge(wl)


async def _streams(cluster: LocalCluster, topics: list[str]) -> list[QueueWorkload]:
    workloads = [QueueWorkload(cluster.service_url, t, producers=1, rate=25.0, dedup=True) for t in topics]
    for wl in workloads:
        await wl.prepare()
        await wl.start()
    await asyncio.gather(*(wl.wait_acked(20, within=60) for wl in workloads))
    return workloads


async def _more_acks(workloads: list[QueueWorkload], n: int = 20) -> None:
    now = time.monotonic()
    await asyncio.gather(*(wl.wait_acked(n, after=now, within=60) for wl in workloads))


async def test_split_by_hand_under_a_stream_loses_and_duplicates_nothing(cluster: LocalCluster) -> None:
    ns = await asyncio.to_thread(_new_namespace, cluster, 1)
    assert _ranges(cluster, ns).names() == ["0x00000000_0xffffffff"]
    topics = [f"persistent://{ns}/s-{i}" for i in range(4)]
    workloads = await _streams(cluster, topics)

    # topic count: two topics on each side; without --unload the owner keeps both halves
    done = await asyncio.to_thread(
        _admin_cli,
        cluster.admin_urls[1],
        "namespaces",
        "split-bundle",
        ns,
        "--bundle",
        "0x00000000_0xffffffff",
        "--split-algorithm-name",
        "topic_count_equally_divide",
    )
    assert done.returncode == 0, done.stderr
    halves = _ranges(cluster, ns, broker=2)
    assert halves.count == 2
    per_half = [sum(1 for t in topics if halves.find(topic_hash(TopicName.parse(t))) == b) for b in halves.names()]
    assert per_half == [2, 2]
    await _more_acks(workloads)

    # range: halve the first bundle, and unload its topics (placed again by their next lookup)
    first = halves.names()[0]
    status, body = await asyncio.to_thread(
        _call,
        cluster.admin_urls[2],
        "PUT",
        f"/admin/v2/namespaces/{ns}/{first}/split?unload=true&splitAlgorithmName=range_equally_divide",
    )
    assert status == 204, body
    after = _ranges(cluster, ns)
    assert after.count == 3
    lo, hi = (int(x, 16) for x in first.split("_"))
    mid = lo + (hi - lo) // 2
    assert f"0x{lo:08x}_0x{mid:08x}" in after.names() and f"0x{mid:08x}_0x{hi:08x}" in after.names()
    await _more_acks(workloads)
    await _finish(workloads)
    for t in topics:  # every topic is served from a bundle of the new ranges
        assert await _owner(cluster, t) is not None


async def test_unload_with_destination_broker_moves_the_bundle_there(cluster: LocalCluster) -> None:
    ns = await asyncio.to_thread(_new_namespace, cluster, 4)
    topic = f"persistent://{ns}/moved"
    workloads = await _streams(cluster, [topic])
    owner = await _owner(cluster, topic)
    assert owner is not None
    ids = [cluster.broker_address(i).broker_id for i in range(3)]
    bundle = await asyncio.to_thread(_bundle_of, cluster, topic)
    for destination in [b for b in ids if b != owner]:  # to each other broker in turn: no lucky hash
        done = await asyncio.to_thread(
            _admin_cli, cluster.admin_urls[0], "namespaces", "unload", ns, "--bundle", bundle, "-d", destination
        )
        assert done.returncode == 0, done.stderr
        await _more_acks(workloads)
        assert await _owner(cluster, topic) == destination
    async with cluster.metadata() as md:  # the hint is gone once the bundle is taken
        t = TopicName.parse(topic)
        assert await md.store.get(paths.bundle_destination(t.tenant, t.namespace, bundle)) is None
    await _finish(workloads)


async def test_owned_namespaces_lists_a_brokers_bundles_through_any_broker(cluster: LocalCluster) -> None:
    ns = await asyncio.to_thread(_new_namespace, cluster, 4)
    topic = f"persistent://{ns}/owned"
    status, _ = await asyncio.to_thread(_call, cluster.admin_urls[0], "PUT", f"/admin/v2/persistent/{ns}/owned")
    assert status in (204, 409)
    await asyncio.to_thread(_call, cluster.admin_urls[0], "GET", f"/lookup/v2/topic/persistent/{ns}/owned")
    owner = await _owner(cluster, topic)
    assert owner is not None
    bundle = await asyncio.to_thread(_bundle_of, cluster, topic)
    config = _call(cluster.admin_urls[0], "GET", "/admin/v2/brokers/configuration/runtime")[1]
    name = config["clusterName"]
    for asked in range(3):  # answered by the owner, whichever broker is asked
        status, owned = await asyncio.to_thread(
            _call, cluster.admin_urls[asked], "GET", f"/admin/v2/brokers/{name}/{owner}/ownedNamespaces"
        )
        assert status == 200, owned
        assert owned[f"{ns}/{bundle}"] == {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
    status, _ = await asyncio.to_thread(
        _call, cluster.admin_urls[0], "GET", "/admin/v2/brokers/no-such-cluster/x:1/ownedNamespaces"
    )
    assert status == 404


async def test_brokers_shutdown_drains_a_broker_under_a_stream_without_client_errors(cluster: LocalCluster) -> None:
    ns = await asyncio.to_thread(_new_namespace, cluster, 4)
    topics = [f"persistent://{ns}/d-{i}" for i in range(3)]
    workloads = await _streams(cluster, topics)
    owner = await _owner(cluster, topics[0])
    assert owner is not None
    proc = cluster.broker_by_id(owner)
    admin_url = cluster.admin_urls[cluster.broker_index(proc)]
    done = await asyncio.to_thread(_admin_cli, admin_url, "brokers", "shutdown", "-m", "10")
    assert done.returncode == 0, done.stderr
    code = await asyncio.to_thread(proc.wait_exit, 60)
    assert code == 0, proc.log_tail(40)
    await _more_acks(workloads, 40)
    for t in topics:
        assert await _owner(cluster, t) not in (None, owner)
    await _finish(workloads)
    for wl in workloads:
        assert all(op.status == "ok" for op in wl.ops), [op for op in wl.ops if op.status != "ok"][:5]
        assert wl.producer_recreations == 0 and wl.consumer_recreations == 0, wl.events
    wait_for("the drained broker gone from the live set", lambda: owner not in _live(cluster))


def _live(cluster: LocalCluster) -> list[str]:
    for url in cluster.admin_urls:
        try:
            status, body = _call(url, "GET", "/admin/v2/brokers")
        except OSError:
            continue
        if status == 200:
            return list(body)
    return []
