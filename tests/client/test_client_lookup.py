"""Lookup redirects and partitioned topics, against client-unit-test fake brokers (see conftest)."""

from __future__ import annotations

from collections import Counter

import pytest

from magnetar.client import aio
from magnetar.client.options import InitialPosition
from magnetar.client.routing import partition_for_key
from magnetar.protocol.errors import ServiceNotReady

TOPIC = "persistent://public/default/r"


async def test_lookup_follows_redirects_to_the_owning_broker(broker_factory):
    first, second, owner = await broker_factory(), await broker_factory(), await broker_factory()
    first.lookups[TOPIC] = (second.url, True)
    second.lookups[TOPIC] = (owner.url, False)  # second knows the owner: connect there, done
    async with aio.Client(first.url) as client:
        producer = await client.create_producer("r")
        await producer.send(b"routed")
    assert [f["t"] for f in first.frames if f["t"] != "partitioned_metadata"][:2] == ["connect", "lookup"]
    assert second.sent("lookup") and not second.sent("producer")
    assert owner.sent("producer") and len(owner.sent("send")) == 1
    assert not owner.sent("lookup")
    assert not first.sent("producer")


async def test_lookup_redirect_loop_is_bounded(fake_broker):
    fake_broker.lookups[TOPIC] = (fake_broker.url, True)
    async with aio.Client(fake_broker.url, max_lookup_redirects=3) as client:
        with pytest.raises(ServiceNotReady, match="redirected"):
            await client.create_producer("r")
    assert len(fake_broker.sent("lookup")) == 4


async def test_one_connection_per_broker_url(broker_factory):
    a, b = await broker_factory(), await broker_factory()
    a.lookups[TOPIC] = (b.url, False)
    async with aio.Client(a.url) as client:
        for _ in range(3):
            await client.create_producer("r")
    assert len(b.sent("connect")) == 1
    assert len(b.sent("producer")) == 3


async def test_partitioned_producer_routes_keys_by_hash_and_others_round_robin_per_batch(fake_broker):
    fake_broker.partitions[TOPIC] = 3
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer(
            "r", batching_max_messages=5, batching_max_publish_delay_ms=60_000
        )
        assert [p.topic for p in producer.partitions] == [f"{TOPIC}-partition-{i}" for i in range(3)]
        keyed = [await producer.send_async(b"k", partition_key="user-1") for _ in range(5)]
        ids = [await r for r in keyed]
        assert {i.partition for i in ids} == {partition_for_key("user-1", 3)}
        unkeyed = [await producer.send_async(b"u") for _ in range(15)]
        await producer.flush()
        per_partition = Counter([(await r).partition for r in unkeyed])
        assert sorted(per_partition.values()) == [5, 5, 5]  # three full batches, one per partition


async def test_partitioned_consumer_merges_every_partition_with_partition_in_ids(fake_broker):
    fake_broker.partitions[TOPIC] = 2
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("r", "s", initial_position=InitialPosition.Earliest)
        assert sorted(f["topic"] for f in fake_broker.sent("subscribe")) == [
            f"{TOPIC}-partition-0",
            f"{TOPIC}-partition-1",
        ]
        producer = await client.create_producer("r", batching_enabled=False)
        for i in range(6):
            await producer.send_async(b"%d" % i)
        await producer.flush()
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(6)]
        assert sorted(m.data() for m in msgs) == [b"%d" % i for i in range(6)]
        assert {m.message_id().partition for m in msgs} == {0, 1}
        assert {m.topic_name() for m in msgs} == {f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"}
        for m in msgs:
            await consumer.acknowledge(m)
        await consumer.close()
        acked = {(a["consumer_id"], tuple(p)) for a in fake_broker.sent("ack") for p in a["positions"]}
        assert len(acked) == 6  # each ack went to the partition consumer its message came from
