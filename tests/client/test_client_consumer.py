"""Consumer behaviour on the wire, against the client-unit-test fake broker (see conftest)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import aio
from magnetar.client.consumer import ack_sender as consumer_module
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError
from magnetar.client.options import ConsumerType, InitialPosition
from magnetar.protocol.errors import Timeout, Unsupported
from magnetar.protocol.message_id import MessageId


async def _produce(client, topic, n, **kwargs):
    producer = await client.create_producer(topic, **kwargs)
    for i in range(n):
        await producer.send_async(b"m%d" % i)
    await producer.flush()
    return producer


async def _turn():
    """Let call_soon callbacks (ack flushes) run and their frames reach the fake."""
    await asyncio.sleep(0)


async def test_subscribe_grants_receiver_queue_size_then_refills_at_half(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest, receiver_queue_size=10)
        await fake_broker.wait_for(lambda: fake_broker.sent("flow"))
        assert [f["permits"] for f in fake_broker.sent("flow")] == [10]
        await _produce(client, "c", 30, batching_enabled=False)
        for _ in range(4):
            await consumer.receive(timeout_millis=5000)
        await _turn()
        assert len(fake_broker.sent("flow")) == 1  # 4 < 10 / 2: no refill yet
        await consumer.receive(timeout_millis=5000)
        await fake_broker.wait_for(lambda: len(fake_broker.sent("flow")) == 2)
        assert fake_broker.sent("flow")[1]["permits"] == 5


async def test_entry_with_bad_crc_is_dropped_and_negatively_acked(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", receiver_queue_size=0)  # one permit at a time
        await fake_broker.wait_for(lambda: fake_broker.sent("flow"))
        sub = fake_broker.subs[consumer.partitions[0].consumer_id]
        sub.permits = 0  # keep the fake from dispatching on its own
        await _produce(client, "c", 1)
        _meta, payload = fake_broker.logs["persistent://public/default/c"][0]
        sub.cursor = 1  # this push *is* the dispatch of entry 0, with one bit flipped in transit
        fake_broker.push(sub.consumer_id, 0, payload=payload[:-1] + bytes([payload[-1] ^ 1]))
        # The client refuses it, asks for redelivery; the fake redelivers the intact entry.
        msg = await consumer.receive(timeout_millis=5000)
        assert msg.data() == b"m0"
        assert msg.redelivery_count() == 1
        assert fake_broker.sent("redeliver")[0]["positions"] == [[7, 0]]
        # The permit the dropped entry used was given back (the app never consumed it).
        assert [f["permits"] for f in fake_broker.sent("flow")] == [1, 1]


async def test_acks_in_one_loop_iteration_share_one_frame(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 5, batching_enabled=False)
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(5)]
        for m in msgs:
            await consumer.acknowledge(m)
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))
        acks = fake_broker.sent("ack")
        assert len(acks) == 1
        assert acks[0]["kind"] == "individual"
        assert acks[0]["positions"] == [[7, e] for e in range(5)]
        assert acks[0]["rid"] is not None


async def test_acks_are_grouped_until_the_window_ends_or_the_group_is_full(fake_broker, monkeypatch):
    """Pulsar's client groups acks (ackGroupingTimeMs 100, ackGroupingMaxSize 1,000): a window
    no test outlasts shows that nothing else sends them, a full group goes at once, and the
    window's own timer sends a partial group."""
    monkeypatch.setattr(consumer_module, "ACK_GROUPING_SECONDS", 3600.0)
    monkeypatch.setattr(consumer_module, "ACK_GROUPING_MAX", 3)
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 5, batching_enabled=False)
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(5)]
        for m in msgs[:2]:
            await consumer.acknowledge(m)
            for _ in range(5):
                await _turn()  # many loop iterations: no frame per iteration any more
        assert fake_broker.sent("ack") == []
        await consumer.acknowledge(msgs[2])  # the third: the group is full
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))
        assert [a["positions"] for a in fake_broker.sent("ack")] == [[[7, 0], [7, 1], [7, 2]]]
        monkeypatch.setattr(consumer_module, "ACK_GROUPING_SECONDS", 0.05)
        await consumer.acknowledge(msgs[3])
        await fake_broker.wait_for(lambda: len(fake_broker.sent("ack")) == 2)
        assert fake_broker.sent("ack")[1]["positions"] == [[7, 3]]


async def test_a_group_is_full_after_that_many_messages_not_entries(fake_broker, monkeypatch):
    """Each message of a batch counts towards the group, as in Pulsar's grouping tracker: the broker
    counts unacked messages against max_unacked_messages_per_consumer, and a group held open for
    the window while a fast consumer acks whole batches stopped its dispatch (W1's consume rate
    fell by a fifth)."""
    monkeypatch.setattr(consumer_module, "ACK_GROUPING_SECONDS", 3600.0)
    monkeypatch.setattr(consumer_module, "ACK_GROUPING_MAX", 3)
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 4)  # one batch: one entry of 4 messages
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(4)]
        assert {m.message_id().entry_id() for m in msgs} == {0}
        for m in msgs:
            await consumer.acknowledge(m)
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))  # one entry, four messages: full
        assert [a["positions"] for a in fake_broker.sent("ack")] == [[[7, 0]]]


