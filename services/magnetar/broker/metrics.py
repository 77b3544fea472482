"""Broker Prometheus metrics, named in Pulsar's ``pulsar_*`` style with a ``magnetar_`` prefix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

if TYPE_CHECKING:
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

    def update(self, topics: Mapping[str, PersistentTopic]) -> None:
        """Refresh the per-topic gauges from the broker's loaded topics (called once a second)."""
        self.topics.set(len(topics))
        for name, topic in topics.items():
            self.storage.labels(name).set(topic.ml.total_size)
            self.rate_in.labels(name).set(topic.rate_in.msg_rate)
            self.rate_out.labels(name).set(topic.rate_out.msg_rate)
            for sub_name, sub in topic.subscriptions.items():
                self.backlog.labels(name, sub_name).set(sub.cursor.backlog)
