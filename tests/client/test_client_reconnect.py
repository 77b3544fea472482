"""Reconnection, against the client-unit-test fake brokers (see conftest): dropped connections, a
killed broker, pushed closes, ServiceNotReady answers, redirects to a new owner, a silent broker.

Backoff waits are recorded instead of slept (``record_sleeps``) wherever a test only needs the
client to try again; tests that need the broker to stay down for a while use a few-millisecond
backoff instead, so nothing sleeps for real seconds.
"""

from __future__ import annotations

import asyncio

import pytest

import magnetar
from magnetar.client import aio
from magnetar.client.config.consumer import ConsumerConfig
from magnetar.client.consumer.consumer import Consumer
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.message import EntryInfo, Message
from magnetar.client.net.reconnect import Backoff
from magnetar.client.options import ConsumerType, InitialPosition, Result
from magnetar.protocol.batch import decode_batch
from magnetar.protocol.errors import AlreadyClosed, ConsumerBusy, Timeout
from magnetar.protocol.message_id import MessageId

from .conftest import FakeBroker, record_sleeps

TOPIC = "persistent://public/default/rc"
FAST = {"initial_backoff_interval_ms": 5, "max_backoff_interval_ms": 20}


def _after(frames: list[dict], t: str, nth: int) -> list[dict]:
    """The frames that followed the ``nth`` (0-based) frame of type ``t``."""
    idx = [i for i, f in enumerate(frames) if f["t"] == t][nth]
    return frames[idx + 1 :]


# ------------------------------------------------------------------ backoff


# (How delays grow and are jittered is WIRE.md R28: tests/protocol/test_ownership.py.)


def test_backoff_refuses_nonsense_limits():
    with pytest.raises(ValueError):
        Backoff(0.0, 1.0)
    with pytest.raises(ValueError):
        aio.Client("magnetar://h:1", initial_backoff_interval_ms=500, max_backoff_interval_ms=100)


# ------------------------------------------------------------------ creation retries


async def test_service_not_ready_on_create_is_retried_with_growing_backoff(fake_broker):
    fake_broker.fail("producer", "ServiceNotReady", times=4)
    async with aio.Client(fake_broker.url) as client:
        delays = record_sleeps(client)
        producer = await client.create_producer("rc")
        assert (await producer.send(b"x")).entry_id() == 0
    assert len(fake_broker.sent("producer")) == 5
    assert len(fake_broker.sent("lookup")) == 5  # looked up again before every attempt
    for delay, base in zip(delays, [0.1, 0.2, 0.4, 0.8], strict=True):
        assert 0.9 * base <= delay <= base


async def test_consumer_busy_on_first_subscribe_is_not_retried(fake_broker):
    fake_broker.fail("subscribe", "ConsumerBusy", times=1)
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        with pytest.raises(ConsumerBusy):
            await client.subscribe("rc", "s")
    assert len(fake_broker.sent("subscribe")) == 1


# ------------------------------------------------------------------ producer


