"""Broker Prometheus metrics, named in Pulsar's ``pulsar_*`` style with a ``magnetar_`` prefix."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.ledger.bookie_latency import BOOKIE_LATENCY, BUCKETS, BookieLatency

if TYPE_CHECKING:
    from magnetar.broker.non_persistent_topic import NonPersistentTopic
    from magnetar.broker.topic import PersistentTopic


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.connections = Gauge("magnetar_broker_connections", "Open client connections", registry=r)
        self.protocol_errors = Counter(
            "magnetar_broker_protocol_errors", "Connections closed for malformed input", registry=r
        )
        self.msgs_in = Counter("magnetar_broker_messages_in", "Messages published (durable)", registry=r)
        self.bytes_in = Counter("magnetar_broker_bytes_in", "Payload bytes published (durable)", registry=r)
        self.msgs_out = Counter("magnetar_broker_messages_out", "Messages dispatched to consumers", registry=r)
        self.topics = Gauge("magnetar_broker_topics", "Topics loaded on this broker", registry=r)
        self.storage = Gauge("magnetar_topic_storage_size", "Bytes stored per topic", ["topic"], registry=r)
        self.backlog = Gauge(
            "magnetar_subscription_backlog",
            "Unacknowledged entries per subscription",
            ["topic", "subscription"],
            registry=r,
        )
        self.rate_in = Gauge("magnetar_topic_msg_rate_in", "Messages/s published per topic", ["topic"], registry=r)
        self.rate_out = Gauge("magnetar_topic_msg_rate_out", "Messages/s dispatched per topic", ["topic"], registry=r)
        # Rate limits (rate_limit.py): Pulsar's pulsar_publish_rate_limit_times and the
        # dispatchThrottled*Events* subscription stats, plus the time connections spent paused.
        self.publish_throttled_seconds = Counter(
            "magnetar_broker_publish_throttled_seconds",
            "Seconds connections spent with reading paused by publish rate limits",
            registry=r,
        )
        self.publish_rate_limit_times = Gauge(
            "magnetar_publish_rate_limit_times", "Times a topic went over its publish rate", ["topic"], registry=r
        )
        self.dispatch_throttled_events = Gauge(
            "magnetar_subscription_dispatch_throttled_events",
            "Dispatch reads cut short by a rate limit (limit: topic or subscription; unit: msg or bytes)",
            ["topic", "subscription", "limit", "unit"],
            registry=r,
        )
        # Non-persistent topics: messages dropped for subscriptions whose consumers had no permits.
        self.msgs_dropped = Counter(
            "magnetar_broker_messages_dropped",
            "Non-persistent messages dropped (no consumer could take them)",
            registry=r,
        )
        self.drop_rate = Gauge(
            "magnetar_subscription_msg_drop_rate",
            "Non-persistent messages/s dropped per subscription (Pulsar's pulsar_subscription_msg_drop_rate)",
            ["topic", "subscription"],
            registry=r,
        )
        self._dropped_seen: dict[str, int] = {}
        # Per-bookie add latency as this broker's ledger writers see it, and which bookie is slow
        # (ledger/bookie_latency.py): read at scrape time.
        r.register(BookieLatencyCollector(BOOKIE_LATENCY))

    def update(self, topics: Mapping[str, PersistentTopic]) -> None:
        """Refresh the per-topic gauges from the broker's loaded topics (called once a second)."""
        self.topics.set(len(topics))
        for name, topic in topics.items():
            self.storage.labels(name).set(topic.ml.total_size)
            self.rate_in.labels(name).set(topic.rate_in.msg_rate)
            self.rate_out.labels(name).set(topic.rate_out.msg_rate)
            self.publish_rate_limit_times.labels(name).set(topic.rate_limits.publish.limited_times)
            for sub_name, sub in topic.subscriptions.items():
                self.backlog.labels(name, sub_name).set(sub.cursor.backlog)
                for key, count in sub.dispatch_gate.events.items():
                    unit, limit = key.split("_")
                    self.dispatch_throttled_events.labels(name, sub_name, limit, unit).set(count)

    def update_non_persistent(self, topics: Mapping[str, NonPersistentTopic]) -> None:
        """The same per-topic gauges for non-persistent topics (no storage, no backlog), their
        drop rates, and the drop counter (called once a second, after ``update``)."""
        self.topics.inc(len(topics))
        for name, topic in topics.items():
            self.rate_in.labels(name).set(topic.rate_in.msg_rate)
            self.rate_out.labels(name).set(topic.rate_out.msg_rate)
            for sub_name, sub in topic.subscriptions.items():
                self.drop_rate.labels(name, sub_name).set(sub.drop_rate.msg_rate)
            dropped = topic.msg_drop
            delta = dropped - self._dropped_seen.get(name, 0)
            if delta > 0:
                self.msgs_dropped.inc(delta)
            self._dropped_seen[name] = dropped
        for name in [n for n in self._dropped_seen if n not in topics]:
            del self._dropped_seen[name]


class BookieLatencyCollector(Collector):
    """Exports ``BookieLatency`` at scrape time: a histogram of add latency per bookie (send to
    confirmation, every replica), the recent p50 / p99, and ``magnetar_bookie_client_slow`` (1 for a
    bookie judged slow against the others, the one an operator should look at)."""

    def __init__(self, source: BookieLatency) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        stats = self._source.snapshot()
        hist = HistogramMetricFamily(
            "magnetar_bookie_client_add_latency_seconds",
            "Time from sending an entry to a bookie to its confirmation, per bookie (every replica)",
            labels=["bookie"],
        )
        p50 = GaugeMetricFamily(
            "magnetar_bookie_client_add_latency_recent_p50_seconds",
            "Median add latency per bookie over the recent window",
            labels=["bookie"],
        )
        p99 = GaugeMetricFamily(
            "magnetar_bookie_client_add_latency_recent_p99_seconds",
            "99th percentile add latency per bookie over the recent window",
            labels=["bookie"],
        )
        slow = GaugeMetricFamily(
            "magnetar_bookie_client_slow",
            "1 if the bookie's recent add latency is far above the other bookies' (a slow disk or host)",
            labels=["bookie"],
        )
        for st in stats:
            bounds = [*(repr(b) for b in BUCKETS), "+Inf"]
            hist.add_metric([st.bookie], list(zip(bounds, st.buckets, strict=True)), st.total)
            if st.p50 is not None:
                p50.add_metric([st.bookie], st.p50)
            if st.p99 is not None:
                p99.add_metric([st.bookie], st.p99)
            slow.add_metric([st.bookie], 1.0 if st.slow else 0.0)
        return [hist, p50, p99, slow]
