"""Closing a consumer or a reader a second time, as pulsar-client 3.x does, against a real standalone.

pulsar-client's asyncio ``Consumer.close()`` and ``Reader.close()`` hand the C++ client's
``closeAsync`` result on, and the C++ consumers (single and multi-topic, which readers use) answer
``Ok`` when already closed or unsubscribed: a second asyncio close returns quietly. Only the
producer's ``closeAsync`` answers ``AlreadyClosed`` (not covered here). pulsar-client's blocking
``close()`` fails a second time (on its own bookkeeping); the blocking API here raises
``AlreadyClosed`` then.
"""

from __future__ import annotations

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar import AlreadyClosed, MessageId
from magnetar.client import aio

pytestmark = pytest.mark.timeout(60)


async def test_asyncio_consumer_and_reader_close_twice_quietly(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s")
        await consumer.close()
        await consumer.close()
        several = await client.subscribe([topic, f"{topic}-other"], "s2")
        await several.close()
        await several.close()
        unsubscribed = await client.subscribe(topic, "s3")
        await unsubscribed.unsubscribe()
        await unsubscribed.close()  # close after unsubscribe: Ok, as the C++ consumer answers
        reader = await client.create_reader(topic, MessageId.earliest)
        await reader.close()
        await reader.close()
        with pytest.raises(AlreadyClosed):
            await consumer.receive(100)


def test_blocking_consumer_and_reader_refuse_a_second_close(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s")
        consumer.close()
        with pytest.raises(AlreadyClosed):
            consumer.close()
        reader = client.create_reader(topic, MessageId.earliest)
        reader.close()
        with pytest.raises(AlreadyClosed):
            reader.close()
