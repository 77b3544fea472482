"""``POST .../trim`` against a topic whose managed ledger an unload closed under it (found by the
admin fuzzer as a 500 "managed ledger ... is closed"). A real in-process standalone; the window
of an unload in progress is made by closing the topic's managed ledger while the topic is still
registered, which is the state the unload passes through."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.client import aio
from magnetar.node.standalone import Standalone, StandaloneConfig
from magnetar.protocol.topic_name import TopicName

TOPIC = "persistent://public/default/trim-race"


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Standalone]:
    config = BrokerConfig(host="127.0.0.1", port=0, web_port=0)
    sa = Standalone(StandaloneConfig(tmp_path / "data", config, bookie_port=0))
    await sa.start()
    try:
        yield sa
    finally:
        await sa.stop()


async def _trim(node: Standalone) -> tuple[int, object]:
    broker = node.broker
    assert broker is not None
    url = f"{broker.web_url}/admin/v2/persistent/public/default/trim-race/trim"
    async with aiohttp.ClientSession() as session, session.post(url) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.read()
        return resp.status, body


async def test_a_trim_meeting_a_closed_managed_ledger_is_retryable_not_a_server_error(node: Standalone) -> None:
    broker = node.broker
    assert broker is not None
    async with aio.Client(broker.broker_url) as client:
        producer = await client.create_producer(TOPIC)
        await producer.send(b"x")
        await producer.close()
    topic = await broker.get_topic(TopicName.parse(TOPIC), create=False)
    await topic.ml.close()  # mid-unload: closed, still registered
    status, body = await _trim(node)
    assert status == 503, (status, body)
    assert isinstance(body, dict) and "retry" in str(body.get("reason")), body


async def test_a_trim_after_an_unload_loads_the_topic_again(node: Standalone) -> None:
    broker = node.broker
    assert broker is not None
    async with aio.Client(broker.broker_url) as client:
        producer = await client.create_producer(TOPIC)
        await producer.send(b"x")
        await producer.close()
    await broker.unload_topic(TOPIC)
    assert await _trim(node) == (204, b"")
