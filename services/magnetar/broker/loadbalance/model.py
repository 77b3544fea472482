"""Load reports as brokers write them to the metadata store, in the JSON of Pulsar's
``LocalBrokerData`` (``/loadbalance/brokers/{broker}``), so ``broker-stats load-report`` reads as
Pulsar's does.

A resource is a ``ResourceUsage`` (``usage`` out of ``limit``, in the resource's unit); the shedder
and the placement strategy compare brokers by percentages of those, which is why the limit travels
with the figure. Per-bundle figures are ``BundleStats`` (Pulsar's ``NamespaceBundleStats``), keyed
by the bundle's full name ``tenant/namespace/0x00000000_0x40000000``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    usage: float = 0.0
    limit: float = 0.0

    def percent(self) -> float:
        """Usage as a percentage of the limit; 0 when the limit is unknown (never divides by zero)."""
        return 100.0 * self.usage / self.limit if self.limit > 0 else 0.0

    def to_doc(self) -> dict[str, float]:
        return {"usage": self.usage, "limit": self.limit}

    @classmethod
    def from_doc(cls, doc: Any) -> ResourceUsage:
        if not isinstance(doc, dict):
            return cls()
        return cls(float(doc.get("usage", 0.0)), float(doc.get("limit", 0.0)))


@dataclass(slots=True)
class BundleStats:
    """One bundle's traffic on its owner (Pulsar's ``NamespaceBundleStats``): rates are per second,
    throughputs in bytes per second, ``topics`` the loaded topics of the bundle."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    consumer_count: int = 0
    producer_count: int = 0
    topics: int = 0

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def sessions(self) -> int:
        return self.consumer_count + self.producer_count

    def to_doc(self) -> dict[str, Any]:
        return {
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "consumerCount": self.consumer_count,
            "producerCount": self.producer_count,
            "topics": self.topics,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> BundleStats:
        return cls(
            float(doc.get("msgRateIn", 0.0)),
            float(doc.get("msgRateOut", 0.0)),
            float(doc.get("msgThroughputIn", 0.0)),
            float(doc.get("msgThroughputOut", 0.0)),
            int(doc.get("consumerCount", 0)),
            int(doc.get("producerCount", 0)),
            int(doc.get("topics", 0)),
        )


@dataclass(slots=True)
class BrokerLoad:
    """One broker's load report (Pulsar's ``LocalBrokerData``)."""

    broker_id: str
    web_service_url: str = ""
    pulsar_service_url: str = ""
    cpu: ResourceUsage = field(default_factory=ResourceUsage)
    memory: ResourceUsage = field(default_factory=ResourceUsage)
    direct_memory: ResourceUsage = field(default_factory=ResourceUsage)
    bandwidth_in: ResourceUsage = field(default_factory=ResourceUsage)
    bandwidth_out: ResourceUsage = field(default_factory=ResourceUsage)
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    num_topics: int = 0
    num_bundles: int = 0
    num_consumers: int = 0
    num_producers: int = 0
    bundles: set[str] = field(default_factory=set)
    last_stats: dict[str, BundleStats] = field(default_factory=dict)
    last_update: int = 0  # milliseconds since the epoch
    broker_version: str = ""

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def max_resource_usage(self) -> float:
        """The highest of the five usages, as a fraction (Pulsar's ``getMaxResourceUsage``)."""
        return max(r.percent() for r in self.resources()) / 100.0

    def resources(self) -> tuple[ResourceUsage, ResourceUsage, ResourceUsage, ResourceUsage, ResourceUsage]:
        return (self.cpu, self.memory, self.direct_memory, self.bandwidth_in, self.bandwidth_out)

    def to_doc(self) -> dict[str, Any]:
        return {
            "webServiceUrl": self.web_service_url,
            "pulsarServiceUrl": self.pulsar_service_url,
            "cpu": self.cpu.to_doc(),
            "memory": self.memory.to_doc(),
            "directMemory": self.direct_memory.to_doc(),
            "bandwidthIn": self.bandwidth_in.to_doc(),
            "bandwidthOut": self.bandwidth_out.to_doc(),
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "lastUpdate": self.last_update,
            "lastStats": {name: stats.to_doc() for name, stats in sorted(self.last_stats.items())},
            "numTopics": self.num_topics,
            "numBundles": self.num_bundles,
            "numConsumers": self.num_consumers,
            "numProducers": self.num_producers,
            "bundles": sorted(self.bundles),
            "brokerVersionString": self.broker_version,
            "loadReportType": "LocalBrokerData",
            "maxResourceUsage": self.max_resource_usage(),
            # Magnetar's addition: the id the brokers know each other by (host:port).
            "brokerId": self.broker_id,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_doc()).encode()

    @classmethod
    def from_doc(cls, doc: dict[str, Any], broker_id: str | None = None) -> BrokerLoad:
        stats = doc.get("lastStats") or {}
        return cls(
            broker_id=str(broker_id if broker_id is not None else doc.get("brokerId", "")),
            web_service_url=str(doc.get("webServiceUrl", "")),
            pulsar_service_url=str(doc.get("pulsarServiceUrl", "")),
            cpu=ResourceUsage.from_doc(doc.get("cpu")),
            memory=ResourceUsage.from_doc(doc.get("memory")),
            direct_memory=ResourceUsage.from_doc(doc.get("directMemory")),
            bandwidth_in=ResourceUsage.from_doc(doc.get("bandwidthIn")),
            bandwidth_out=ResourceUsage.from_doc(doc.get("bandwidthOut")),
            msg_rate_in=float(doc.get("msgRateIn", 0.0)),
            msg_rate_out=float(doc.get("msgRateOut", 0.0)),
            msg_throughput_in=float(doc.get("msgThroughputIn", 0.0)),
            msg_throughput_out=float(doc.get("msgThroughputOut", 0.0)),
            num_topics=int(doc.get("numTopics", 0)),
            num_bundles=int(doc.get("numBundles", 0)),
            num_consumers=int(doc.get("numConsumers", 0)),
            num_producers=int(doc.get("numProducers", 0)),
            bundles={str(b) for b in doc.get("bundles") or []},
            last_stats={str(k): BundleStats.from_doc(v) for k, v in stats.items() if isinstance(v, dict)},
            last_update=int(doc.get("lastUpdate", 0)),
            broker_version=str(doc.get("brokerVersionString", "")),
        )

    @classmethod
    def from_json(cls, raw: bytes, broker_id: str | None = None) -> BrokerLoad:
        return cls.from_doc(json.loads(raw), broker_id)
