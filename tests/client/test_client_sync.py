"""The blocking client, against the client-unit-test fake broker run on its own thread (conftest)."""

from __future__ import annotations

import threading

import pytest

import magnetar
from magnetar.client import Client, InitialPosition, MessageId, ProducerQueueIsFull, Result, Timeout


def test_top_level_package_exports_the_sync_client():
    assert magnetar.Client is Client
    assert magnetar.MessageId is MessageId
    assert magnetar.asyncio.Client.__module__ == "magnetar.client.aio"


def test_send_receive_ack_and_close(threaded_broker):
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        consumer = client.subscribe("s", "sub", initial_position=InitialPosition.Earliest)
        producer = client.create_producer("s")
        mid = producer.send(b"hello", properties={"k": "v"})
        assert mid == MessageId(-1, 7, 0, 0)
        msg = consumer.receive(timeout_millis=5000)
        assert (msg.data(), msg.properties(), msg.message_id()) == (b"hello", {"k": "v"}, mid)
        consumer.acknowledge(msg)
        consumer.close()  # returns once the ack is durable
        assert [a["positions"] for a in broker.sent("ack")] == [[[7, 0]]]


def test_send_async_callbacks_run_in_order_with_ok_and_batch_indexes(threaded_broker):
    broker = threaded_broker.broker
    results: list[tuple[Result, MessageId]] = []
    done = threading.Event()

    def callback(res, msg_id):
        results.append((res, msg_id))
        if len(results) == 2500:
            done.set()

    with Client(broker.url) as client:
        producer = client.create_producer("s", max_pending_messages=10_000)
        for i in range(2500):
            producer.send_async(b"%d" % i, callback)
        producer.flush()
        assert done.wait(5)
    assert all(res is Result.Ok for res, _ in results)
    assert [m for _, m in results][:2] == [MessageId(-1, 7, 0, 0), MessageId(-1, 7, 0, 1)]
    assert results[1000][1] == MessageId(-1, 7, 1, 0)  # batching_max_messages=1000
    assert sum(s["meta"]["n"] for s in broker.sent("send")) == 2500


def test_send_async_reports_a_full_queue_through_the_callback(threaded_broker):
    broker = threaded_broker.broker
    broker.hold_receipts = True
    outcomes = []
    with Client(broker.url) as client:
        producer = client.create_producer("s", max_pending_messages=2, send_timeout_millis=300)
        for _ in range(3):
            producer.send_async(b"x", lambda res, mid: outcomes.append((res, mid)))
        # The third was refused at once, in the caller's thread, before anything timed out.
        assert len(outcomes) == 1 and isinstance(outcomes[0][0], ProducerQueueIsFull)
        producer.flush()
    assert [type(res) for res, _ in outcomes[1:]] == [Timeout, Timeout]


@pytest.mark.parametrize("callback", [5, "not a function"])
def test_send_async_refuses_a_callback_that_is_not_callable_at_the_call(threaded_broker, callback):
    # Refused in the caller's thread, not queued to fail on the client's loop thread (None is fine:
    # fire and forget, tests/client/test_pulsar_client_checks.py).
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        producer = client.create_producer("s", batching_enabled=False)
        with pytest.raises(TypeError, match="callable"):
            producer.send_async(b"refused", callback)
        assert producer.send(b"after") == MessageId(-1, 7, 0, -1)  # nothing reserved or queued
    assert [s["seq"] for s in broker.sent("send")] == [0]


def test_receive_timeout_raises_timeout(threaded_broker):
    with Client(threaded_broker.broker.url) as client:
        consumer = client.subscribe("s", "sub")
        with pytest.raises(Timeout):
            consumer.receive(timeout_millis=50)


def test_blocking_send_surfaces_errors(threaded_broker):
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        producer = client.create_producer("s")
        broker.max_message_size = 4
        with pytest.raises(magnetar.client.MessageTooLarge):
            producer.send(b"too big for the broker now")


@pytest.mark.parametrize("content", ["text, not bytes", 42, 1.5])
def test_send_and_send_async_refuse_content_that_is_not_bytes_at_the_call(threaded_broker, content):
    # send_async used to queue it and fail on the client's loop thread, stalling the queue behind it.
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        producer = client.create_producer("s", batching_enabled=False)
        with pytest.raises(TypeError, match="expected type is <class 'bytes'>"):
            producer.send_async(content, lambda result, msg_id: None)
        with pytest.raises(TypeError, match="expected type is <class 'bytes'>"):
            producer.send(content)
        assert producer.send(b"after") == MessageId(-1, 7, 0, -1)  # nothing reserved or queued
    assert [s["seq"] for s in broker.sent("send")] == [0]


