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