async def test_producer_resends_unacknowledged_batches_in_order_after_a_drop(fake_broker):
    fake_broker.hold_receipts = True
    async with aio.Client(fake_broker.url) as client:
        delays = record_sleeps(client)
        producer = await client.create_producer("rc", batching_max_messages=2, batching_max_publish_delay_ms=60_000)
        name = producer.producer_name()
        completions: list[tuple[Result, MessageId | None]] = []
        receipts = [
            await producer.send_async(b"m%d" % i, callback=lambda r, m: completions.append((r, m))) for i in range(6)
        ]
        await fake_broker.wait_for(lambda: len(fake_broker.sent("send")) == 3)
        # The new owner is not ready at first; meanwhile the application keeps sending.
        fake_broker.fail("producer", "ServiceNotReady", times=2)
        fake_broker.drop_connections()
        await fake_broker.wait_for(lambda: fake_broker.connections_closed == 1)
        receipts += [await producer.send_async(b"m%d" % i) for i in range(6, 10)]
        fake_broker.hold_receipts = False
        ids = [await r for r in receipts]
        await producer.flush()

    resent = [f for f in _after(fake_broker.frames, "producer", 3) if f["t"] == "send"]
    assert [s["seq"] for s in resent] == [0, 2, 4, 6, 8]  # same seqs, same order, then the new ones
    seqs = [r[4] for s in resent for r in decode_batch(s["meta"], s["payload"])]
    assert seqs == list(range(10))
    registrations = fake_broker.sent("producer")
    assert len(registrations) == 4 and registrations[-1]["producer_name"] == name
    assert registrations[-1]["producer_id"] != registrations[0]["producer_id"]
    assert len(delays) == 2
    # Every message succeeded once, in seq order, on the resent copies (entries 3.. of the log).
    assert [i.entry_id() for i in ids] == [3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert [r for r, _ in completions] == [Result.Ok] * 6
    assert [m.entry_id() for _, m in completions] == [3, 3, 4, 4, 5, 5]


async def test_send_timeout_fails_messages_while_the_broker_is_down_and_they_are_not_resent(fake_broker):
    async with aio.Client(fake_broker.url, **FAST) as client:
        producer = await client.create_producer("rc", send_timeout_millis=150, batching_enabled=False)
        await fake_broker.stop()
        receipt = await producer.send_async(b"lost")
        with pytest.raises(Timeout, match=r"not acknowledged within 150 ms .*disconnected"):
            await receipt
        assert producer.partitions[0].pending == 0
        await fake_broker.restart()
        assert (await producer.send(b"after")).entry_id() == 0
    sent = [s for s in fake_broker.frames if s["t"] == "send"]
    assert [decode_batch(s["meta"], s["payload"])[0][0] for s in sent] == [b"after"]


async def test_a_message_timed_out_while_connected_is_not_resent_after_a_reconnect(fake_broker):
    fake_broker.hold_receipts = True
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        producer = await client.create_producer("rc", send_timeout_millis=50, batching_enabled=False)
        with pytest.raises(Timeout):
            await producer.send(b"slow")
        fake_broker.hold_receipts = False
        fake_broker.drop_connections()
        assert (await producer.send(b"next")).entry_id() == 1
    assert [s["seq"] for s in fake_broker.sent("send")] == [0, 1]


async def test_close_producer_push_moves_the_producer_to_the_new_owner(broker_factory):
    a, b = await broker_factory(), await broker_factory()
    async with aio.Client(a.url) as client:
        record_sleeps(client)
        producer = await client.create_producer("rc")
        name = producer.producer_name()
        await producer.send(b"on a")
        a.lookups[TOPIC] = (b.url, True)  # the topic moved: a only knows to ask b
        a.push_close_producer(a.sent("producer")[0]["producer_id"])
        await b.wait_for(lambda: b.sent("producer"))
        assert (await producer.send(b"on b")).entry_id() == 0
        assert producer.partitions[0].reconnects == 1
    assert len(a.sent("lookup")) == 2 and len(b.sent("lookup")) == 1
    assert b.sent("producer")[0]["producer_name"] == name
    assert len(a.sent("send")) == 1 and len(b.sent("send")) == 1


async def test_a_producer_closed_by_the_broker_right_after_its_answer_attaches_again(fake_broker):
    # The answer and the pushed close arrive in one read: the close is dispatched before the
    # attaching task resumes. The producer must not take itself for attached (its sends would go
    # to a registration the broker has dropped, and the refusals to no one).
    fake_broker.close_after_answer = 1
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        producer = await client.create_producer("rc", batching_enabled=False, send_timeout_millis=5000)
        msg_id = await producer.send(b"after the move")
    assert msg_id.entry_id() == 0
    _, second = fake_broker.sent("producer")  # exactly two registrations: the closed one, then this
    assert [s["producer_id"] for s in fake_broker.sent("send")] == [second["producer_id"]]


async def test_a_consumer_closed_by_the_broker_right_after_subscribing_subscribes_again(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        fake_broker.close_after_answer = 1
        consumer = await client.subscribe("rc", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, 1)
        assert (await consumer.receive(timeout_millis=5000)).data() == b"m0"
    _, second = fake_broker.sent("subscribe")
    assert {f["consumer_id"] for f in fake_broker.sent("flow")} == {second["consumer_id"]}


async def test_retryable_send_error_reattaches_and_resends_instead_of_failing(fake_broker):
    fake_broker.fail("send", "PersistenceError", times=1)
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        producer = await client.create_producer("rc", batching_enabled=False)
        msg_id = await producer.send(b"retry me")
    assert msg_id.entry_id() == 0
    first, second = fake_broker.sent("producer")
    assert [s["producer_id"] for s in fake_broker.sent("send")] == [first["producer_id"], second["producer_id"]]
    assert fake_broker.sent("close_producer")[0]["producer_id"] == first["producer_id"]


async def test_sends_while_disconnected_respect_max_pending(fake_broker):
    async with aio.Client(fake_broker.url, **FAST) as client:
        producer = await client.create_producer(
            "rc", max_pending_messages=2, block_if_queue_full=False, batching_enabled=False
        )
        await fake_broker.stop()
        receipts = [producer.send_nowait(b"q1"), producer.send_nowait(b"q2")]
        with pytest.raises(ProducerQueueIsFull):
            producer.send_nowait(b"q3")
        await fake_broker.restart()
        assert [(await r).entry_id() for r in receipts] == [0, 1]


async def test_producer_close_does_not_wait_for_a_broker_that_is_gone(fake_broker):
    async with aio.Client(fake_broker.url, **FAST) as client:
        producer = await client.create_producer("rc", send_timeout_millis=0, batching_enabled=False)
        await fake_broker.stop()
        await fake_broker.wait_for(lambda: fake_broker.connections_closed == 1)
        receipt = await producer.send_async(b"never")
        async with asyncio.timeout(1):  # no waiting for a reconnection that may never come
            await producer.close()
        with pytest.raises(AlreadyClosed, match="closed before the message was acknowledged"):
            await receipt


async def test_producer_close_waits_for_receipts_while_attached(fake_broker):
    fake_broker.hold_receipts = True
    async with aio.Client(fake_broker.url, operation_timeout_seconds=0.2) as client:
        producer = await client.create_producer("rc", send_timeout_millis=0, batching_enabled=False)
        receipt = await producer.send_async(b"slow")
        await fake_broker.wait_for(lambda: fake_broker.sent("send"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        await producer.close()
        assert loop.time() - started >= 0.15  # it waited (bounded) for the receipt
        with pytest.raises(AlreadyClosed):
            await receipt


# ------------------------------------------------------------------ consumer


async def _produce(client: aio.Client, n: int) -> None:
    producer = await client.create_producer("rc", batching_enabled=False)
    for i in range(n):
        await producer.send_async(b"m%d" % i)
    await producer.flush()


def _count_deliveries(consumer: Consumer, n: int) -> asyncio.Event:
    """An event set once ``n`` messages have reached the consumer's receive queue."""
    reached = asyncio.Event()
    part = consumer.partitions[0]
    deliver = part._deliver
    seen = 0

    def counting(messages: list[Message]) -> None:
        nonlocal seen
        deliver(messages)
        seen += len(messages)
        if seen >= n:
            reached.set()

    part._deliver = counting
    return reached


async def test_consumer_resubscribes_drops_its_queue_and_gets_unacknowledged_entries_again(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        consumer = await client.subscribe(
            "rc",
            "s",
            consumer_type=ConsumerType.Failover,
            consumer_name="me",
            receiver_queue_size=10,
            initial_position=InitialPosition.Earliest,
        )
        all_delivered = _count_deliveries(consumer, 5)
        await _produce(client, 5)
        first = await consumer.receive(timeout_millis=5000)
        await consumer.acknowledge(first)
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))
        second = await consumer.receive(timeout_millis=5000)  # handed out, not acknowledged
        await asyncio.wait_for(all_delivered.wait(), 5)
        assert len(consumer._queue) == 3  # arrived, not yet handed to the application
        fake_broker.drop_connections()
        await fake_broker.wait_for(lambda: len(fake_broker.sent("subscribe")) == 2)
        again = [await consumer.receive(timeout_millis=5000) for _ in range(4)]
        # Entries 1..4 come again once each: the three queued copies were dropped, not kept.
        assert [m.message_id().entry_id() for m in again] == [1, 2, 3, 4]
        assert again[0].data() == second.data()
        with pytest.raises(Timeout):
            await consumer.receive(timeout_millis=50)
    old, new = fake_broker.sent("subscribe")
    assert {k: new[k] for k in ("subscription", "sub_type", "consumer_name", "topic")} == {
        "subscription": "s",
        "sub_type": "Failover",
        "consumer_name": "me",
        "topic": TOPIC,
    }
    assert new["consumer_id"] != old["consumer_id"]
    flows = [f for f in fake_broker.sent("flow") if f["consumer_id"] == new["consumer_id"]]
    assert flows[0]["permits"] == 10  # the receiver queue is granted afresh


async def test_acks_made_while_disconnected_are_sent_after_the_reconnect(fake_broker):
    async with aio.Client(fake_broker.url, **FAST) as client:
        consumer = await client.subscribe("rc", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, 2)
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(2)]
        await fake_broker.stop()
        await fake_broker.wait_for(lambda: fake_broker.connections_closed == 1)
        for m in msgs:
            await consumer.acknowledge(m)
        await fake_broker.restart()
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))
        await consumer.close()
    new_id = fake_broker.sent("subscribe")[-1]["consumer_id"]
    ack = fake_broker.sent("ack")[0]
    assert (ack["consumer_id"], ack["positions"]) == (new_id, [[7, 0], [7, 1]])


