"""Per-topic and per-subscription Prometheus metrics, read from the loaded topics at scrape time.

They were gauges refreshed by the broker's one-second tick: a dozen label lookups per topic each
second whether anyone scraped or not, in one callback of O(loaded topics) that stalled every other
tenant's frames (the exhaustion scenario, tests/faults/test_exhaustion.py), and gauges that
outlived their topics (an unloaded topic kept its labels, and their memory, for the life of the
process). Pulsar also computes them when scraped. Here a scrape reads the loaded topics in slices
of ``SLICE`` and renders the text ``SAMPLES_PER_TURN`` samples at a time, handing the loop back
between slices, so a scrape of 100,000 topics does not hold the loop for the whole walk. Only
loaded topics are reported.

The text is rendered on the loop rather than in a worker thread: a thread rendering pure Python
holds the GIL for up to the switch interval (5 ms) at a time, and each step of another tenant's
request then waits for it. Between slices the scrape idles ``loop.pause.PAUSE`` (1 ms), not
``sleep(0)``; ``loop.pause`` says why and what it bought.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.broker.loop.pause import PAUSE

if TYPE_CHECKING:
    from magnetar.broker.topics.non_persistent import NonPersistentTopic
    from magnetar.broker.topics.persistent import PersistentTopic

SLICE = 100  # topics read between two returns to the loop
SAMPLES_PER_TURN = 500  # samples rendered between two returns to the loop


class _Families:
    """The families of one scrape, filled topic by topic."""

    def __init__(self) -> None:
        self.topics = GaugeMetricFamily("magnetar_broker_topics", "Topics loaded on this broker")
        self.storage = GaugeMetricFamily("magnetar_topic_storage_size", "Bytes stored per topic", labels=["topic"])
        self.backlog = GaugeMetricFamily(
            "magnetar_subscription_backlog", "Unacknowledged entries per subscription", labels=["topic", "subscription"]
        )
        self.rate_in = GaugeMetricFamily(
            "magnetar_topic_msg_rate_in", "Messages/s published per topic", labels=["topic"]
        )
        self.rate_out = GaugeMetricFamily(
            "magnetar_topic_msg_rate_out", "Messages/s dispatched per topic", labels=["topic"]
        )
        # Pulsar's pulsar_publish_rate_limit_times and the dispatchThrottled*Events* subscription stats.
        self.publish_limited = GaugeMetricFamily(
            "magnetar_publish_rate_limit_times", "Times a topic went over its publish rate", labels=["topic"]
        )
        self.dispatch_throttled = GaugeMetricFamily(
            "magnetar_subscription_dispatch_throttled_events",
            "Dispatch reads cut short by a rate limit (limit: topic or subscription; unit: msg or bytes)",
            labels=["topic", "subscription", "limit", "unit"],
        )
        self.drop_rate = GaugeMetricFamily(
            "magnetar_subscription_msg_drop_rate",
            "Non-persistent messages/s dropped per subscription (Pulsar's pulsar_subscription_msg_drop_rate)",
            labels=["topic", "subscription"],
        )

    def persistent(self, name: str, topic: PersistentTopic) -> None:
        self.storage.add_metric([name], topic.ml.total_size)
        self.rate_in.add_metric([name], topic.rate_in.msg_rate)
        self.rate_out.add_metric([name], topic.rate_out.msg_rate)
        self.publish_limited.add_metric([name], topic.rate_limits.publish.limited_times)
        for sub_name, sub in list(topic.subscriptions.items()):
            self.backlog.add_metric([name, sub_name], sub.cursor.backlog)
            for key, count in sub.dispatch_gate.events.items():
                unit, limit = key.split("_")
                self.dispatch_throttled.add_metric([name, sub_name, limit, unit], count)

    def non_persistent(self, name: str, topic: NonPersistentTopic) -> None:
        self.rate_in.add_metric([name], topic.rate_in.msg_rate)
        self.rate_out.add_metric([name], topic.rate_out.msg_rate)
        for sub_name, sub in list(topic.subscriptions.items()):
            self.drop_rate.add_metric([name, sub_name], sub.drop_rate.msg_rate)

    def all(self) -> list[Metric]:
        return [
            self.topics,
            self.storage,
            self.backlog,
            self.rate_in,
            self.rate_out,
            self.publish_limited,
            self.dispatch_throttled,
            self.drop_rate,
        ]


async def collect(
    persistent: Sequence[tuple[str, PersistentTopic]], non_persistent: Sequence[tuple[str, NonPersistentTopic]]
) -> list[Metric]:
    """The families for these topics (snapshots of the broker's maps), read ``SLICE`` at a time."""
    families = _Families()
    families.topics.add_metric([], len(persistent) + len(non_persistent))
    for i, (name, topic) in enumerate(persistent, 1):
        families.persistent(name, topic)
        if i % SLICE == 0:
            await asyncio.sleep(PAUSE)  # let other tenants' frames through
    for i, (name, np_topic) in enumerate(non_persistent, 1):
        families.non_persistent(name, np_topic)
        if i % SLICE == 0:
            await asyncio.sleep(PAUSE)
    return families.all()


class _Collected(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


async def render(families: list[Metric]) -> bytes:
    """The exposition text of ``families`` (gauges), rendered by prometheus_client
    ``SAMPLES_PER_TURN`` samples at a time: each part is a copy of its family with a slice of the
    samples, and the parts after a family's first lose their ``# HELP`` and ``# TYPE`` lines, so
    the text is the one ``generate_latest`` gives for the whole family."""
    out: list[bytes] = []
    for family in families:
        samples = family.samples
        for start in range(0, max(len(samples), 1), SAMPLES_PER_TURN):
            part = Metric(family.name, family.documentation, family.type)
            part.samples = samples[start : start + SAMPLES_PER_TURN]
            text = generate_latest(_Collected([part]))
            out.append(text.split(b"\n", 2)[2] if start else text)
            await asyncio.sleep(PAUSE)
    return b"".join(out)
