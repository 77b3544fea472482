"""Dead letter and retry letter topics (``dead_letter.py``) with the asyncio client against a real standalone."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest
from tests.support.standalone import StandaloneProcess

from magnetar.client import aio
from magnetar.client.consumer.dead_letter import DELAY_TIME, ORIGIN_MESSAGE_ID, REAL_TOPIC, RECONSUMETIMES
from magnetar.client.message import Message
from magnetar.client.options import ConsumerDeadLetterPolicy, ConsumerType, InitialPosition
from magnetar.protocol.errors import Timeout, Unsupported

pytestmark = pytest.mark.timeout(90)

EARLIEST = InitialPosition.Earliest
SHARED = ConsumerType.Shared


async def _drain(consumer: aio.Consumer, quiet_ms: int = 700) -> list[Message]:
    """Receive and acknowledge until nothing more comes for ``quiet_ms``."""
    out = []
    while True:
        try:
            msg = await consumer.receive(timeout_millis=quiet_ms)
        except Timeout:
            return out
        out.append(msg)
        await consumer.acknowledge(msg)


async def test_a_message_past_max_redeliver_count_goes_to_the_dlq_once(
    standalone: StandaloneProcess, topic: str
) -> None:
    dlq = f"{topic}-s-DLQ"
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=2, initial_subscription_name="audit")
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=SHARED,
            initial_position=EARLIEST,
            negative_ack_redelivery_delay_ms=0,
            dead_letter_policy=policy,
        )
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = {}
        for i in range(3):
            body = b"m%d" % i
            ids[body] = await producer.send(body, {"k": str(i)}, partition_key=f"key{i}", event_timestamp=1000 + i)
        seen: Counter[bytes] = Counter()
        counts: dict[bytes, list[int]] = {}
        # Every delivery fails: counts 0, 1 and 2 reach the application, then the DLQ takes over.
        while True:
            try:
                msg = await consumer.receive(timeout_millis=1500)
            except Timeout:
                break
            seen[msg.data()] += 1
            counts.setdefault(msg.data(), []).append(msg.redelivery_count())
            await consumer.negative_acknowledge(msg)
        assert seen == {b"m0": 3, b"m1": 3, b"m2": 3}
        assert all(c == [0, 1, 2] for c in counts.values()), counts
        # The initial subscription was created before the first letter: it has all of them.
        audit = await client.subscribe(dlq, "audit", consumer_type=SHARED)
        letters = await _drain(audit)
        assert sorted(m.data() for m in letters) == [b"m0", b"m1", b"m2"]
        for letter in letters:
            i = int(letter.data()[1:])
            props = letter.properties()
            assert props["k"] == str(i)
            assert props[REAL_TOPIC] == topic
            assert props[ORIGIN_MESSAGE_ID] == str(ids[letter.data()])
            assert letter.partition_key() == f"key{i}"
            assert letter.event_timestamp() == 1000 + i
        await consumer.close()
        # The originals were acknowledged once their letters were durable: nothing comes back.
        again = await client.subscribe(topic, "s", consumer_type=SHARED)
        with pytest.raises(Timeout):
            await again.receive(timeout_millis=700)


async def test_a_letter_already_in_the_dlq_is_not_published_twice(standalone: StandaloneProcess, topic: str) -> None:
    """A consumer that crashed between publishing a dead letter and acknowledging the original left
    the letter behind; the next consumer finds it in the dead letter topic and only acknowledges."""
    dlq = f"{topic}-s-DLQ"
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        crashed_id = await producer.send(b"crashed")
        fresh_id = await producer.send(b"fresh")
        # What the crashed consumer's life left: the letter of the first message only.
        dlq_producer = await client.create_producer(dlq, batching_enabled=False)
        await dlq_producer.send(b"crashed", {REAL_TOPIC: topic, ORIGIN_MESSAGE_ID: str(crashed_id)})
        audit = await client.subscribe(dlq, "audit", consumer_type=SHARED, initial_position=EARLIEST)
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=SHARED,
            initial_position=EARLIEST,
            negative_ack_redelivery_delay_ms=0,
            dead_letter_policy=ConsumerDeadLetterPolicy(1),
        )
        while True:
            try:
                msg = await consumer.receive(timeout_millis=1500)
            except Timeout:
                break
            await consumer.negative_acknowledge(msg)
        letters = await _drain(audit)
        assert Counter(m.data() for m in letters) == {b"crashed": 1, b"fresh": 1}
        origins = {m.properties()[ORIGIN_MESSAGE_ID] for m in letters}
        assert origins == {str(crashed_id), str(fresh_id)}


async def test_retry_chain_ends_in_the_dlq(standalone: StandaloneProcess, topic: str) -> None:
    retry = f"{topic}-s-RETRY"
    dlq = f"{topic}-s-DLQ"
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=2, initial_subscription_name="audit")
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic, "s", consumer_type=SHARED, initial_position=EARLIEST, retry_enable=True, dead_letter_policy=policy
        )
        producer = await client.create_producer(topic, batching_enabled=False)
        origin = await producer.send(b"job", {"user": "u1"})
        attempts: list[Message] = []
        reconsumed_at = 0.0
        while True:
            try:
                msg = await consumer.receive(timeout_millis=2000)
            except Timeout:
                break
            if attempts:  # a retry: never before its delay (a deliver-at time is whole milliseconds, as
                # in Pulsar, truncated from the wall clock: it may fall up to 1 ms before a float 200 ms)
                assert time.monotonic() - reconsumed_at >= 0.199
            attempts.append(msg)
            reconsumed_at = time.monotonic()
            await consumer.reconsume_later(msg, timedelta(milliseconds=200), {"attempt": str(len(attempts))})
        # The first delivery and two retries, then RECONSUMETIMES would be 3 > 2: the DLQ.
        assert [m.data() for m in attempts] == [b"job"] * 3
        assert [m.topic_name() for m in attempts] == [topic, retry, retry]
        assert [m.properties().get(RECONSUMETIMES) for m in attempts] == [None, "1", "2"]
        for m in attempts[1:]:
            props = m.properties()
            assert (props[REAL_TOPIC], props[ORIGIN_MESSAGE_ID], props["user"]) == (topic, str(origin), "u1")
            assert props[DELAY_TIME] == "200"
        audit = await client.subscribe(dlq, "audit", consumer_type=SHARED)
        letters = await _drain(audit)
        assert [m.data() for m in letters] == [b"job"]
        props = letters[0].properties()
        assert (props[RECONSUMETIMES], props[REAL_TOPIC], props[ORIGIN_MESSAGE_ID]) == ("3", topic, str(origin))
        assert props["attempt"] == "3"


async def test_reconsume_later_needs_retry_enable(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", consumer_type=SHARED, initial_position=EARLIEST)
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        msg = await consumer.receive(timeout_millis=5000)
        with pytest.raises(Unsupported, match="retry_enable"):
            await consumer.reconsume_later(msg, 100)
