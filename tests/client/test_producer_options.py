"""``create_producer`` options that reach the broker (R104) or shape how partition producers start.

Against a real standalone: ``properties`` in the topic's publisher stats, ``is_connected``,
``initial_sequence_id``, ``last_sequence_id`` continuing where a producer of the same name left off
(deduplication stores it), ``ordering_key`` reaching the consumer, lazily started partition
producers, and ``max_pending_messages_across_partitions`` capping each partition's queue.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar as pulsar
from magnetar.client import aio

pytestmark = pytest.mark.timeout(120)


def _path(topic: str) -> str:
    return topic.split("://", 1)[1]


def _stats(sa: StandaloneProcess, topic: str) -> dict[str, Any]:
    status, stats = admin_call(sa, "GET", f"/admin/v2/persistent/{_path(topic)}/stats")
    assert status == 200, stats
    return dict(stats)


def _partitioned(sa: StandaloneProcess, n: int) -> str:
    topic = f"persistent://public/default/parts-{uuid.uuid4().hex[:10]}"
    status, body = admin_call(sa, "PUT", f"/admin/v2/persistent/{_path(topic)}/partitions", n)
    assert status == 204, body
    return topic


def test_properties_reach_the_broker_and_show_in_publisher_stats(standalone: StandaloneProcess, topic: str) -> None:
    with pulsar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, producer_name="with-props", properties={"app": "billing", "v": "2"})
        producer.send(b"x")
        [pub] = _stats(standalone, topic)["publishers"]
        assert pub["producerName"] == "with-props"
        assert pub["metadata"] == {"app": "billing", "v": "2"}
        assert pub["accessMode"] == "Shared"
        with pytest.raises(ValueError):
            client.create_producer(topic, properties={"n": 1})


def test_is_connected_follows_the_producer(standalone: StandaloneProcess, topic: str) -> None:
    with pulsar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic)
        assert producer.is_connected()
        producer.close()
        assert not producer.is_connected()


def test_initial_sequence_id_numbers_the_messages_after_it(standalone: StandaloneProcess, topic: str) -> None:
    with pulsar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "seq")
        producer = client.create_producer(topic, initial_sequence_id=100, batching_enabled=False)
        producer.send(b"a")
        producer.send(b"b")
        assert producer.last_sequence_id() == 102
        assert [consumer.receive(10_000).sequence_id() for _ in range(2)] == [101, 102]


def test_last_sequence_id_continues_where_a_producer_of_the_same_name_left_off(
    standalone: StandaloneProcess, topic: str
) -> None:
    with pulsar.Client(standalone.service_url) as client:
        client.create_producer(topic).close()  # the topic exists: it can have a policy
        policy = f"/admin/v2/persistent/{_path(topic)}/deduplicationEnabled"
        assert admin_call(standalone, "POST", policy, True)[0] == 204
        wait_for("deduplication on", lambda: _stats(standalone, topic)["deduplicationStatus"] == "Enabled")
        first = client.create_producer(topic, producer_name="resumer")
        for i in range(5):
            first.send(b"m%d" % i)
        assert first.last_sequence_id() == 4
        first.close()
        again = client.create_producer(topic, producer_name="resumer")
        assert again.last_sequence_id() == 4  # told by the broker, which stores it for deduplication
        again.send(b"m5")
        assert again.last_sequence_id() == 5


def test_ordering_key_is_carried_to_the_consumer(standalone: StandaloneProcess, topic: str) -> None:
    with pulsar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "keys", consumer_type=pulsar.ConsumerType.Key_Shared)
        producer = client.create_producer(topic)
        producer.send(b"ordered", partition_key="pk", ordering_key="ok")
        msg = consumer.receive(10_000)
        assert (msg.data(), msg.partition_key(), msg.ordering_key()) == (b"ordered", "pk", "ok")


def test_lazily_started_partition_producers_register_on_their_first_message(standalone: StandaloneProcess) -> None:
    topic = _partitioned(standalone, 3)

    def publishers() -> list[int]:
        return [len(_stats(standalone, f"{topic}-partition-{i}")["publishers"]) for i in range(3)]

    with pulsar.Client(standalone.service_url) as client:
        eager = client.create_producer(topic, producer_name="eager")
        assert publishers() == [1, 1, 1]
        eager.close()
        lazy = client.create_producer(
            topic,
            initial_sequence_id=10,
            lazy_start_partitioned_producers=True,
            message_router=lambda msg, n: 1,
            batching_enabled=False,
        )
        # Partition 0 starts at creation (refusals surface there, as pulsar-client's C++ core does).
        assert lazy.is_connected()
        assert publishers() == [1, 0, 0]
        msg_id = lazy.send(b"to partition 1")
        assert msg_id.partition() == 1
        assert publishers() == [1, 1, 0]
        assert lazy.last_sequence_id() == 11  # numbered from initial_sequence_id before it registered
        assert lazy.is_connected()
        lazy.close()
        # In an exclusive mode the option is ignored: an exclusive producer holds every partition at once.
        exclusive = client.create_producer(
            topic, lazy_start_partitioned_producers=True, access_mode=pulsar.ProducerAccessMode.Exclusive
        )
        assert publishers() == [1, 1, 1]
        exclusive.close()


async def test_max_pending_messages_across_partitions_caps_each_partition_queue(
    standalone: StandaloneProcess,
) -> None:
    topic = _partitioned(standalone, 4)
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(
            topic,
            max_pending_messages=1000,
            max_pending_messages_across_partitions=8,
            block_if_queue_full=False,
            batching_max_publish_delay_ms=60_000,
            message_router=lambda msg, n: 0,
        )
        assert [p.max_pending for p in producer.partitions] == [2, 2, 2, 2]
        receipts = [producer.send_nowait(b"a"), producer.send_nowait(b"b")]
        with pytest.raises(pulsar.ProducerQueueIsFull):
            producer.send_nowait(b"c")
        await producer.flush()
        assert [(await r).partition() for r in receipts] == [0, 0]
        assert producer.partitions[0].pending == 0  # room again
        receipt = producer.send_nowait(b"d")
        await producer.flush()
        assert (await receipt).partition() == 0