async def test_grouped_acks_go_out_before_a_redelivery_and_a_close(fake_broker, monkeypatch):
    """An ack waiting in its group is sent before ``redeliver_unacknowledged_messages`` (or that
    message would come back) and before the close, which does not wait for the window."""
    monkeypatch.setattr(consumer_module, "ACK_GROUPING_SECONDS", 3600.0)
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 2, batching_enabled=False)
        first, second = [await consumer.receive(timeout_millis=5000) for _ in range(2)]
        await consumer.acknowledge(first)
        consumer.redeliver_unacknowledged_messages()
        await fake_broker.wait_for(lambda: fake_broker.sent("redeliver"))
        frames = [f["t"] for f in fake_broker.frames]
        assert frames.index("ack") < frames.index("redeliver")
        assert fake_broker.sent("ack")[0]["positions"] == [[7, 0]]
        await consumer.acknowledge(second)  # (this fake redelivers only named positions)
        await asyncio.wait_for(consumer.close(), 5)  # not the hour-long window
        frames = [f["t"] for f in fake_broker.frames]
        assert fake_broker.sent("ack")[1]["positions"] == [[7, 1]]
        assert frames.index("ack", frames.index("redeliver")) < frames.index("close_consumer")


async def test_batched_entry_is_acked_only_after_all_its_messages(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 3)
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(3)]
        assert [m.message_id() for m in msgs] == [MessageId(-1, 7, 0, i) for i in range(3)]
        await consumer.acknowledge(msgs[0])
        await consumer.acknowledge(msgs[2].message_id())  # by id works too
        await _turn()
        await _turn()
        assert fake_broker.sent("ack") == []
        await consumer.acknowledge(msgs[1])
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))
        assert fake_broker.sent("ack")[0]["positions"] == [[7, 0]]


async def test_close_waits_until_acks_are_durable(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 1)
        await consumer.acknowledge(await consumer.receive(timeout_millis=5000))
        fake_broker.hold_acks = True
        closing = asyncio.ensure_future(consumer.close())
        await fake_broker.wait_for(lambda: fake_broker.held_acks)
        await _turn()
        assert not closing.done()
        assert fake_broker.sent("close_consumer") == []
        fake_broker.release_acks()
        await closing
        frames = [f["t"] for f in fake_broker.frames]
        assert frames.index("ack") < frames.index("close_consumer")


async def test_cumulative_ack_sends_the_position(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s", initial_position=InitialPosition.Earliest)
        await _produce(client, "c", 3, batching_enabled=False)
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(3)]
        await consumer.acknowledge_cumulative(msgs[1])
        await fake_broker.wait_for(lambda: fake_broker.sent("ack"))
        ack = fake_broker.sent("ack")[0]
        assert (ack["kind"], ack["positions"]) == ("cumulative", [[7, 1]])


async def test_cumulative_ack_is_refused_on_shared_subscriptions(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe(
            "c", "s", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
        )
        assert fake_broker.sent("subscribe")[0]["sub_type"] == "Shared"
        await _produce(client, "c", 1)
        msg = await consumer.receive(timeout_millis=5000)
        with pytest.raises(CumulativeAcknowledgementNotAllowedError):
            await consumer.acknowledge_cumulative(msg)


async def test_negative_ack_asks_for_redelivery_of_the_entry(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe(
            "c", "s", initial_position=InitialPosition.Earliest, negative_ack_redelivery_delay_ms=0
        )
        await _produce(client, "c", 2)
        first = await consumer.receive(timeout_millis=5000)
        await consumer.receive(timeout_millis=5000)
        await consumer.negative_acknowledge(first)
        again = await consumer.receive(timeout_millis=5000)
        assert fake_broker.sent("redeliver")[0]["positions"] == [[7, 0]]
        assert again.message_id() == first.message_id()
        assert again.redelivery_count() == 1


async def test_receive_times_out(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s")
        with pytest.raises(Timeout):
            await consumer.receive(timeout_millis=50)


async def test_subscription_type_the_broker_refuses_surfaces_its_error(fake_broker):
    fake_broker.errors["subscribe"] = ("Unsupported", "Failover subscriptions are not supported yet")
    async with aio.Client(fake_broker.url) as client:
        with pytest.raises(Unsupported, match="Failover"):
            await client.subscribe("c", "s", consumer_type=ConsumerType.Failover)
        assert fake_broker.sent("subscribe")[0]["sub_type"] == "Failover"


async def test_unsubscribe_sends_unsubscribe(fake_broker):
    async with aio.Client(fake_broker.url) as client:
        consumer = await client.subscribe("c", "s")
        await consumer.unsubscribe()
        assert len(fake_broker.sent("unsubscribe")) == 1
