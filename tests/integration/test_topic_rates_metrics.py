"""Topic rates and per-topic metrics on a real standalone (broker/topics/rate_sampler.py,
broker/metrics/topics.py).

Rates are sampled once a second for the topics with traffic, and the per-topic families are read
from the loaded topics when ``/metrics`` is scraped. What must hold: a topic being published to
shows a positive ``msgRateIn`` (stats) and ``magnetar_topic_msg_rate_in`` (metrics), its storage
size and its subscription's backlog; once idle, both rates fall back to 0; a topic that is unloaded
disappears from the scrape (gauges set by a timer kept its labels for ever).
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from tests.support.admin import topic_path, topic_stats
from tests.support.metrics import sample, scrape
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.client import aio


def _scrape(sa: StandaloneProcess) -> str:
    return scrape(sa.admin_url + "/metrics", timeout=30)


async def _until(what: str, check: object, within: float = 20.0) -> None:
    assert callable(check)
    end = time.monotonic() + within
    while not await asyncio.to_thread(check):
        if time.monotonic() > end:
            pytest.fail(f"{what} not seen within {within} s")
        await asyncio.sleep(0.1)  # polling the admin API: it has no event to await


async def test_rates_storage_and_backlog_follow_traffic_then_idle(standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/rates-{time.monotonic_ns()}"
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "held")  # never receives: its backlog grows
        producer = await client.create_producer(topic, batching_enabled=False)
        sent = 0

        def publishing_seen() -> bool:
            stats = topic_stats(standalone, topic)
            text = _scrape(standalone)
            rate = sample(text, "magnetar_topic_msg_rate_in", topic=topic)
            return stats["msgRateIn"] > 0 and rate is not None and rate > 0

        async def publish_until_seen() -> None:
            nonlocal sent
            check = asyncio.create_task(_until("msgRateIn > 0 in stats and metrics", publishing_seen))
            while not check.done():
                await producer.send(b"x" * 100)
                sent += 1
            await check

        await publish_until_seen()
        await producer.flush()
        text = _scrape(standalone)
        assert (sample(text, "magnetar_topic_storage_size", topic=topic) or 0) > 0
        backlog = sample(text, "magnetar_subscription_backlog", topic=topic, subscription="held")
        assert backlog == sent, (backlog, sent)
        loaded = re.search(r"^magnetar_broker_topics (\S+)$", text, re.M)
        assert loaded is not None and float(loaded.group(1)) >= 1

        await producer.close()
        await consumer.close()

        def idle() -> bool:
            stats = topic_stats(standalone, topic)
            return stats["msgRateIn"] == 0 and stats["msgRateOut"] == 0

        await _until("both rates back to 0 once idle", idle)
        assert sample(_scrape(standalone), "magnetar_topic_msg_rate_in", topic=topic) == 0

    status, body = admin_call(standalone, "PUT", topic_path(topic) + "/unload")
    assert status == 204, body
    text = _scrape(standalone)
    assert f'topic="{topic}"' not in text, "an unloaded topic is not reported"
