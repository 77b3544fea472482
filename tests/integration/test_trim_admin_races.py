"""``POST .../trim`` against a topic whose managed ledger an unload closed under it (found by the
admin fuzzer as a 500 "managed ledger ... is closed"). A real in-process standalone; the window
of an unload in progress is made by closing the topic's managed ledger while the topic is still
registered, which is the state the unload passes through."""

from __future__ import annotations

import aiohttp

from magnetar.broker.service import BrokerService
from magnetar.client import aio
from magnetar.node.standalone import Standalone
from magnetar.protocol.topic_name import TopicName

TOPIC = "persistent://public/default/trim-race"


async def _broker_with_one_message(node: Standalone) -> BrokerService:
    """The node's broker, once the topic holds one published message (a topic to trim)."""
    broker = node.broker
    assert broker is not None
    async with aio.Client(broker.broker_url) as client:
        producer = await client.create_producer(TOPIC)
        await producer.send(b"x")
        await producer.close()
    return broker


async def _trim(broker: BrokerService) -> tuple[int, object]:
    url = f"{broker.web_url}/admin/v2/persistent/public/default/trim-race/trim"
    async with aiohttp.ClientSession() as session, session.post(url) as resp:
        body = await resp.json() if resp.content_type == "application/json" else await resp.read()
        return resp.status, body


async def test_a_trim_meeting_a_closed_managed_ledger_is_retryable_not_a_server_error(
    in_process_standalone: Standalone,
) -> None:
    broker = await _broker_with_one_message(in_process_standalone)
    topic = await broker.get_topic(TopicName.parse(TOPIC), create=False)
    await topic.ml.close()  # mid-unload: closed, still registered
    status, body = await _trim(broker)
    assert status == 503, (status, body)
    assert isinstance(body, dict) and "retry" in str(body.get("reason")), body


async def test_a_trim_after_an_unload_loads_the_topic_again(in_process_standalone: Standalone) -> None:
    broker = await _broker_with_one_message(in_process_standalone)
    await broker.unload_topic(TOPIC)
    assert await _trim(broker) == (204, b"")
