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
        assert mid == MessageId(7, 0, -1, 0)
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
    assert [m for _, m in results][:2] == [MessageId(7, 0, -1, 0), MessageId(7, 0, -1, 1)]
    assert results[1000][1] == MessageId(7, 1, -1, 0)  # batching_max_messages=1000
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


@pytest.mark.parametrize("callback", [None, "not a function"])
def test_send_async_refuses_a_callback_that_is_not_callable_at_the_call(threaded_broker, callback):
    # It used to be queued and then fail on the client's loop thread ('NoneType' is not callable).
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        producer = client.create_producer("s", batching_enabled=False)
        with pytest.raises(TypeError, match="callable"):
            producer.send_async(b"refused", callback)
        assert producer.send(b"after") == MessageId(7, 0, -1, -1)  # nothing reserved or queued
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


@pytest.mark.parametrize("content", ["text, not bytes", 42, None])
def test_send_and_send_async_refuse_content_that_is_not_bytes_at_the_call(threaded_broker, content):
    # send_async used to queue it and fail on the client's loop thread, stalling the queue behind it.
    broker = threaded_broker.broker
    with Client(broker.url) as client:
        producer = client.create_producer("s", batching_enabled=False)
        with pytest.raises(TypeError, match="must be bytes"):
            producer.send_async(content, lambda result, msg_id: None)
        with pytest.raises(TypeError, match="must be bytes"):
            producer.send(content)
        assert producer.send(b"after") == MessageId(7, 0, -1, -1)  # nothing reserved or queued
    assert [s["seq"] for s in broker.sent("send")] == [0]
