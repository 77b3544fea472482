"""WIRE.md R123 in a real two-broker cluster: the schema registry lives in the metadata store (etcd),
so it survives a kill -9 of the broker that owns the topic and a change of owner, and any broker
answers ``get_schema``.

The tests never assume which broker owns a topic: they ask the cluster (``lookup``, following
redirects) and kill or stop whichever broker the metadata names as owner.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.protocol.wire import session
from tests.support.cluster import LocalCluster, Proc, two_broker_cluster
from tests.support.polling import wait_for

from magnetar.protocol import commands as c
from magnetar.schema.info import SchemaInfo, SchemaType

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "schema-cluster")


def avro(*fields: dict[str, Any]) -> dict[str, Any]:
    definition = {"type": "record", "name": "Order", "fields": list(fields)}
    return SchemaInfo(SchemaType.AVRO, json.dumps(definition), "Order").to_wire()


ID = {"name": "id", "type": "string"}
V0 = avro(ID)
V1 = avro(ID, {"name": "qty", "type": ["null", "int"], "default": None})
V2 = avro(
    ID, {"name": "qty", "type": ["null", "int"], "default": None}, {"name": "note", "type": "string", "default": ""}
)


def new_topic(cluster: LocalCluster) -> str:
    ns = f"public/sc-{uuid.uuid4().hex[:8]}"
    request = urllib.request.Request(f"{cluster.admin_urls[0]}/admin/v2/namespaces/{ns}", method="PUT")
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 204
    return f"persistent://{ns}/orders"


def owner_proc(cluster: LocalCluster, topic: str) -> Proc:
    async def ask() -> str | None:
        async with cluster.metadata() as md:
            return await md.topic_owner(topic)

    broker_id = asyncio.run(ask())
    assert broker_id is not None, f"{topic} has no owner"
    return cluster.broker_by_id(broker_id)


def try_producer(cluster: LocalCluster, topic: str, schema: dict[str, Any], via: int) -> Any:
    """Look ``topic`` up through broker ``via`` (following redirects) and open a producer with
    ``schema`` on the answer: the ``producer_success``/``error`` frame, or None when the cluster
    is still moving the topic (connection refused, not the owner yet)."""
    url = cluster.broker_address(via).service_url
    try:
        for _ in range(4):
            with session(url) as wire:
                answer = wire.request(c.lookup(topic))
            if answer["t"] != c.LOOKUP_RESPONSE:
                return None
            url = answer["broker_url"]
            if not answer["redirect"]:
                break
        with session(url) as wire:
            answer = wire.request(c.producer(topic, 1, schema=schema))
            if answer["t"] == c.ERROR and answer["code"] != "IncompatibleSchema":
                return None  # e.g. ServiceNotReady while the bundle moves
            return answer
    except OSError:
        return None


def produce(cluster: LocalCluster, topic: str, schema: dict[str, Any], via: int = 0, within: float = 90.0) -> Any:
    return wait_for(f"a producer on {topic}", lambda: try_producer(cluster, topic, schema, via), timeout=within)


def version(answer: Any) -> int:
    assert answer["t"] == c.PRODUCER_SUCCESS, answer
    result: int = answer["schema_version"]
    return result


def versions_seen_by(cluster: LocalCluster, i: int, topic: str, numbers: range) -> list[str]:
    """The definitions broker ``i`` answers for ``numbers`` (it need not own the topic)."""
    with session(cluster.broker_address(i).service_url) as wire:
        out = []
        for n in numbers:
            answer = wire.request(c.get_schema(topic, n))
            assert answer["t"] == c.GET_SCHEMA_RESPONSE, answer
            out.append(answer["schema"]["schema"])
        return out


def test_the_registry_survives_a_kill_9_of_the_owner(cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    assert version(produce(cluster, topic, V0)) == 0
    assert version(produce(cluster, topic, V1)) == 1
    owner = owner_proc(cluster, topic)
    survivor = 1 - cluster.broker_index(owner)
    owner.kill9()
    try:
        # The other broker reads the registry at once, before it owns anything of the topic.
        assert versions_seen_by(cluster, survivor, topic, range(2)) == [V0["schema"], V1["schema"]]
        # The new owner gives a known schema its version, and a new compatible one the next.
        assert version(produce(cluster, topic, V0, via=survivor)) == 0
        assert version(produce(cluster, topic, V2, via=survivor)) == 2
        assert cluster.broker_index(owner_proc(cluster, topic)) == survivor
    finally:
        owner.start()


def test_the_registry_survives_a_change_of_owner(cluster: LocalCluster) -> None:
    topic = new_topic(cluster)
    assert version(produce(cluster, topic, V0)) == 0
    first = owner_proc(cluster, topic)
    other = 1 - cluster.broker_index(first)
    first.stop()  # a clean shutdown releases the bundles: the other broker takes the topic now
    try:
        assert version(produce(cluster, topic, V1, via=other)) == 1
        assert cluster.broker_index(owner_proc(cluster, topic)) == other
    finally:
        first.start()
    # Back with two brokers: whoever owns the topic now, both agree on every version.
    assert version(produce(cluster, topic, V2)) == 2
    for i in range(2):
        assert versions_seen_by(cluster, i, topic, range(3)) == [V0["schema"], V1["schema"], V2["schema"]]
