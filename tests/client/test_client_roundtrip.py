"""Produce and consume through the client against the client-unit-test fake broker (conftest)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import aio
from magnetar.client.options import CompressionType, InitialPosition
from magnetar.protocol.message_id import MessageId


async def test_send_then_receive_roundtrip_with_properties_and_keys(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("t1", "sub", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer("t1")
        mid = await producer.send(b"hello", properties={"a": "1"}, partition_key="k", event_timestamp=1234)
        assert mid == MessageId(-1, 7, 0, 0)
        msg = await consumer.receive(timeout_millis=5000)
        assert msg.data() == b"hello"
        assert msg.value() == b"hello"
        assert msg.properties() == {"a": "1"}
        assert msg.partition_key() == "k"
        assert msg.event_timestamp() == 1234
        assert msg.publish_timestamp() > 0
        assert msg.message_id() == mid
        assert msg.topic_name() == "persistent://public/default/t1"
        assert msg.redelivery_count() == 0
        await consumer.acknowledge(msg)


@pytest.mark.parametrize(
    "compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZLib, CompressionType.ZSTD]
)
async def test_compression_round_trips_and_is_declared_in_meta(fake_broker, compression):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("tc", "sub", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer("tc", compression_type=compression)
        payloads = [(b"x" * 50) + str(i).encode() for i in range(20)]
        receipts = [await producer.send_async(p) for p in payloads]
        await producer.flush()
        assert [r.done() for r in receipts] == [True] * 20
        got = [(await consumer.receive(timeout_millis=5000)).data() for _ in payloads]
        assert got == payloads
        meta, payload = fake_broker.logs["persistent://public/default/tc"][0]
        assert meta["comp"] == int(compression)
        if compression != CompressionType.NONE:
            assert len(payload) < meta["usize"]  # repetitive data really was compressed


async def test_async_iteration_stops_when_consumer_closes(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("ti", "sub", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer("ti")
        for i in range(3):
            await producer.send_async(str(i).encode())
        await producer.flush()
        seen = []
        async for msg in consumer:
            seen.append(msg.data())
            await consumer.acknowledge(msg)
            if len(seen) == 3:
                asyncio.get_running_loop().call_soon(asyncio.ensure_future, consumer.close())
        assert seen == [b"0", b"1", b"2"]