async def test_acks_whose_answer_was_lost_are_sent_again(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        record_sleeps(client)
        consumer = await client.subscribe("rc", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, 1)
        await consumer.acknowledge(await consumer.receive(timeout_millis=5000))
        fake_broker.hold_acks = True
        await fake_broker.wait_for(lambda: fake_broker.held_acks)
        fake_broker.hold_acks = False
        fake_broker.held_acks.clear()
        fake_broker.drop_connections()
        async with asyncio.timeout(5):
            await consumer.close()  # returns once the resent ack was answered
    acks = fake_broker.sent("ack")
    assert len(acks) == 2 and acks[0]["positions"] == acks[1]["positions"] == [[7, 0]]
    assert acks[0]["consumer_id"] != acks[1]["consumer_id"]


async def test_close_consumer_push_resubscribes_after_consumer_busy(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        delays = record_sleeps(client)
        consumer = await client.subscribe("rc", "s", initial_position=InitialPosition.Earliest)
        # The broker has not yet let go of the old registration: busy twice, then fine.
        fake_broker.fail("subscribe", "ConsumerBusy", times=2)
        fake_broker.push_close_consumer(consumer.partitions[0].consumer_id)
        await fake_broker.wait_for(lambda: len(fake_broker.sent("subscribe")) == 4)
        await _produce(client, 1)
        assert (await consumer.receive(timeout_millis=5000)).data() == b"m0"
    assert len(delays) == 2


async def test_consumer_close_is_bounded_when_the_broker_is_gone(fake_broker):
    async with aio.Client(fake_broker.url, operation_timeout_seconds=0.2, **FAST) as client:
        consumer = await client.subscribe("rc", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, 1)
        msg = await consumer.receive(timeout_millis=5000)
        await fake_broker.stop()
        await consumer.acknowledge(msg)
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.timeout(3):
            await consumer.close()
        assert loop.time() - started < 1.0


def test_a_reconnecting_partition_drops_only_its_own_queued_messages():
    consumer = Consumer(TOPIC, ConsumerConfig("s", ConsumerType.Shared))
    mine, other = object(), object()

    def msg(owner: object, entry: int) -> Message:
        return Message([b"", {}, None, 0, entry], EntryInfo((7, entry), 1, 0, 0, owner, False), -1)  # type: ignore[arg-type]

    consumer._deliver([msg(mine, 0), msg(other, 1), msg(mine, 2), msg(other, 3)])
    consumer._discard_queued(mine)  # type: ignore[arg-type]
    assert [m.sequence_id() for m in consumer._queue] == [1, 3]
    consumer._discard_queued(other)  # type: ignore[arg-type]
    assert not consumer._queue


# ------------------------------------------------------------------ keep-alive


async def test_silent_broker_is_detected_by_keep_alive_and_the_producer_reconnects(fake_broker: FakeBroker):
    async with aio.Client(
        fake_broker.url, keep_alive_interval_seconds=0.05, connection_timeout_ms=100, **FAST
    ) as client:
        producer = await client.create_producer("rc", batching_enabled=False)
        fake_broker.silent = True
        await fake_broker.wait_for(lambda: fake_broker.sent("ping"))
        await fake_broker.wait_for(lambda: fake_broker.connections_closed >= 1)
        fake_broker.silent = False
        assert (await producer.send(b"back")).entry_id() == 0
        assert producer.partitions[0].reconnects == 1


# ------------------------------------------------------------------ blocking flavour


def test_blocking_producer_keeps_sending_across_a_dropped_connection(threaded_broker):
    broker = threaded_broker.broker
    client = magnetar.Client(broker.url, initial_backoff_interval_ms=5, max_backoff_interval_ms=20)
    try:
        producer = client.create_producer("rc", batching_enabled=False)
        assert producer.send(b"before").entry_id() == 0

        async def drop() -> None:
            broker.drop_connections()

        threaded_broker.call(drop())
        assert producer.send(b"after").entry_id() == 1
        assert len(broker.sent("producer")) == 2
    finally:
        client.close()
