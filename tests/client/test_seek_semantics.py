"""Seek as pulsar-client 3.x and the Pulsar broker do it, against a real standalone.

``seek(message_id)`` resumes *after* that message unless the consumer or reader was created with
``start_message_id_inclusive=True`` (blocking and asyncio; within a batch, by batch index), and
``seek(MessageId.latest)`` is resolved by the broker when it seeks: what is published afterwards is
read, and a reader's ``has_message_available()`` says so. ``seek(timestamp)`` still starts at the
first message published at or after it.
"""

from __future__ import annotations

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar import InitialPosition, MessageId
from magnetar.client import aio

pytestmark = pytest.mark.timeout(120)

EARLIEST = InitialPosition.Earliest


def test_blocking_consumer_seek_resumes_after_the_id_unless_inclusive(
    standalone: StandaloneProcess, topic: str
) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"m%d" % i) for i in range(5)]
        after = client.subscribe(topic, "after", initial_position=EARLIEST)
        after.seek(ids[2])
        assert [after.receive(10_000).data() for _ in range(2)] == [b"m3", b"m4"]
        at = client.subscribe(topic, "at", initial_position=EARLIEST, start_message_id_inclusive=True)
        at.seek(ids[2])
        assert [at.receive(10_000).data() for _ in range(3)] == [b"m2", b"m3", b"m4"]
        # By publish time: from the first message published at or after it, inclusive or not.
        after.seek(0)
        assert after.receive(10_000).data() == b"m0"


def test_seek_within_a_batch_goes_by_batch_index(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        ids: list[MessageId] = []
        for i in range(4):
            producer.send_async(b"b%d" % i, lambda res, mid: ids.append(mid))
        producer.flush()
        ids.sort()
        assert len({mid.position for mid in ids}) == 1  # one entry
        after = client.subscribe(topic, "after", initial_position=EARLIEST)
        after.seek(ids[1])
        assert [after.receive(10_000).data() for _ in range(2)] == [b"b2", b"b3"]
        at = client.subscribe(topic, "at", initial_position=EARLIEST, start_message_id_inclusive=True)
        at.seek(ids[1])
        assert [at.receive(10_000).data() for _ in range(3)] == [b"b1", b"b2", b"b3"]


async def test_asyncio_consumer_and_reader_seek_after_the_id_unless_inclusive(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        ids = [await producer.send(b"m%d" % i) for i in range(5)]
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        await consumer.seek(ids[2])
        assert (await consumer.receive(10_000)).data() == b"m3"
        await consumer.close()
        inclusive = await client.subscribe(topic, "s", initial_position=EARLIEST, start_message_id_inclusive=True)
        await inclusive.seek(ids[2])
        assert (await inclusive.receive(10_000)).data() == b"m2"
        reader = await client.create_reader(topic, MessageId.latest)
        await reader.seek(ids[2])
        assert (await reader.read_next(10_000)).data() == b"m3"
        reader_at = await client.create_reader(topic, MessageId.latest, start_message_id_inclusive=True)
        await reader_at.seek(ids[2])
        assert (await reader_at.read_next(10_000)).data() == b"m2"


def test_reader_seek_to_latest_reads_what_comes_next(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(b"old%d" % i)
        reader = client.create_reader(topic, MessageId.earliest)
        assert reader.read_next(10_000).data() == b"old0"
        reader.seek(MessageId.latest)
        assert not reader.has_message_available()
        producer.send(b"new")
        assert reader.has_message_available()
        assert reader.read_next(10_000).data() == b"new"
        assert not reader.has_message_available()


async def test_asyncio_reader_and_consumer_seek_to_latest(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        await producer.send(b"old")
        reader = await client.create_reader(topic, MessageId.earliest)
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        assert (await reader.read_next(10_000)).data() == b"old"
        assert (await consumer.receive(10_000)).data() == b"old"
        await reader.seek(MessageId.latest)
        await consumer.seek(MessageId.latest)
        await producer.send(b"new")
        assert await reader.has_message_available()
        assert (await reader.read_next(10_000)).data() == b"new"
        assert (await consumer.receive(10_000)).data() == b"new"


def test_seek_by_publish_time_still_starts_at_that_time(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(b"m%d" % i)
        reader = client.create_reader(topic, MessageId.earliest)
        got = [reader.read_next(10_000) for _ in range(3)]
        when = got[1].publish_timestamp()
        reader.seek(when)
        first = next(m for m in got if m.publish_timestamp() >= when)  # m0 too, if it shares the millisecond
        assert reader.read_next(10_000).data() == first.data()
        assert reader.has_message_available()
