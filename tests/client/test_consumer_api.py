"""pulsar-client's consumer calls and ``subscribe`` keywords, name for name, against a real standalone."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar import ConsumerType, InitialPosition, MessageId
from magnetar.client import aio


def topic_stats(sa: StandaloneProcess, topic: str) -> Any:
    status, body = admin_call(sa, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    assert status == 200, body
    return body


def make_partitioned(sa: StandaloneProcess, topic: str, partitions: int) -> None:
    status, body = admin_call(
        sa, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", partitions
    )
    assert status in (200, 204), body


def test_consumer_name_is_the_given_one_or_a_generated_one_the_broker_knows(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        named = client.subscribe(topic, "named", consumer_name="worker-1")
        unnamed = client.subscribe(topic, "unnamed")
        assert named.consumer_name() == "worker-1"
        generated = unnamed.consumer_name()
        assert re.fullmatch(r"[0-9a-f]{5}", generated)
        subs = topic_stats(standalone, topic)["subscriptions"]
        assert [c["consumerName"] for c in subs["named"]["consumers"]] == ["worker-1"]
        assert [c["consumerName"] for c in subs["unnamed"]["consumers"]] == [generated]
        with pytest.raises(ValueError, match="consumer_name"):
            client.subscribe(topic, "bad", consumer_name=42)  # type: ignore[arg-type]


def test_is_connected_and_get_last_message_id(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        assert consumer.is_connected()
        empty = consumer.get_last_message_id()
        assert empty.entry_id() < 0  # nothing stored yet
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"%d" % i) for i in range(3)]
        assert consumer.get_last_message_id() == ids[-1]
        consumer.close()
        assert not consumer.is_connected()


def test_the_asyncio_consumer_has_the_same_calls(standalone, topic):
    async def main() -> None:
        async with aio.Client(standalone.service_url) as client:
            consumer = await client.subscribe(topic, "a", consumer_name="async-1")
            producer = await client.create_producer(topic, batching_enabled=False)
            last = None
            for i in range(2):
                last = await producer.send(b"%d" % i)
            assert consumer.consumer_name() == "async-1"
            assert consumer.is_connected()
            assert await consumer.get_last_message_id() == last
            await consumer.close()
            assert not consumer.is_connected()

    asyncio.run(main())


def test_properties_reach_the_broker_as_the_consumer_metadata(standalone, topic):
    props = {"app": "billing", "zone": "eu-1"}
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "meta", ConsumerType.Shared, properties=props)
        client.subscribe(topic, "meta", ConsumerType.Shared)
        consumers = topic_stats(standalone, topic)["subscriptions"]["meta"]["consumers"]
        assert sorted((c["metadata"] for c in consumers), key=len) == [{}, props]
        with pytest.raises(ValueError, match="properties"):
            client.subscribe(topic, "bad", properties={"n": 1})  # type: ignore[dict-item]


def test_the_total_receiver_queue_is_shared_by_the_partitions(standalone, topic):
    make_partitioned(standalone, topic, 4)
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic, "q", receiver_queue_size=1000, max_total_receiver_queue_size_across_partitions=40
        )

        def permits() -> list[int]:
            out = []
            for i in range(4):
                subs = topic_stats(standalone, f"{topic}-partition-{i}")["subscriptions"]
                out.extend(c["availablePermits"] for c in subs.get("q", {}).get("consumers", []))
            return out

        # C++'s rule: min(receiver_queue_size, total // partitions) = 10 permits on each partition.
        wait_for("every partition to have its permits", lambda: len(permits()) == 4)
        assert permits() == [10, 10, 10, 10]
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(8):
            producer.send(b"%d" % i)
        assert sorted(consumer.receive(5000).data() for _ in range(8)) == sorted(b"%d" % i for i in range(8))


def test_options_without_an_effect_here_are_accepted(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic,
            "noop",
            replicate_subscription_state_enabled=True,
            broker_consumer_stats_cache_time_ms=1000,
            initial_position=InitialPosition.Earliest,
        )
        producer = client.create_producer(topic)
        producer.send(b"x")
        assert consumer.receive(5000).data() == b"x"


@pytest.mark.parametrize(
    ("mode", "domains"),
    [
        (magnetar.RegexSubscriptionMode.PersistentOnly, {"persistent"}),
        (magnetar.RegexSubscriptionMode.NonPersistentOnly, {"non-persistent"}),
        (magnetar.RegexSubscriptionMode.AllTopics, {"persistent", "non-persistent"}),
    ],
)
def test_the_regex_subscription_mode_picks_the_domains(standalone, mode, domains):
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    names = {d: f"{d}://public/default/{prefix}-{d}" for d in ("persistent", "non-persistent")}
    with magnetar.Client(standalone.service_url) as client:
        producers = {d: client.create_producer(t, batching_enabled=False) for d, t in names.items()}
        consumer = client.subscribe(re.compile(f"public/default/{prefix}-.*"), "rx", regex_subscription_mode=mode)
        assert {p.topic for p in consumer._c.partitions} == {names[d] for d in domains}
        for d, producer in producers.items():
            producer.send(d.encode())
        got = {consumer.receive(5000).topic_name() for _ in domains}
        assert got == {names[d] for d in domains}


def test_a_reader_of_the_last_message_id(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"%d" % i) for i in range(3)]
        consumer = client.subscribe(topic, "last")
        last = consumer.get_last_message_id()
        assert last == ids[-1]
        reader = client.create_reader(topic, last, start_message_id_inclusive=True, reader_name="last-reader")
        assert reader.read_next(5000).data() == b"2"
        assert MessageId.earliest != last
