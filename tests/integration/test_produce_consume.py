"""End to end on a real standalone: produce, subscribe, receive, acknowledge."""

from __future__ import annotations

import contextlib

from tests.support.standalone import StandaloneProcess

import magnetar


def test_issue_example_round_trip(standalone: StandaloneProcess) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        name = "example-topic"
        consumer = client.subscribe(name, "my-sub", consumer_type=magnetar.ConsumerType.Shared)
        producer = client.create_producer(name)
        msg_id = producer.send(b"hello", properties={"k": "v"}, partition_key="user-1")
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"hello"
        assert msg.properties() == {"k": "v"}
        assert msg.partition_key() == "user-1"
        assert msg.message_id() == msg_id
        assert msg.topic_name() == "persistent://public/default/example-topic"
        consumer.acknowledge(msg)
    finally:
        client.close()


def test_short_and_full_names_are_one_topic(standalone: StandaloneProcess, topic: str) -> None:
    short = topic.removeprefix("persistent://public/default/")
    client = magnetar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
        client.create_producer(short).send(b"via-short-name")
        assert consumer.receive(timeout_millis=5000).data() == b"via-short-name"
    finally:
        client.close()


def _ignore_outcome(result: object, msg_id: object) -> None:
    """A fire-and-forget ``send_async`` callback (the blocking client requires a callable)."""


def test_two_subscriptions_each_receive_everything(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        a = client.subscribe(topic, "sub-a")
        b = client.subscribe(topic, "sub-b")
        producer = client.create_producer(topic, batching_max_messages=50)
        sent = [f"m-{i}".encode() for i in range(500)]
        for payload in sent:
            producer.send_async(payload, _ignore_outcome)
        producer.flush()
        for consumer in (a, b):
            got = []
            for _ in sent:
                msg = consumer.receive(timeout_millis=10000)
                got.append(msg.data())
                consumer.acknowledge(msg)
            assert got == sent
    finally:
        client.close()


def test_shared_subscription_splits_and_redelivers_on_disconnect(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    other = magnetar.Client(standalone.service_url)
    try:
        c1 = client.subscribe(topic, "shared", consumer_type=magnetar.ConsumerType.Shared, receiver_queue_size=10)
        c2 = other.subscribe(topic, "shared", consumer_type=magnetar.ConsumerType.Shared, receiver_queue_size=10)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [f"m-{i}".encode() for i in range(40)]
        for payload in sent:
            producer.send(payload)
        # Each consumer takes some without acknowledging; both must have received part of the stream.
        held1 = [c1.receive(timeout_millis=5000) for _ in range(5)]
        held2 = [c2.receive(timeout_millis=5000) for _ in range(5)]
        assert {m.data() for m in held1}.isdisjoint({m.data() for m in held2})
        # Consumer 2 goes away with 5+ unacknowledged messages: they must come to consumer 1.
        other.close()
        received = [m.data() for m in held1]
        for m in held1:
            c1.acknowledge(m)
        while len(set(received)) < len(sent):
            msg = c1.receive(timeout_millis=10000)
            received.append(msg.data())
            c1.acknowledge(msg)
        assert set(received) == set(sent)
        assert {m.data() for m in held2} <= set(received)
    finally:
        client.close()
        with contextlib.suppress(magnetar.AlreadyClosed):  # a second close() raises, as in Pulsar
            other.close()


def test_exclusive_subscription_refuses_second_consumer(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        client.subscribe(topic, "excl")
        try:
            client.subscribe(topic, "excl")
        except magnetar.MagnetarError as exc:
            assert "ConsumerBusy" in type(exc).__name__ or "exclusive" in str(exc).lower()
        else:
            raise AssertionError("a second consumer joined an exclusive subscription")
    finally:
        client.close()


def test_batched_and_compressed_messages_keep_order_and_content(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        for kind in (magnetar.CompressionType.LZ4, magnetar.CompressionType.ZSTD):
            sub = f"s-{kind.name}"
            consumer = client.subscribe(topic, sub, initial_position=magnetar.InitialPosition.Earliest)
            producer = client.create_producer(topic, compression_type=kind, batching_max_messages=100)
            sent = [(b"x" * (i % 300)) + str(i).encode() for i in range(1000)]
            for payload in sent:
                producer.send_async(payload, _ignore_outcome)
            producer.flush()
            got = []
            while len(got) < len(sent):
                msg = consumer.receive(timeout_millis=10000)
                got.append(msg.data())
                consumer.acknowledge(msg)
            assert got[-len(sent) :] == sent
            producer.close()
            consumer.close()
    finally:
        client.close()


def test_cumulative_ack_and_restart_resume(fresh_standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(fresh_standalone.service_url)
    consumer = client.subscribe(topic, "cum")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(str(i).encode())
    msgs = [consumer.receive(timeout_millis=5000) for _ in range(10)]
    consumer.acknowledge_cumulative(msgs[-1])
    consumer.close()
    client.close()
    fresh_standalone.restart()
    client = magnetar.Client(fresh_standalone.service_url)
    try:
        consumer = client.subscribe(topic, "cum")
        assert consumer.receive(timeout_millis=5000).data() == b"10"
    finally:
        client.close()
