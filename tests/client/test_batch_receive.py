"""``Consumer.batch_receive`` and ``ConsumerBatchReceivePolicy``, against a real standalone."""

from __future__ import annotations

import asyncio

import pytest

import magnetar
from magnetar import ConsumerBatchReceivePolicy, InitialPosition
from magnetar.client import aio


def test_the_policy_checks_its_arguments_as_pulsar_client():
    with pytest.raises(ValueError, match="At least one"):
        ConsumerBatchReceivePolicy(0, -1, 0)
    with pytest.raises(TypeError):
        ConsumerBatchReceivePolicy("10", 100, 100)  # type: ignore[arg-type]
    # Neither a count nor a size: both reset to the C++ client's defaults, the timeout is kept.
    reset = ConsumerBatchReceivePolicy(-1, 0, 50)
    assert (reset.max_num_message, reset.max_num_bytes, reset.timeout_ms) == (-1, 10 * 1024 * 1024, 50)
    assert reset.policy() is reset


def test_subscribe_refuses_a_batch_receive_policy_of_another_type(standalone, topic):
    with magnetar.Client(standalone.service_url) as client, pytest.raises(ValueError, match="batch_receive_policy"):
        client.subscribe(topic, "s", batch_receive_policy=(10, 100, 100))


def test_a_count_limit_cuts_batches_and_the_timeout_returns_the_rest(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic,
            "count",
            initial_position=InitialPosition.Earliest,
            batch_receive_policy=ConsumerBatchReceivePolicy(4, -1, 300),
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(b"%d" % i)
        got: list[list[bytes]] = []
        while sum(len(b) for b in got) < 10:
            batch = consumer.batch_receive()
            assert len(batch) <= 4
            got.append([m.data() for m in batch])
        assert [m for b in got for m in b] == [b"%d" % i for i in range(10)]
        assert [len(b) for b in got if b][:2] == [4, 4]
        for b in consumer.batch_receive(), consumer.batch_receive():
            assert b == []  # nothing more: the timeout returns an empty batch


def test_a_byte_limit_leaves_the_message_that_does_not_fit_for_the_next_batch(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic,
            "bytes",
            initial_position=InitialPosition.Earliest,
            batch_receive_policy=ConsumerBatchReceivePolicy(-1, 250, 5000),
        )
        producer = client.create_producer(topic, batching_enabled=False)
        payloads = [bytes([65 + i]) * 100 for i in range(5)]
        for p in payloads:
            producer.send(p)
        first = consumer.batch_receive()
        assert [m.data() for m in first] == payloads[:2]  # a third would make 300 bytes
        second = consumer.batch_receive()
        assert [m.data() for m in second] == payloads[2:4]
        # One message bigger than the limit still makes a batch of its own.
        producer.send(b"z" * 400)
        third = consumer.batch_receive()
        assert [m.data() for m in third] == [payloads[4]]
        assert [m.data() for m in consumer.batch_receive()] == [b"z" * 400]


def test_batch_received_messages_are_acknowledged_as_any_other(standalone, topic):
    policy = ConsumerBatchReceivePolicy(3, -1, 5000)
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic, "acks", initial_position=InitialPosition.Earliest, batch_receive_policy=policy
        )
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(b"%d" % i)
        batch = consumer.batch_receive()
        assert [m.data() for m in batch] == [b"0", b"1", b"2"]
        for m in batch:
            consumer.acknowledge(m)
        consumer.close()
        again = client.subscribe(topic, "acks", batch_receive_policy=ConsumerBatchReceivePolicy(5, -1, 1000))
        assert [m.data() for m in again.batch_receive()] == [b"3", b"4"]


def test_the_default_policy_returns_what_is_queued_after_at_most_its_timeout(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "default", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(b"%d" % i)
        got: list[bytes] = []
        while len(got) < 3:
            got.extend(m.data() for m in consumer.batch_receive())
        assert got == [b"0", b"1", b"2"]


def test_a_policy_without_timeout_waits_until_the_batch_is_full(standalone, topic):
    async def main() -> None:
        async with aio.Client(standalone.service_url) as client:
            consumer = await client.subscribe(
                topic,
                "full",
                initial_position=InitialPosition.Earliest,
                batch_receive_policy=ConsumerBatchReceivePolicy(3, -1, 0),
            )
            producer = await client.create_producer(topic, batching_enabled=False)
            pending = asyncio.ensure_future(consumer.batch_receive())
            await producer.send(b"a")
            await producer.send(b"b")
            # Two of three: still waiting (the third send's receipt comes after both were dispatched).
            assert not pending.done()
            await producer.send(b"c")
            batch = await asyncio.wait_for(pending, 10)
            assert [m.data() for m in batch] == [b"a", b"b", b"c"]

    asyncio.run(main())
