"""Producer behaviour on the wire, against the client-unit-test fake broker (see conftest)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import aio
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.protocol.batch import decode_batch
from magnetar.protocol.errors import MagnetarError, MessageTooLarge, Timeout
from magnetar.protocol.message_id import MessageId

TOPIC = "persistent://public/default/p"


async def test_batch_is_sent_when_it_reaches_max_messages(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", batching_max_messages=10, batching_max_publish_delay_ms=60_000)
        receipts = [await producer.send_async(b"m%d" % i) for i in range(25)]
        # Two full batches go out without waiting for the (one minute) delay; five stay open.
        ids = [await r for r in receipts[:20]]
        assert [s["meta"]["n"] for s in fake_broker.sent("send")] == [10, 10]
        assert ids[:3] == [MessageId(-1, 7, 0, 0), MessageId(-1, 7, 0, 1), MessageId(-1, 7, 0, 2)]
        assert ids[10] == MessageId(-1, 7, 1, 0)
        assert not receipts[20].done()
        await producer.flush()
        assert (await receipts[24]) == MessageId(-1, 7, 2, 4)


async def test_batch_is_sent_before_it_would_exceed_max_bytes(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer(
            "p", batching_max_allowed_size_in_bytes=1000, batching_max_publish_delay_ms=60_000
        )
        for _ in range(30):
            await producer.send_async(b"x" * 100)
        await producer.flush()
        sends = fake_broker.sent("send")
        assert sum(s["meta"]["n"] for s in sends) == 30
        assert len(sends) > 3
        assert all(s["meta"]["usize"] <= 1000 for s in sends)


async def test_batch_is_sent_after_the_publish_delay(fake_broker):
    loop = asyncio.get_running_loop()
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", batching_max_publish_delay_ms=50)
        started = loop.time()
        receipts = [await producer.send_async(b"d%d" % i) for i in range(3)]
        await receipts[-1]
        assert loop.time() - started >= 0.045
        assert [s["meta"]["n"] for s in fake_broker.sent("send")] == [3]


async def test_sequence_ids_increase_per_message_and_send_carries_the_first(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", batching_max_messages=4)
        for _ in range(10):
            await producer.send_async(b"s")
        await producer.flush()
        sends = fake_broker.sent("send")
        assert [s["seq"] for s in sends] == [0, 4, 8]
        seqs = [r[4] for s in sends for r in decode_batch(s["meta"], s["payload"])]
        assert seqs == list(range(10))
        assert producer.last_sequence_id() == 9


async def test_without_batching_each_message_is_sent_alone_with_batch_index_minus_one(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", batching_enabled=False)
        receipts = [await producer.send_async(b"u%d" % i) for i in range(100)]
        ids = [await r for r in receipts]
        sends = fake_broker.sent("send")
        assert len(sends) == 100
        assert all(s["meta"]["b"] is False and s["meta"]["n"] == 1 for s in sends)
        assert ids[5] == MessageId(-1, 7, 5, -1)
        # The 100 frames queued in one loop iteration left in a handful of socket writes, not 100.
        assert fake_broker.writes_received < 20


async def test_message_larger_than_servers_max_is_refused_before_sending(broker_factory):
    broker = await broker_factory(max_message_size=1000)
    async with aio.Client(broker.url) as client:
        producer = await client.create_producer("p")
        with pytest.raises(MessageTooLarge):
            await producer.send(b"x" * 1001)
        assert (await producer.send(b"x" * 500)).entry_id() == 0
        assert len(broker.sent("send")) == 1


async def test_batches_are_capped_at_the_servers_max_message_size(broker_factory):
    broker = await broker_factory(max_message_size=2000)
    async with aio.Client(broker.url) as client:
        producer = await client.create_producer(
            "p", batching_max_allowed_size_in_bytes=1 << 20, batching_max_publish_delay_ms=60_000
        )
        for _ in range(50):
            await producer.send_async(b"y" * 150)
        await producer.flush()
        sends = broker.sent("send")
        assert sum(s["meta"]["n"] for s in sends) == 50
        assert all(len(s["payload"]) <= 2000 for s in sends)


async def test_send_error_from_the_broker_fails_that_batchs_receipts(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p")
        fake_broker.max_message_size = 10  # the broker now refuses what the client let through
        with pytest.raises(MessageTooLarge):
            await producer.send(b"z" * 100)


async def test_pending_sends_fail_with_timeout_after_send_timeout(fake_broker):
    fake_broker.hold_receipts = True
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", send_timeout_millis=100, batching_max_publish_delay_ms=1)
        receipts = [await producer.send_async(b"t") for _ in range(3)]
        for r in receipts:
            with pytest.raises(Timeout):
                await r
        assert producer.partitions[0].pending == 0


async def test_full_queue_is_refused_when_not_blocking(fake_broker):
    fake_broker.hold_receipts = True
    async with aio.Client(fake_broker.url, operation_timeout_seconds=1) as client:
        producer = await client.create_producer(
            "p", max_pending_messages=5, block_if_queue_full=False, send_timeout_millis=200
        )
        for _ in range(5):
            producer.send_nowait(b"q")
        with pytest.raises(ProducerQueueIsFull):
            producer.send_nowait(b"q")
        with pytest.raises(ProducerQueueIsFull):
            await producer.send_async(b"q")


async def test_blocked_sender_resumes_when_receipts_free_room(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", max_pending_messages=3, batching_max_messages=3)
        receipts = [await producer.send_async(b"b%d" % i) for i in range(10)]  # waits for room 3 times
        ids = [await r for r in receipts]
        assert [i.entry_id() for i in ids] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]


async def test_close_flushes_open_batch(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p", batching_max_publish_delay_ms=60_000)
        receipt = await producer.send_async(b"last")
        await producer.close()
        assert (await receipt) == MessageId(-1, 7, 0, 0)
        assert fake_broker.sent("close_producer")


async def test_content_must_be_bytes(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p")
        with pytest.raises(TypeError, match="bytes"):
            await producer.send_async("text")  # type: ignore[arg-type]
        assert producer.partitions[0].pending == 0


async def test_a_callback_that_is_not_callable_is_refused_at_the_call(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p")
        with pytest.raises(TypeError, match="callable"):
            await producer.send_async(b"x", callback="not a function")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="callable"):
            producer.send_nowait(b"x", callback=42)  # type: ignore[arg-type]
        assert producer.partitions[0].pending == 0
        assert (await producer.send(b"fine")) == MessageId(-1, 7, 0, 0)  # nothing of the refused ones went out


async def test_unencodable_property_fails_only_its_batch(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        producer = await client.create_producer("p")
        bad = await producer.send_async(b"x", properties={"k": {"a set"}})  # type: ignore[dict-item]
        await producer.flush()
        with pytest.raises(MagnetarError, match="cannot encode"):
            await bad
        assert (await producer.send(b"fine")).entry_id() == 0
