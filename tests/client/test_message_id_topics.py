"""A received message's id carries its topic, as pulsar-client's does, against a real standalone.

On a consumer of several topics (a list, a pattern) and of a partitioned topic,
``acknowledge(msg.message_id())``, ``acknowledge_cumulative`` and ``seek`` find the partition the id
came from; an id without a topic there raises ``OperationNotSupported`` (pulsar-client's
multi-topic consumer), and a negative acknowledgement of one is ignored, as pulsar-client ignores it.
"""

from __future__ import annotations

import re
import uuid

import pytest
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar import InitialPosition, MessageId, OperationNotSupported
from magnetar.client import aio

pytestmark = pytest.mark.timeout(120)

EARLIEST = InitialPosition.Earliest


def _names(prefix: str, *suffixes: str) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"persistent://public/default/{prefix}-{tag}-{s}" for s in suffixes]


def test_received_ids_name_their_topic_and_acknowledge_on_a_list_consumer(standalone: StandaloneProcess) -> None:
    a, b = _names("idt", "a", "b")
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe([a, b], "s", initial_position=EARLIEST)
        for t in (a, b):
            client.create_producer(t, batching_enabled=False).send(t.encode())
        got = [consumer.receive(10_000) for _ in range(2)]
        assert {m.message_id().topic for m in got} == {a, b}
        assert all(m.message_id().topic == m.topic_name() for m in got)
        for m in got:
            consumer.acknowledge(m.message_id())
        consumer.close()
        again = client.subscribe([a, b], "s")
        client.create_producer(a, batching_enabled=False).send(b"after")
        assert again.receive(10_000).data() == b"after"  # both acknowledged by id: nothing comes back


def test_an_id_without_a_topic_is_operation_not_supported_on_several_topics(standalone: StandaloneProcess) -> None:
    a, b, other = _names("idt", "a", "b", "other")
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe([a, b], "s", initial_position=EARLIEST)
        client.create_producer(a, batching_enabled=False).send(b"x")
        msg = consumer.receive(10_000)
        bare = MessageId.deserialize(msg.message_id().serialize())
        for call in (consumer.acknowledge, consumer.acknowledge_cumulative):
            with pytest.raises(OperationNotSupported):
                call(bare)
            with pytest.raises(OperationNotSupported):
                call(MessageId.earliest)
        with pytest.raises(OperationNotSupported):
            consumer.acknowledge(MessageId.deserialize(msg.message_id().serialize(), topic=other))
        consumer.negative_acknowledge(bare)  # pulsar-client ignores it
        consumer.acknowledge(MessageId.deserialize(msg.message_id().serialize(), topic=a))


def test_pattern_consumer_acknowledges_by_id(standalone: StandaloneProcess) -> None:
    prefix = f"idp-{uuid.uuid4().hex[:8]}"
    with magnetar.Client(standalone.service_url) as client:
        for name in ("x", "y"):
            client.create_producer(f"{prefix}-{name}", batching_enabled=False).send(name.encode())
        pattern = re.compile(f"persistent://public/default/{prefix}-.*")
        consumer = client.subscribe(pattern, "s", initial_position=EARLIEST)
        for _ in range(2):
            msg = consumer.receive(10_000)
            consumer.acknowledge_cumulative(msg.message_id())
        consumer.close()
        again = client.subscribe(pattern, "s")
        client.create_producer(f"{prefix}-y", batching_enabled=False).send(b"after")
        assert again.receive(10_000).data() == b"after"


async def test_asyncio_partitioned_consumer_acknowledges_and_seeks_by_id(
    standalone: StandaloneProcess, topic: str
) -> None:
    path = topic.removeprefix("persistent://")
    assert admin_call(standalone, "PUT", f"/admin/v2/persistent/{path}/partitions", 2)[0] == 204
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=EARLIEST)
        producer = await client.create_producer(topic, batching_enabled=False)
        for i in range(6):
            await producer.send(b"m%d" % i, partition_key=f"k{i}")
        got = [await consumer.receive(10_000) for _ in range(6)]
        assert {m.message_id().topic for m in got} == {f"{topic}-partition-0", f"{topic}-partition-1"}
        for m in got:
            await consumer.acknowledge(m.message_id())
        # Seek by a received id moves that message's partition only, to after the message.
        first = got[0]
        partition = first.topic_name()
        later = [m.data() for m in got if m.topic_name() == partition][1:]
        await consumer.seek(first.message_id())
        again = [await consumer.receive(10_000) for _ in range(len(later))]
        assert [m.data() for m in again] == later
        with pytest.raises(OperationNotSupported):
            await consumer.seek(MessageId.deserialize(first.message_id().serialize()))
