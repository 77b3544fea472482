"""Regression tests of the blocking client's defects (issue 16), each against a real standalone.

Every test that guards against a hang runs the call in a helper thread with a deadline, so that the
defect coming back fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar as pulsar

DEADLINE = 20.0  # seconds a call may take before the test calls it a hang


def finishes(call: Callable[[], Any], limit: float = DEADLINE) -> tuple[str, Any]:
    """Run ``call`` in a thread; ("ok", value) or ("raised", exception); fails the test if it hangs."""
    outcome: list[tuple[str, Any]] = []

    def run() -> None:
        try:
            outcome.append(("ok", call()))
        except BaseException as exc:
            outcome.append(("raised", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    assert outcome, f"the call did not return within {limit}s"
    return outcome[0]


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.service_url, operation_timeout_seconds=15)
    yield c
    if not c._closed:
        c.close()


# ---------------------------------------------------------------- 1: a payload that is not bytes


@pytest.mark.parametrize("content", ["text", 5, 1.5, ["list"]])
def test_a_payload_that_is_not_bytes_is_refused_at_the_call_and_leaks_nothing(
    client: pulsar.Client, topic: str, content: Any
) -> None:
    producer = client.create_producer(topic, max_pending_messages=1, batching_enabled=False)
    called: list[Any] = []
    for send in (lambda: producer.send(content), lambda: producer.send_async(content, lambda r, m: called.append(r))):
        kind, exc = finishes(send)
        assert kind == "raised" and type(exc) is TypeError
        assert str(exc) == f"Invalid record obj of type {type(content)} - expected type is <class 'bytes'>"
    # Nothing was queued or reserved: the one pending slot is free, and no callback ever ran.
    assert finishes(lambda: producer.send(b"after"))[0] == "ok"
    assert called == []


def _broken_router(msg: Any, partitions: int) -> int:
    raise ZeroDivisionError("a broken message_router")  # runs on the client's loop thread


@pytest.mark.parametrize("failure", ["message_router", "property value"])
def test_an_error_raised_on_the_loop_thread_reaches_send_and_the_callback(
    standalone: StandaloneProcess, client: pulsar.Client, failure: str
) -> None:
    # A failing router, or a property value the loop thread cannot encode: not an error of ours,
    # a TypeError used to escape the loop's hand-over and leave send() waiting forever.
    name = f"routed-{uuid.uuid4().hex[:8]}"
    status, _ = admin_call(standalone, "PUT", f"/admin/v2/persistent/public/default/{name}/partitions", 2)
    assert status in (200, 204)
    if failure == "message_router":
        producer = client.create_producer(f"persistent://public/default/{name}", message_router=_broken_router)
        kwargs: dict[str, Any] = {}
    else:
        producer = client.create_producer(f"persistent://public/default/{name}", max_pending_messages=1)
        kwargs = {"properties": {"k": 5}}
    kind, exc = finishes(lambda: producer.send(b"x", **kwargs))
    assert kind == "raised" and ("ZeroDivisionError" in repr(exc) or isinstance(exc, TypeError)), exc
    results: list[Any] = []
    done = threading.Event()
    producer.send_async(b"y", lambda r, m: (results.append((r, m)), done.set()), **kwargs)
    assert done.wait(DEADLINE), "the send_async callback never ran"
    assert isinstance(results[0][0], Exception) and results[0][1] is None
    if failure == "property value":  # the failed sends gave their one pending slot back
        assert finishes(lambda: producer.send(b"fine"))[0] == "ok"


# ---------------------------------------------------------------- 2: calls on a closed client


@pytest.mark.parametrize("how", ["close", "shutdown"])
def test_every_call_after_close_raises_already_closed_at_once(client: pulsar.Client, topic: str, how: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    msg_id = producer.send(b"before")
    getattr(client, how)()
    calls: list[Callable[[], Any]] = [
        lambda: producer.send(b"x"),
        lambda: producer.send_async(b"x", lambda r, m: None),
        lambda: producer.send(b"x"),  # used to hang after a send_async was silently queued
        lambda: producer.flush(),
        lambda: producer.close(),
        lambda: consumer.receive(100),
        lambda: consumer.acknowledge(msg_id),
        lambda: consumer.negative_acknowledge(msg_id),
        lambda: consumer.close(),
        lambda: consumer.unsubscribe(),
        lambda: reader.read_next(100),
        lambda: reader.close(),
        lambda: client.create_producer(topic),
        lambda: client.subscribe(topic, "other"),
        lambda: client.get_topic_partitions(topic),
        lambda: client.close(),
    ]
    for call in calls:
        kind, exc = finishes(call)
        assert kind == "raised" and isinstance(exc, pulsar.AlreadyClosed), exc
        assert exc.error() is pulsar.Result.AlreadyClosed


@pytest.mark.parametrize("how", ["close", "shutdown"])
def test_every_accepted_send_async_gets_its_callback_exactly_once(client: pulsar.Client, topic: str, how: str) -> None:
    producer = client.create_producer(topic, max_pending_messages=5000, batching_max_publish_delay_ms=50)
    outcomes: dict[int, list[Any]] = {i: [] for i in range(2000)}
    for i in range(2000):
        producer.send_async(b"m%d" % i, lambda result, msg_id, i=i: outcomes[i].append(result))
    assert finishes(getattr(client, how))[0] == "ok"
    wait_for("every callback", lambda: all(outcomes.values()))
    for results in outcomes.values():
        assert len(results) == 1
        assert results[0] is pulsar.Result.Ok or isinstance(results[0], pulsar.AlreadyClosed)


def test_calls_on_a_closed_producer_consumer_or_reader_raise_already_closed(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    msg_id = producer.send(b"x")
    producer.close()
    consumer.close()
    reader.close()
    for call in (
        lambda: producer.send(b"x"),
        lambda: producer.send_async(b"x", lambda r, m: None),
        producer.flush,
        producer.close,
        lambda: consumer.receive(100),
        lambda: consumer.acknowledge(msg_id),
        lambda: consumer.seek(pulsar.MessageId.earliest),
        consumer.close,
        lambda: reader.read_next(100),
        reader.has_message_available,
        reader.close,
    ):
        kind, exc = finishes(call)
        assert kind == "raised" and isinstance(exc, pulsar.AlreadyClosed), exc
    assert client.create_producer(topic).send(b"the client is still open") is not None


def test_a_second_close_raises_already_closed_but_the_with_block_does_not(standalone: StandaloneProcess) -> None:
    with pulsar.Client(standalone.service_url) as c:
        c.close()  # closing inside the block leaves nothing for its end to do
    with pytest.raises(pulsar.AlreadyClosed):
        c.close()


# ---------------------------------------------------------------- 3: arguments


def test_arguments_are_checked_as_pulsar_client_checks_them(
    standalone: StandaloneProcess, client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic).close()  # the topic exists, so its subscriptions can be listed
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: pulsar.Client(None), "service_url"),  # type: ignore[arg-type]
        (lambda: pulsar.Client("fakeServiceUrl"), "The scheme part is missing: fakeServiceUrl"),
        (lambda: pulsar.Client("ftp://localhost:6650"), "Invalid scheme: ftp"),
        (lambda: client.create_producer(None), "Argument topic is expected to be of type 'str' and not 'NoneType'"),
        (
            lambda: client.create_producer(topic, producer_name=5),
            "Argument producer_name is expected to be either None or of type 'str'",
        ),
        (lambda: client.create_producer(topic, send_timeout_millis="test"), "send_timeout_millis"),
        (lambda: client.create_producer(topic, compression_type=None), "compression_type"),
        (lambda: client.create_producer(topic, block_if_queue_full="test"), "block_if_queue_full"),
        (lambda: client.subscribe(None, "sub"), "Argument 'topic' is expected to be of a type between"),
        (
            lambda: client.subscribe(topic, None),
            "Argument subscription_name is expected to be of type 'str' and not 'NoneType'",
        ),
        (lambda: client.subscribe(topic, "sub", consumer_type=None), "consumer_type"),
        (lambda: client.subscribe(topic, "sub", receiver_queue_size="test"), "receiver_queue_size"),
        (lambda: client.subscribe(topic, "sub", consumer_name=5), "consumer_name"),
        (lambda: client.subscribe(topic, "sub", unacked_messages_timeout_ms="test"), "unacked_messages_timeout_ms"),
        (lambda: client.create_reader(None, pulsar.MessageId.earliest), "topic"),
        (lambda: client.create_reader(topic, None), "start_message_id"),
        (lambda: client.create_reader(topic, pulsar.MessageId.earliest, reader_name=5), "reader_name"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            call()
    # subscribe(topic, None) used to create a durable subscription named "None".
    status, stats = admin_call(standalone, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    assert status == 200 and "None" not in stats["subscriptions"]


def test_message_arguments_are_checked_as_pulsar_client_checks_them(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    for kwargs in (
        {"properties": "test"},
        {"partition_key": 5},
        {"sequence_id": "test"},
        {"replication_clusters": 5},
        {"disable_replication": "test"},
        {"event_timestamp": "test"},
        {"deliver_at": "test"},
        {"deliver_after": "test"},
    ):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            producer.send(b"x", **kwargs)
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            producer.send_async(b"x", lambda r, m: None, **kwargs)
    assert producer.send(b"fine") is not None


# ---------------------------------------------------------------- 4: connection timeout


def test_a_refused_port_fails_with_connect_error_once_the_connection_timeout_passes() -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        c = pulsar.Client(f"pulsar://127.0.0.1:{port}", connection_timeout_ms=500, operation_timeout_seconds=60)
        # Well before the 60 s operation timeout: the connection timeout is what ends it.
        kind, exc = finishes(lambda: c.create_producer("t"), limit=20)
        c.close()
    assert kind == "raised" and type(exc) is pulsar.ConnectError, exc
    assert exc.error() is pulsar.Result.ConnectError
    assert f"127.0.0.1:{port}" in str(exc)


# ---------------------------------------------------------------- 5: errors, namespaces, signals


def test_raised_exceptions_know_their_result(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    with pytest.raises(pulsar.Timeout) as caught:
        consumer.receive(50)
    assert caught.value.error() is pulsar.Result.Timeout
    assert isinstance(caught.value, pulsar.PulsarException)


@pytest.mark.parametrize("missing", ["public/no-such-namespace", "no-such-tenant/default"])
def test_a_topic_of_a_missing_namespace_is_topic_not_found(client: pulsar.Client, missing: str) -> None:
    name = f"persistent://{missing}/t"
    for create in (lambda: client.create_producer(name), lambda: client.subscribe(name, "sub")):
        kind, exc = finishes(create)
        assert kind == "raised" and isinstance(exc, pulsar.TopicNotFound), exc
        assert exc.error() is pulsar.Result.TopicNotFound


def test_a_sigint_wakes_a_blocking_receive_with_interrupted(client: pulsar.Client, topic: str) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread")
    consumer = client.subscribe(topic, "sub")

    def interrupt_once_waiting() -> None:
        wait_for("receive to wait", lambda: consumer._c._blocked)
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    caught: BaseException | None = None
    try:
        threading.Thread(target=interrupt_once_waiting, daemon=True).start()
        # Without the fix the wait goes on until this timeout (Timeout), or a bare KeyboardInterrupt
        # escapes: both are caught here, so that the test fails instead of stopping the run.
        consumer.receive(timeout_millis=int(DEADLINE * 1000))
    except BaseException as exc:
        caught = exc
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(caught, pulsar.Interrupted), repr(caught)
    assert caught.error() is pulsar.Result.Interrupted
    # The consumer still works afterwards.
    producer = client.create_producer(topic)
    producer.send(b"after")
    assert consumer.receive(int(DEADLINE * 1000)).data() == b"after"


def test_asyncio_shutdown_fails_pending_sends_at_once(standalone: StandaloneProcess, topic: str) -> None:
    """``pulsar.asyncio.Client.shutdown()`` is a plain method; what was pending fails, nothing hangs."""
    import asyncio

    from magnetar.client import aio

    async def scenario() -> list[Any]:
        client = aio.Client(standalone.service_url)
        # An open batch that would wait a minute: the shutdown must not wait for it.
        producer = await client.create_producer(topic, batching_max_publish_delay_ms=60_000)
        receipts = [await producer.send_async(b"m%d" % i) for i in range(10)]
        client.shutdown()
        return await asyncio.wait_for(asyncio.gather(*receipts, return_exceptions=True), DEADLINE)

    results = asyncio.run(scenario())
    assert len(results) == 10 and all(isinstance(r, pulsar.AlreadyClosed) for r in results), results


def test_the_asyncio_client_checks_arguments_too(standalone: StandaloneProcess, topic: str) -> None:
    import asyncio

    from magnetar.client import aio

    async def scenario() -> None:
        async with aio.Client(standalone.service_url) as client:
            with pytest.raises(ValueError, match="Argument topic is expected to be of type 'str'"):
                await client.create_producer(None)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="Argument subscription_name is expected to be of type 'str'"):
                await client.subscribe(topic, None)  # type: ignore[arg-type]

    asyncio.run(scenario())
