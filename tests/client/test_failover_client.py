"""Failover through the client: the broker's ``active_consumer_change`` reaches the consumers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from tests.support.standalone import StandaloneProcess

from magnetar.client import aio
from magnetar.client.consumer.consumer import Consumer
from magnetar.client.options import ConsumerType

pytestmark = pytest.mark.timeout(60)


async def _until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    """Poll: the change arrives as a pushed frame and the client exposes no event for it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)


def _active(consumer: Consumer) -> bool | None:
    return consumer.partitions[0].is_active


async def test_consumers_learn_which_of_them_is_active(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        b = await client.subscribe(topic, "fo", consumer_type=ConsumerType.Failover, consumer_name="b")
        await _until(lambda: _active(b) is True)
        assert _active(b) is True
        a = await client.subscribe(topic, "fo", consumer_type=ConsumerType.Failover, consumer_name="a")
        await _until(lambda: _active(a) is True and _active(b) is False)
        assert (_active(a), _active(b)) == (True, False)  # "a" sorts first
        await a.close()
        await _until(lambda: _active(b) is True)
        assert _active(b) is True
