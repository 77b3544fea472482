"""Negative-ack delay and back-off, ack timeout, redelivery counts: the asyncio client against a real standalone.

Timing is only ever asserted as "not before" (a redelivery must never come early); how late it
comes is left to the machine.
"""

from __future__ import annotations

import time

import pytest
from tests.support.standalone import StandaloneProcess

from magnetar.client import aio
from magnetar.client.consumer.redelivery import AckTimeoutTracker
from magnetar.client.options import ConsumerType, InitialPosition, MultiplierRedeliveryBackoff
from magnetar.protocol.errors import Timeout

pytestmark = pytest.mark.timeout(60)

EARLIEST = InitialPosition.Earliest


async def _produce(client: aio.Client, topic: str, bodies: list[bytes]) -> None:
    producer = await client.create_producer(topic, batching_enabled=False)
    for body in bodies:
        await producer.send(body)
    await producer.close()


async def test_negative_ack_redelivers_after_the_delay_not_before(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            negative_ack_redelivery_delay_ms=800,
        )
        await _produce(client, topic, [b"a", b"b"])
        first = await consumer.receive(timeout_millis=5000)
        second = await consumer.receive(timeout_millis=5000)
        assert (first.redelivery_count(), second.redelivery_count()) == (0, 0)
        nacked_at = time.monotonic()
        await consumer.negative_acknowledge(first)
        await consumer.acknowledge(second)
        again = await consumer.receive(timeout_millis=5000)
        assert time.monotonic() - nacked_at >= 0.8
        assert again.data() == first.data() and again.message_id() == first.message_id()
        assert again.redelivery_count() == 1
        await consumer.acknowledge(again)
        with pytest.raises(Timeout):  # nothing else comes back: both are acknowledged
            await consumer.receive(timeout_millis=300)


async def test_negative_ack_backoff_grows_with_each_redelivery(standalone: StandaloneProcess, topic: str) -> None:
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=150, max_delay_ms=1000, multiplier=2)
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            negative_ack_redelivery_backoff=backoff,
        )
        await _produce(client, topic, [b"x"])
        msg = await consumer.receive(timeout_millis=5000)
        for attempt in range(3):
            assert msg.redelivery_count() == attempt
            nacked_at = time.monotonic()
            await consumer.negative_acknowledge(msg)
            msg = await consumer.receive(timeout_millis=5000)
            # 150 ms, then 300, then 600: the delay for the count the message had when nacked.
            assert time.monotonic() - nacked_at >= backoff.next(attempt) / 1000
        assert msg.redelivery_count() == 3
        await consumer.acknowledge(msg)


async def test_negative_acks_of_one_moment_leave_in_one_redeliver(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            negative_ack_redelivery_delay_ms=300,
        )
        await _produce(client, topic, [b"%d" % i for i in range(5)])
        msgs = [await consumer.receive(timeout_millis=5000) for _ in range(5)]
        for m in msgs:
            await consumer.negative_acknowledge(m)
        part = consumer.partitions[0]
        assert len(part.nacks) == 5  # held back, none redelivered yet
        again = sorted([(await consumer.receive(timeout_millis=5000)).data() for _ in range(5)])
        assert again == sorted(m.data() for m in msgs)
        assert len(part.nacks) == 0


async def test_unacknowledged_messages_are_redelivered_after_the_ack_timeout(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            unacked_messages_timeout_ms=10_000,
            ack_timeout_tick_time_ms=100,
        )
        # pulsar-client refuses timeouts under 10 s; the mechanism is the same at 0.7 s, which
        # keeps this test short: swap the partition's tracker for a shorter one.
        part = consumer.partitions[0]
        part.ack_timeouts = AckTimeoutTracker(700)
        await _produce(client, topic, [b"kept", b"acked"])
        kept = await consumer.receive(timeout_millis=5000)
        handed_out_at = time.monotonic()
        acked = await consumer.receive(timeout_millis=5000)
        await consumer.acknowledge(acked)
        again = await consumer.receive(timeout_millis=5000)
        assert time.monotonic() - handed_out_at >= 0.7
        assert (again.data(), again.redelivery_count()) == (kept.data(), 1)
        await consumer.acknowledge(again)
        with pytest.raises(Timeout):  # acknowledged in time now: not redelivered again
            await consumer.receive(timeout_millis=1200)


async def test_redelivery_count_counts_every_redelivery(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic, "s", consumer_type=ConsumerType.Shared, initial_position=EARLIEST, negative_ack_redelivery_delay_ms=0
        )
        await _produce(client, topic, [b"m"])
        counts = []
        for _ in range(4):
            msg = await consumer.receive(timeout_millis=5000)
            counts.append(msg.redelivery_count())
            await consumer.negative_acknowledge(msg)
        consumer.redeliver_unacknowledged_messages()
        last = await consumer.receive(timeout_millis=5000)
        assert counts == [0, 1, 2, 3]
        assert last.redelivery_count() == 4
