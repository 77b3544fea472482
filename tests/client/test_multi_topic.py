"""Multi-topic and pattern subscriptions against a real standalone.

One ``subscribe`` over a list of topics (one of them partitioned) reads them all as one consumer;
a pattern subscription lists its namespace (``get_topics_of_namespace``, WIRE.md R20g) and picks
up a topic created after it subscribed at the next discovery round.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar.client.consumer.multi_topic import TopicPattern
from magnetar.protocol.errors import InvalidTopicName

Earliest = magnetar.InitialPosition.Earliest


def make_partitioned(sa: StandaloneProcess, topic: str, partitions: int) -> None:
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions"
    status, body = admin_call(sa, "PUT", path, partitions)
    assert status == 204, body


def receive_n(consumer: magnetar.Consumer, n: int, timeout_millis: int = 10_000) -> list[magnetar.Message]:
    messages = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis)
        consumer.acknowledge(msg)
        messages.append(msg)
    return messages


def test_one_consumer_reads_a_list_of_topics_including_a_partitioned_one(
    standalone: StandaloneProcess, topic: str
) -> None:
    plain_a, plain_b, partitioned = topic + "-a", topic + "-b", topic + "-p"
    make_partitioned(standalone, partitioned, 3)
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe([plain_a, plain_b, partitioned], "multi", initial_position=Earliest)
        assert "-TopicsConsumerFakeName-" in consumer.topic()
        sent: dict[str, set[bytes]] = {}
        for name in (plain_a, plain_b, partitioned):
            producer = client.create_producer(name, batching_enabled=False)
            sent[name] = set()
            for i in range(6):
                payload = f"{name}:{i}".encode()
                producer.send(payload, partition_key=f"key-{i}")
                sent[name].add(payload)
        messages = receive_n(consumer, 18)
        by_topic: dict[str, set[bytes]] = {}
        for m in messages:
            base = re.sub(r"-partition-\d+$", "", m.topic_name())
            by_topic.setdefault(base, set()).add(m.data())
        assert by_topic == sent
        assert {m.topic_name() for m in messages if m.topic_name().startswith(partitioned)} <= {
            f"{partitioned}-partition-{i}" for i in range(3)
        }
        with pytest.raises(magnetar.Timeout):
            consumer.receive(300)  # nothing else: every message came once


def test_acks_of_a_multi_topic_consumer_reach_each_topic(standalone: StandaloneProcess, topic: str) -> None:
    one, two = topic + "-1", topic + "-2"
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe([one, two], "acked", initial_position=Earliest)
        client.create_producer(one).send(b"from-one")
        client.create_producer(two).send(b"from-two")
        assert {m.data() for m in receive_n(consumer, 2)} == {b"from-one", b"from-two"}
        consumer.close()
        again = client.subscribe([one, two], "acked", initial_position=Earliest)
        with pytest.raises(magnetar.Timeout):
            again.receive(500)  # both acknowledged, on their own topics


def test_a_pattern_subscription_picks_up_a_topic_created_after_it(standalone: StandaloneProcess) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    existing = f"persistent://public/default/{prefix}-existing"
    other = f"persistent://public/default/other-{prefix}"
    with magnetar.Client(standalone.service_url) as client:
        client.create_producer(existing).send(b"before")
        client.create_producer(other).send(b"not-matching")
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"),
            "pattern",
            initial_position=Earliest,
            pattern_auto_discovery_period=1,
        )
        assert consumer.topic() == f"persistent://public/default/{prefix}-.*"
        assert receive_n(consumer, 1)[0].data() == b"before"
        late = f"persistent://public/default/{prefix}-late"
        late_partitioned = f"persistent://public/default/{prefix}-late-p"
        make_partitioned(standalone, late_partitioned, 2)
        client.create_producer(late).send(b"after")
        client.create_producer(late_partitioned, batching_enabled=False).send(b"after-p", partition_key="x")
        deadline = time.monotonic() + 20
        got: list[magnetar.Message] = []
        while len(got) < 2 and time.monotonic() < deadline:
            try:
                got += receive_n(consumer, 1, timeout_millis=500)
            except magnetar.Timeout:
                continue
        assert {m.data() for m in got} == {b"after", b"after-p"}
        assert {m.topic_name() for m in got} >= {late}
        with pytest.raises(magnetar.Timeout):
            consumer.receive(300)  # the non-matching topic's message never came


def test_a_short_pattern_is_in_public_default_and_other_domains_are_refused() -> None:
    short = TopicPattern.parse(re.compile("orders-.*"))
    assert short.namespace == "public/default"
    assert short.matches("persistent://public/default/orders-1")
    assert not short.matches("persistent://public/default/orders")
    assert not short.matches("persistent://other/default/orders-1")
    scoped = TopicPattern.parse(re.compile("acme/prod/.*-in"))
    assert scoped.namespace == "acme/prod" and scoped.matches("persistent://acme/prod/x-in")
    # The mode picks the domains; a pattern's own domain is dropped, as pulsar-client does.
    non_persistent = TopicPattern.parse(re.compile("non-persistent://public/default/o-.*"), "NON_PERSISTENT")
    assert non_persistent.matches("non-persistent://public/default/o-1")
    assert not non_persistent.matches("persistent://public/default/o-1")
    with pytest.raises(InvalidTopicName):
        TopicPattern.parse(re.compile("other://public/default/.*"))


def test_a_topic_that_is_neither_a_name_a_list_nor_a_pattern_is_refused(standalone: StandaloneProcess) -> None:
    with magnetar.Client(standalone.service_url) as client, pytest.raises(ValueError):
        client.subscribe(42, "s")


def test_retry_enable_also_reads_the_retry_topic(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic, "sub", consumer_type=magnetar.ConsumerType.Shared, initial_position=Earliest, retry_enable=True
        )
        assert consumer.topic() == topic
        client.create_producer(topic).send(b"first")
        client.create_producer(f"{topic}-sub-RETRY").send(b"retried")  # Pulsar's default retry topic name
        messages = receive_n(consumer, 2)
        assert {(m.data(), m.topic_name()) for m in messages} == {
            (b"first", topic),
            (b"retried", f"{topic}-sub-RETRY"),
        }


async def test_the_asyncio_client_takes_a_string_pattern_with_is_pattern_topic(standalone: StandaloneProcess) -> None:
    from magnetar.asyncio import Client

    prefix = f"apat-{uuid.uuid4().hex[:8]}"
    async with Client(standalone.service_url) as client:
        for name in ("x", "y"):
            await (await client.create_producer(f"{prefix}-{name}")).send(name.encode())
        consumer = await client.subscribe(
            f"persistent://public/default/{prefix}-.*", "s", initial_position=Earliest, is_pattern_topic=True
        )
        got = {(await consumer.receive(10_000)).data() for _ in range(2)}
        assert got == {b"x", b"y"}
        with pytest.raises(ValueError):
            await client.subscribe([f"{prefix}-x"], "s", is_pattern_topic=True)
        reader = await client.create_reader(f"{prefix}-x", magnetar.MessageId.earliest)
        assert (await reader.read_next(10_000)).data() == b"x"
        assert not await reader.has_message_available()
