"""Lookup redirects and partitioned topics, against client-unit-test fake brokers (see conftest)."""

from __future__ import annotations

from collections import Counter

import pytest

from magnetar.client import aio
from magnetar.client.options import InitialPosition
from magnetar.client.producer.routing import partition_for_key
from magnetar.protocol.errors import ServiceNotReady

from .conftest import record_sleeps

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


async def test_lookup_redirect_loop_is_bounded_and_retried_with_backoff_until_the_operation_timeout(fake_broker):
    fake_broker.lookups[TOPIC] = (fake_broker.url, True)
    async with aio.Client(fake_broker.url, max_lookup_redirects=3, operation_timeout_seconds=1) as client:
        delays = record_sleeps(client)
        with pytest.raises(ServiceNotReady, match="redirected more than 3 times"):
            await client.create_producer("r")
    # Each attempt follows 1 + 3 redirects; attempts are spaced 0.1, 0.2, 0.4, 0.8 s (less jitter),
    # and the next wait (1.6 s) would pass the 1 s operation timeout, so the last error is raised.
    assert len(delays) == 4
    assert len(fake_broker.sent("lookup")) == 4 * (len(delays) + 1)
    assert not fake_broker.sent("producer")


async def test_multi_host_service_url_skips_a_dead_broker(broker_factory):
    dead, live = await broker_factory(), await broker_factory()
    await dead.stop()
    hosts = ",".join(u.removeprefix("magnetar://") for u in (dead.url, live.url))
    async with aio.Client(f"magnetar://{hosts}") as client:
        producer = await client.create_producer("r")
        assert (await producer.send(b"x")).entry_id() == 0
        await client.create_producer("r")
    # Both creations were served by the live broker, over one pooled connection.
    assert len(live.sent("connect")) == 1
    assert len(live.sent("lookup")) == 2


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
        producer = await client.create_producer("r", batching_max_messages=5, batching_max_publish_delay_ms=60_000)
        assert [p.topic for p in producer.partitions] == [f"{TOPIC}-partition-{i}" for i in range(3)]
        keyed = [await producer.send_async(b"k", partition_key="user-1") for _ in range(5)]
        ids = [await r for r in keyed]
        assert {i.partition() for i in ids} == {partition_for_key("user-1", 3)}
        unkeyed = [await producer.send_async(b"u") for _ in range(15)]
        await producer.flush()
        per_partition = Counter([(await r).partition() for r in unkeyed])
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
        assert {m.message_id().partition() for m in msgs} == {0, 1}
        assert {m.topic_name() for m in msgs} == {f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"}
        for m in msgs:
            await consumer.acknowledge(m)
        await consumer.close()
        acked = {(a["consumer_id"], tuple(p)) for a in fake_broker.sent("ack") for p in a["positions"]}
        assert len(acked) == 6  # each ack went to the partition consumer its message came from
