"""Isolation under faults: kill -9 every broker of group A; tenant B goes on, tenant A waits for A.

A cluster of four brokers: group A = brokers 0, 1 (tenant ``iso-a``), group B = brokers 2, 3
(tenant ``iso-b``), no shared broker. After the kill, tenant A's topics must not move to group B:
lookups fail with the policy's ServiceNotReady, group-B brokers asked directly refuse, and no
ownership key of tenant A appears. Restarting one A broker serves tenant A again, with its data.
"""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest
from tests.protocol.wire import session
from tests.security.test_isolation import http_lookup, owners_now, port_of, setup_groups
from tests.support.cluster import LocalCluster, wait_until

import magnetar
from magnetar.protocol import commands as c
from magnetar.protocol.errors import ServiceNotReady


def live_brokers(cluster: LocalCluster) -> list[str]:
    async def ask() -> list[str]:
        async with cluster.metadata() as md:
            return sorted(await md.store.children("/brokers/available"))

    return asyncio.run(ask())


@pytest.mark.faults
@pytest.mark.timeout(240)
def test_group_a_down_tenant_b_unaffected_and_a_never_moves(tmp_path_factory: pytest.TempPathFactory) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    base = tmp_path_factory.mktemp("isolation-faults")
    with LocalCluster(base, bookies=1, brokers=4, ensemble_size=1, write_quorum=1, ack_quorum=1) as cluster:
        try:
            run_scenario(cluster)
        except BaseException:
            print(cluster.log_tails())
            raise


def run_scenario(cluster: LocalCluster) -> None:
    setup_groups(cluster, [0, 1], [2, 3], ["ns"])
    a_topic, b_topic = "persistent://iso-a/ns/data", "persistent://iso-b/ns/data"
    b_service = "magnetar://" + ",".join(f"127.0.0.1:{cluster.broker_ports[i]}" for i in (2, 3))
    with magnetar.Client(cluster.service_url, operation_timeout_seconds=30) as client:
        client.subscribe(a_topic, "keep").close()  # the subscription keeps tenant A's data
        a_producer = client.create_producer(a_topic, batching_enabled=False)
        for i in range(10):
            a_producer.send(f"a{i}".encode())
        a_producer.close()
    a_owner = owners_now(cluster)
    a_ids = {f"127.0.0.1:{cluster.broker_ports[i]}" for i in (0, 1)}
    assert {o for p, o in a_owner.items() if p.startswith("/ownership/iso-a/")} <= a_ids

    # Tenant B: a producer and a consumer that stay open through the kill (only B's brokers listed).
    with magnetar.Client(b_service, operation_timeout_seconds=30) as b_client:
        b_consumer = b_client.subscribe(b_topic, "b")
        b_producer = b_client.create_producer(b_topic, batching_enabled=False)
        b_producer.send(b"before")
        assert b_consumer.receive(timeout_millis=10_000).data() == b"before"

        for i in (0, 1):
            cluster.brokers[i].kill9()
        # Their sessions expire (lease TTL 3 s): the registrations and ownership keys go.
        wait_until(lambda: not set(live_brokers(cluster)) & a_ids, timeout=30, what="group A's leases expired")
        wait_until(
            lambda: not [p for p in owners_now(cluster) if p.startswith("/ownership/iso-a/")],
            timeout=30,
            what="tenant A's ownership released",
        )

        # Tenant B keeps producing and consuming, with no error.
        started = time.monotonic()
        for i in range(20):
            b_producer.send(f"after{i}".encode())
        for i in range(20):
            msg = b_consumer.receive(timeout_millis=10_000)
            assert msg.data() == f"after{i}".encode()
            b_consumer.acknowledge(msg)
        assert time.monotonic() - started < 20

        # Tenant A: the lookup fails with the policy's error, through either B broker.
        for i in (2, 3):
            status, answer = http_lookup(cluster, a_topic, broker=i)
            assert status == 503, answer
            assert (
                "no broker of namespace isolation policy group-a is available for namespace iso-a/ns"
                in (answer["reason"])
            )
            with session(cluster.broker_address(i).service_url) as wire:
                answer = wire.request(c.lookup(a_topic))
                assert answer["t"] == c.ERROR and answer["code"] == "ServiceNotReady", answer
                assert "namespace isolation policy group-a" in answer["message"]
                answer = wire.request(c.producer(a_topic, 1))  # asked directly: refused, nothing loaded
                assert answer["t"] == c.ERROR and answer["code"] == "ServiceNotReady", answer
                assert "namespace isolation policy group-a" in answer["message"]
        with magnetar.Client(b_service, operation_timeout_seconds=3) as a_client:
            with pytest.raises(ServiceNotReady, match="namespace isolation policy group-a"):
                a_client.create_producer(a_topic)
        assert not [p for p in owners_now(cluster) if p.startswith("/ownership/iso-a/")]

        # One A broker back: tenant A is served by it, with the data written before the kill.
        cluster.brokers[0].restart()
        with magnetar.Client(cluster.service_url, operation_timeout_seconds=30) as a_client:
            consumer = a_client.subscribe(a_topic, "keep")
            got = [consumer.receive(timeout_millis=10_000).data() for _ in range(10)]
            assert got == [f"a{i}".encode() for i in range(10)]
        status, answer = http_lookup(cluster, a_topic, broker=2)
        assert status == 200 and port_of(answer["brokerUrl"]) == cluster.broker_ports[0], answer
        held = {o for p, o in owners_now(cluster).items() if p.startswith("/ownership/iso-a/")}
        assert held == {f"127.0.0.1:{cluster.broker_ports[0]}"}
        b_producer.send(b"last")
        assert b_consumer.receive(timeout_millis=10_000).data() == b"last"
