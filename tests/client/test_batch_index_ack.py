"""Batch-index acknowledgement (``batch_index_ack_enabled``, WIRE.md R20c) against a real standalone.

One batch of ten messages; one of them is acknowledged and the consumer closes (its acks durable).
With batch-index acks the next consumer gets the nine others only; without, the whole batch comes
back (the broker only knows whole entries), which is what the option is for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import free_ports
from tests.support.standalone import StandaloneProcess, run_standalone

from magnetar.client import aio
from magnetar.client.message import Message
from magnetar.client.options import ConsumerType, InitialPosition
from magnetar.protocol.errors import Timeout

pytestmark = pytest.mark.timeout(60)

EARLIEST = InitialPosition.Earliest


async def _one_batch(client: aio.Client, topic: str, n: int = 10) -> None:
    producer = await client.create_producer(topic, batching_max_publish_delay_ms=10_000, batching_max_messages=n)
    receipts = [await producer.send_async(b"m%d" % i) for i in range(n)]
    ids = [await r for r in receipts]
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 1, "the ten messages must share one entry"
    await producer.close()


async def _receive_all(consumer: aio.Consumer, quiet_ms: int = 700) -> list[Message]:
    out = []
    while True:
        try:
            out.append(await consumer.receive(timeout_millis=quiet_ms))
        except Timeout:
            return out


@pytest.mark.parametrize("consumer_type", [ConsumerType.Shared, ConsumerType.Exclusive])
async def test_one_acked_message_of_a_batch_is_not_redelivered(
    standalone: StandaloneProcess, topic: str, consumer_type: ConsumerType
) -> None:
    async with aio.Client(standalone.service_url) as client:
        opts = {"consumer_type": consumer_type, "initial_position": EARLIEST, "batch_index_ack_enabled": True}
        consumer = await client.subscribe(topic, "s", **opts)
        await _one_batch(client, topic)
        first = await _receive_all(consumer)
        assert [m.message_id().batch_index() for m in first] == list(range(10))
        await consumer.acknowledge(first[3])
        await consumer.close()  # the ack of index 3 is durable once this returns

        consumer = await client.subscribe(topic, "s", **opts)
        again = await _receive_all(consumer)
        assert sorted(m.data() for m in again) == sorted(b"m%d" % i for i in range(10) if i != 3)
        assert {m.message_id().batch_index() for m in again} == set(range(10)) - {3}
        for m in again:
            await consumer.acknowledge(m)
        await consumer.close()

        consumer = await client.subscribe(topic, "s", **opts)
        assert await _receive_all(consumer, quiet_ms=400) == []  # all ten acked: the entry is gone


async def test_without_batch_index_acks_the_whole_batch_comes_back(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        opts = {"consumer_type": ConsumerType.Shared, "initial_position": EARLIEST}
        consumer = await client.subscribe(topic, "s", **opts)
        await _one_batch(client, topic)
        first = await _receive_all(consumer)
        await consumer.acknowledge(first[3])
        await consumer.close()
        consumer = await client.subscribe(topic, "s", **opts)
        assert len(await _receive_all(consumer)) == 10


async def test_cumulative_ack_inside_a_batch_is_kept_by_index(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        opts = {"consumer_type": ConsumerType.Exclusive, "initial_position": EARLIEST, "batch_index_ack_enabled": True}
        consumer = await client.subscribe(topic, "s", **opts)
        await _one_batch(client, topic)
        first = await _receive_all(consumer)
        await consumer.acknowledge_cumulative(first[4])
        await consumer.close()
        consumer = await client.subscribe(topic, "s", **opts)
        again = await _receive_all(consumer)
        assert [m.message_id().batch_index() for m in again] == [5, 6, 7, 8, 9]


@pytest.fixture
def fixed_port_standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A standalone whose restarts keep its ports, so the client's service URL stays valid."""
    service, web, bookie = free_ports(3)
    with run_standalone(tmp_path, "--port", str(service), "--web-port", str(web), "--bookie-port", str(bookie)) as sa:
        yield sa


async def test_a_batch_index_ack_survives_a_broker_crash(fixed_port_standalone: StandaloneProcess, topic: str) -> None:
    sa = fixed_port_standalone
    async with aio.Client(sa.service_url, initial_backoff_interval_ms=50, max_backoff_interval_ms=500) as client:
        consumer = await client.subscribe(
            topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST, batch_index_ack_enabled=True
        )
        await _one_batch(client, topic)
        first = await _receive_all(consumer)
        await consumer.acknowledge(first[3])
        assert await consumer.partitions[0].wait_acks_durable(10)
        await asyncio.to_thread(sa.kill9)
        await asyncio.to_thread(sa.start)
        # The consumer re-subscribes by itself; the entry comes back without the acked index.
        again = [await consumer.receive(timeout_millis=60_000)]
        again += await _receive_all(consumer)
        assert sorted(m.message_id().batch_index() for m in again) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
