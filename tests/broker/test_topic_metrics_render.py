"""The per-topic metrics text is rendered a slice of samples per loop turn (broker/metrics/topics.py):
the bytes must be exactly what prometheus_client's ``generate_latest`` gives for the whole
families, escaping included, and the loop must get turns while a large family is rendered."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.broker.metrics import topics as topic_metrics


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _families(topics: int) -> list[Metric]:
    count = GaugeMetricFamily("magnetar_broker_topics", "Topics loaded on this broker")
    count.add_metric([], topics)
    storage = GaugeMetricFamily("magnetar_topic_storage_size", 'Bytes "stored"\\ per\ntopic', labels=["topic"])
    backlog = GaugeMetricFamily("magnetar_subscription_backlog", "Backlog", labels=["topic", "subscription"])
    for i in range(topics):
        name = f'persistent://t/ns/odd-"name"\\{i}\n'  # quotes, backslash and newline need escaping
        storage.add_metric([name], i * 1.5)
        backlog.add_metric([name, "sub-é"], float(i % 7))
    empty = GaugeMetricFamily("magnetar_subscription_msg_drop_rate", "Drops", labels=["topic", "subscription"])
    return [count, storage, empty, backlog]


async def test_the_sliced_text_is_generate_latest_s() -> None:
    topics = 3 * topic_metrics.SAMPLES_PER_TURN + 17  # several parts per family, the last one short
    registry = CollectorRegistry()
    registry.register(_Fixed(_families(topics)))
    assert await topic_metrics.render(_families(topics)) == generate_latest(registry)


async def test_rendering_hands_the_loop_back_between_slices() -> None:
    turns = 0
    stop = False

    def turn() -> None:
        nonlocal turns
        turns += 1
        if not stop:
            asyncio.get_running_loop().call_soon(turn)

    asyncio.get_running_loop().call_soon(turn)
    await topic_metrics.render(_families(4 * topic_metrics.SAMPLES_PER_TURN))
    stop = True
    # Two families of 4 slices each, plus the one-sample and empty ones: at least 8 turns.
    assert turns >= 8, turns