# Positional parameters of pulsar-client 3.x's blocking API, in order (pulsar/__init__.py).
PULSAR_SUBSCRIBE = [
    "topic", "subscription_name", "consumer_type", "schema", "message_listener", "receiver_queue_size",
    "max_total_receiver_queue_size_across_partitions", "consumer_name", "unacked_messages_timeout_ms",
    "broker_consumer_stats_cache_time_ms", "negative_ack_redelivery_delay_ms", "is_read_compacted", "properties",
    "pattern_auto_discovery_period", "initial_position", "crypto_key_reader", "replicate_subscription_state_enabled",
    "max_pending_chunked_message", "auto_ack_oldest_chunked_message_on_queue_full", "start_message_id_inclusive",
    "batch_receive_policy", "key_shared_policy", "batch_index_ack_enabled", "regex_subscription_mode",
    "dead_letter_policy", "crypto_failure_action",
]  # fmt: skip
PULSAR_CREATE_READER = [
    "topic", "start_message_id", "schema", "reader_listener", "receiver_queue_size", "reader_name",
    "subscription_role_prefix", "is_read_compacted", "crypto_key_reader", "start_message_id_inclusive",
    "crypto_failure_action",
]  # fmt: skip
PULSAR_SEND = [
    "content", "properties", "partition_key", "ordering_key", "sequence_id", "replication_clusters",
    "disable_replication", "event_timestamp", "deliver_at", "deliver_after",
]  # fmt: skip


def _positional(function) -> list[str]:
    import inspect

    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds and p.name != "self"]


def test_blocking_signatures_take_pulsar_clients_positional_order():
    assert _positional(Client.subscribe) == PULSAR_SUBSCRIBE
    assert _positional(Client.create_reader) == PULSAR_CREATE_READER
    assert _positional(magnetar.Producer.send) == PULSAR_SEND
    assert _positional(magnetar.Producer.send_async) == [PULSAR_SEND[0], "callback", *PULSAR_SEND[1:]]
    # The asyncio client takes pulsar.asyncio's order (no message_listener there, and no
    # pattern_auto_discovery_period: it is keyword-only here).
    asyncio_order = [n for n in PULSAR_SUBSCRIBE if n not in ("message_listener", "pattern_auto_discovery_period")]
    assert _positional(magnetar.asyncio.Client.subscribe) == [*asyncio_order, "is_pattern_topic"]


def test_positional_arguments_land_where_pulsar_puts_them(threaded_broker):
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        consumer = client.subscribe("s", "sub", magnetar.ConsumerType.Shared, None, None, 7, 50000, "me")
        config = consumer._c.config
        assert (config.consumer_type, config.receiver_queue_size, config.consumer_name) == (
            magnetar.ConsumerType.Shared,
            7,
            "me",
        )
        threaded_broker.call(broker.wait_for(lambda: bool(broker.sent("flow"))))
        assert broker.sent("flow")[0]["permits"] == 7
        producer = client.create_producer("s", batching_enabled=False)
        producer.send(b"x", None, "the-partition-key", "the-ordering-key", 99)
    meta = broker.sent("send")[0]["meta"]
    assert meta["k"] == "the-ordering-key"


def test_a_message_listener_gets_every_message_and_receive_is_refused(threaded_broker):
    broker = threaded_broker.broker
    got: list[tuple[str, bytes]] = []
    done = threading.Event()

    def listener(consumer, msg):
        got.append((threading.current_thread().name, msg.data()))
        consumer.acknowledge(msg)
        if len(got) == 3:
            done.set()

    with Client(broker.url) as client:
        consumer = client.subscribe("s", "sub", message_listener=listener, initial_position=InitialPosition.Earliest)
        with pytest.raises(magnetar.InvalidConfiguration):
            consumer.receive(timeout_millis=10)
        producer = client.create_producer("s", batching_enabled=False)
        for payload in (b"a", b"b", b"c"):
            producer.send(payload)
        assert done.wait(5)
        consumer.close()
    assert [data for _, data in got] == [b"a", b"b", b"c"]
    assert all(name.startswith("magnetar-listener") for name, _ in got)
    assert sorted(p[1] for a in broker.sent("ack") for p in a["positions"]) == [0, 1, 2]


def test_consumer_seek_and_last_message_id_and_a_reader_listener(standalone, topic):
    with Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "seek", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(b"%d" % i) for i in range(3)]
        assert consumer.get_last_message_id() == ids[-1]
        assert [consumer.receive(5000).data() for _ in range(3)] == [b"0", b"1", b"2"]
        assert consumer.is_connected()
        consumer.seek(ids[1])
        assert consumer.receive(5000).data() == b"2"  # after the message sought, as pulsar-client
        seen: list[bytes] = []
        done = threading.Event()

        def on_message(reader, msg):
            seen.append(msg.data())
            if len(seen) == 3:
                done.set()

        reader = client.create_reader(topic, MessageId.earliest, reader_listener=on_message)
        assert done.wait(10)
        assert seen == [b"0", b"1", b"2"]
        with pytest.raises(magnetar.InvalidConfiguration):
            reader.read_next(10)
        reader.close()
