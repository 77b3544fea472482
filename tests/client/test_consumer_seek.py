"""``Consumer.seek`` by message id and by publish time, against a real standalone."""

from __future__ import annotations

import time

import pytest
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.client import aio
from magnetar.client.message import Message
from magnetar.client.options import ConsumerType, InitialPosition
from magnetar.protocol.errors import Timeout, Unsupported
from magnetar.protocol.message_id import MessageId

pytestmark = pytest.mark.timeout(60)

EARLIEST = InitialPosition.Earliest


async def _produce(client: aio.Client, topic: str, bodies: list[bytes]) -> list[MessageId]:
    producer = await client.create_producer(topic, batching_enabled=False)
    ids = [await producer.send(body) for body in bodies]
    await producer.close()
    return ids


async def _receive(consumer: aio.Consumer, n: int) -> list[Message]:
    return [await consumer.receive(timeout_millis=5000) for _ in range(n)]


async def test_seek_by_id_delivers_from_after_that_message(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        ids = await _produce(client, topic, [b"m%d" % i for i in range(10)])
        for m in await _receive(consumer, 10):
            await consumer.acknowledge(m)
        await consumer.seek(ids[4])  # exclusive, as pulsar-client without start_message_id_inclusive
        again = await _receive(consumer, 5)
        assert [m.data() for m in again] == [b"m%d" % i for i in range(5, 10)]
        with pytest.raises(Timeout):
            await consumer.receive(timeout_millis=300)
        await consumer.seek(MessageId.earliest)
        assert (await consumer.receive(timeout_millis=5000)).data() == b"m0"


async def test_seek_drops_what_was_queued_for_the_old_position(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        ids = await _produce(client, topic, [b"m%d" % i for i in range(10)])
        await _receive(consumer, 3)  # m3..m9 are queued (or on their way) now
        await consumer.seek(ids[1])
        again = await _receive(consumer, 8)
        assert [m.data() for m in again] == [b"m%d" % i for i in range(2, 10)]
        with pytest.raises(Timeout):
            await consumer.receive(timeout_millis=300)


async def test_seek_by_publish_time(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        await _produce(client, topic, [b"old0", b"old1"])
        old = await _receive(consumer, 2)
        boundary = old[-1].publish_timestamp() + 1
        deadline = time.monotonic() + 5
        while time.time() * 1000 < boundary + 1:  # the next publish time is past the boundary
            assert time.monotonic() < deadline
        await _produce(client, topic, [b"new0", b"new1"])
        assert [m.data() for m in await _receive(consumer, 2)] == [b"new0", b"new1"]
        await consumer.seek(boundary)
        assert [m.data() for m in await _receive(consumer, 2)] == [b"new0", b"new1"]
        await consumer.seek(0)
        assert (await consumer.receive(timeout_millis=5000)).data() == b"old0"


async def test_partitioned_consumer_seeks_by_time_only(standalone: StandaloneProcess, topic: str) -> None:
    path = topic.removeprefix("persistent://")
    assert admin_call(standalone, "PUT", f"/admin/v2/persistent/{path}/partitions", 2)[0] == 204
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST)
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(b"m%d" % i, partition_key=f"k{i}") for i in range(6)]
        got = await _receive(consumer, 6)
        for m in got:
            await consumer.acknowledge(m)
        with pytest.raises(Unsupported):
            await consumer.seek(ids[0])
        await consumer.seek(0)
        again = await _receive(consumer, 6)
        assert sorted(m.data() for m in again) == sorted(m.data() for m in got)
