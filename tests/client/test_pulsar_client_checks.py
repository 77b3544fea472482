"""Producers and the ``Client`` object behave as pulsar-client 3.x's do, on a real standalone.

What a program written for pulsar-client relies on besides names and signatures: fire-and-forget
``send_async(content, None)``; the exception types of its argument checks (``Client``'s TLS
arguments, Key_Shared sticky ranges, batching with chunking, a service-info provider with the
client's own credentials); the dead letter policy's getters; ``last_sequence_id()`` with custom
sequence ids; a second asyncio ``close()``; the encryption context's algorithm.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar.client import aio

# ----------------------------------------------------------------------------- send_async callbacks


def test_send_async_without_a_callback_sends_fire_and_forget(standalone: StandaloneProcess, topic: str) -> None:
    client = pulsar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send_async(b"positional", None)
        producer.send_async(b"keyword", callback=None)
        producer.flush()
        got = [consumer.receive(10000).data() for _ in range(2)]
        assert got == [b"positional", b"keyword"]
    finally:
        client.close()


@pytest.mark.parametrize("callback", [5, "not a function"])
def test_send_async_refuses_a_callback_that_is_neither_callable_nor_none(
    standalone: StandaloneProcess, topic: str, callback: Any
) -> None:
    client = pulsar.Client(standalone.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        with pytest.raises(TypeError, match="callable"):
            producer.send_async(b"refused", callback)
        done = threading.Event()
        producer.send_async(b"fine", lambda result, msg_id: done.set())
        producer.flush()
        assert done.is_set()
    finally:
        client.close()


async def test_asyncio_send_async_without_a_callback(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic)
        receipt = await producer.send_async(b"x", callback=None)
        assert (await receipt).entry_id() >= 0
        with pytest.raises(TypeError, match="callable"):
            await producer.send_async(b"y", callback=5)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- argument checks


@pytest.mark.parametrize(
    "kwargs",
    [
        {"use_tls": "x"},
        {"tls_trust_certs_file_path": 5},
        {"tls_allow_insecure_connection": "x"},
        {"tls_validate_hostname": 1},
        {"tls_private_key_file_path": 5},
        {"tls_certificate_file_path": b"cert.pem"},
    ],
    ids=lambda kwargs: next(iter(kwargs)),
)
def test_client_tls_arguments_of_the_wrong_type_are_value_errors(kwargs: dict[str, Any]) -> None:
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"Argument {name} is expected to be"):
        pulsar.Client("pulsar://127.0.0.1:6650", **kwargs)
    with pytest.raises(ValueError, match=f"Argument {name} is expected to be"):
        aio.Client("pulsar://127.0.0.1:6650", **kwargs)


def test_overlapping_sticky_ranges_are_a_value_error(standalone: StandaloneProcess, topic: str) -> None:
    client = pulsar.Client(standalone.service_url)
    try:
        with pytest.raises(ValueError, match="overlap"):
            policy = pulsar.ConsumerKeySharedPolicy(
                key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 100), (50, 150)]
            )
            client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=policy)
        with pytest.raises(ValueError, match="overlap"):
            pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(10, 20), (20, 30)])
        # Ranges that only touch are fine, and subscribe.
        policy = pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 99), (100, 199)])
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=policy).close()
    finally:
        client.close()


def test_batching_given_with_chunking_is_a_value_error(standalone: StandaloneProcess, topic: str) -> None:
    NONE = pulsar.CompressionType.NONE
    client = pulsar.Client(standalone.service_url)
    try:
        with pytest.raises(ValueError, match="Batching and chunking"):
            client.create_producer(topic, batching_enabled=True, chunking_enabled=True)
        with pytest.raises(ValueError, match="Batching and chunking"):  # batching_enabled by position
            positional = (None, None, None, 30000, NONE, 1000, 50000, False, True)  # ..., batching_enabled
            client.create_producer(topic, *positional, chunking_enabled=True)
        # The default batching gives way to chunking, as pulsar-client's (off) default would.
        producer = client.create_producer(topic, chunking_enabled=True)
        producer.send(b"x" * 10)
        producer.close()
        client.create_producer(topic, batching_enabled=False, chunking_enabled=True).close()
    finally:
        client.close()


async def test_asyncio_batching_given_with_chunking_is_a_value_error(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        with pytest.raises(ValueError, match="Batching and chunking"):
            await client.create_producer(topic, batching_enabled=True, chunking_enabled=True)
        producer = await client.create_producer(topic, chunking_enabled=True)
        await producer.send(b"y")
        await producer.close()


class _Provider(pulsar.ServiceInfoProvider):
    def __init__(self, url: Any) -> None:
        self.url = url
        self.closed = False

    def initial_service_info(self) -> Any:
        return pulsar.ServiceInfo(self.url) if isinstance(self.url, str) else self.url

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "kwargs",
    [{"authentication": pulsar.AuthenticationToken("t")}, {"tls_trust_certs_file_path": "/tmp/ca.pem"}],
    ids=["authentication", "tls_trust_certs_file_path"],
)
def test_a_provider_with_the_clients_own_credentials_is_a_value_error(
    standalone: StandaloneProcess, kwargs: dict[str, Any]
) -> None:
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match="ServiceInfo"):
        pulsar.Client(_Provider(standalone.service_url), **kwargs)
    failover = pulsar.AutoClusterFailover(
        pulsar.ServiceInfo(standalone.service_url), [pulsar.ServiceInfo("pulsar://127.0.0.1:1")]
    )
    with pytest.raises(ValueError, match="ServiceInfo"):
        pulsar.Client(failover, **kwargs)
    assert set(threading.enumerate()) == before  # refused before anything was started


@pytest.mark.parametrize("answer", ["pulsar://127.0.0.1:6650", None, 5])
def test_a_provider_answering_no_service_info_is_a_value_error(answer: Any) -> None:
    provider = _Provider(None)
    provider.url = answer
    provider.initial_service_info = lambda: answer  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="must give a ServiceInfo"):
        pulsar.Client(provider)


def test_dead_letter_policy_getters_give_empty_strings_when_unset() -> None:
    policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=3)
    assert (policy.dead_letter_topic, policy.initial_subscription_name) == ("", "")
    given = pulsar.ConsumerDeadLetterPolicy(3, "persistent://public/default/dlq", "keep")
    assert (given.dead_letter_topic, given.initial_subscription_name) == ("persistent://public/default/dlq", "keep")


# ----------------------------------------------------------------------------- producers


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_last_sequence_id_follows_custom_sequence_ids(
    standalone: StandaloneProcess, topic: str, batching: bool
) -> None:
    client = pulsar.Client(standalone.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=batching)
        for sid in (0, 1, 2):
            producer.send(b"x", sequence_id=sid)
        assert producer.last_sequence_id() == 2
        for sid in (1, 2):  # sent again: the broker does not deduplicate by default
            producer.send(b"x", sequence_id=sid)
        assert producer.last_sequence_id() == 2
        producer.send(b"x", sequence_id=7)
        assert producer.last_sequence_id() == 7
    finally:
        client.close()


async def test_asyncio_last_sequence_id_follows_custom_sequence_ids(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        for sid in (10, 11, 12, 11, 12):
            await producer.send(b"x", sequence_id=sid)
        assert producer.last_sequence_id() == 12


async def test_a_second_asyncio_close_of_a_producer_raises_already_closed(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        await producer.close()
        with pytest.raises(pulsar.AlreadyClosed):
            await producer.close()
        closed_by_client = await client.create_producer(topic)
    with pytest.raises(pulsar.AlreadyClosed):
        await closed_by_client.close()
