"""Prometheus metrics of a bookie.

The metric families are registered once per ``CollectorRegistry`` (registering a name twice is
an error in prometheus-client, and tests or a standalone process may run several bookies in one
interpreter), and every series carries a ``bookie`` label, so that ``bind(bookie_id)`` hands each
bookie its own children. The broker or standalone passes the registry it serves on ``/metrics``.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


@dataclass(frozen=True, slots=True)
class BoundBookieMetrics:
    """The children of one bookie. Updated from the loop and from the writer thread
    (prometheus-client metrics are thread-safe)."""

    bookie_id: str
    adds: Any
    add_failures: Any
    add_latency: Any
    add_bytes: Any
    batch_size: Any
    commit_latency: Any
    journal_batch_size: Any
    reads: Any
    read_failures: Any
    read_bytes: Any
    read_only: Any
    underreplicated_ledgers: Any
    auditor_leader: Any
    rereplicated_entries: Any
    rereplicated_ledgers: Any
    scrub_entries: Any = None
    scrub_corrupt: Any = None
    scrub_damaged: Any = None
    scrub_repaired: Any = None
    scrub_runs: Any = None

    def add_failed(self, code: str) -> None:
        self.add_failures.labels(self.bookie_id, code).inc()

    def read_failed(self, code: str) -> None:
        self.read_failures.labels(self.bookie_id, code).inc()

    def scrub_found(self, kind: str, count: int = 1) -> None:
        self.scrub_corrupt.labels(self.bookie_id, kind).inc(count)

    def lead_audits(self, count: int) -> None:
        """This bookie's auditor is the elected one: it reports the cluster's count."""
        self.auditor_leader.labels(self.bookie_id).set(1)
        self.underreplicated_ledgers.labels(self.bookie_id).set(count)

    def stop_auditing(self) -> None:
        """Drop the count series when leadership ends, so that the cluster exports exactly one
        (the current auditor's) and a summing query never double-counts a stale value."""
        self.auditor_leader.labels(self.bookie_id).set(0)
        with contextlib.suppress(KeyError):
            self.underreplicated_ledgers.remove(self.bookie_id)


class BookieMetrics:
    """The bookie's metric families in one registry; use ``BookieMetrics.for_registry``."""

    _instances: ClassVar[dict[int, BookieMetrics]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, registry: CollectorRegistry) -> None:
        label = ["bookie"]
        self.adds = Counter("magnetar_bookie_adds", "Entries durably added", label, registry=registry)
        self.add_failures = Counter(
            "magnetar_bookie_add_failures", "Adds refused or failed", [*label, "code"], registry=registry
        )
        self.add_latency = Histogram(
            "magnetar_bookie_add_latency_seconds",
            "Time from an add's arrival to its durable acknowledgement",
            label,
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.add_bytes = Counter("magnetar_bookie_add_bytes", "Payload bytes durably added", label, registry=registry)
        self.batch_size = Histogram(
            "magnetar_bookie_group_commit_batch_size",
            "Operations per group-commit write transaction",
            label,
            buckets=_BATCH_BUCKETS,
            registry=registry,
        )
        self.commit_latency = Histogram(
            "magnetar_bookie_group_commit_seconds",
            "Duration of one group-commit transaction, fsync included",
            label,
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.journal_batch_size = Histogram(
            "magnetar_bookie_journal_batch_size",
            "Writes acknowledged together after one journal sync (journal mode)",
            label,
            buckets=_BATCH_BUCKETS,
            registry=registry,
        )
        self.reads = Counter("magnetar_bookie_reads", "Entries read", label, registry=registry)
        self.read_failures = Counter(
            "magnetar_bookie_read_failures", "Reads that failed", [*label, "code"], registry=registry
        )
        self.read_bytes = Counter("magnetar_bookie_read_bytes", "Payload bytes read", label, registry=registry)
        self.read_only = Gauge(
            "magnetar_bookie_read_only",
            "1 while the bookie refuses adds (disk usage)",
            label,
            registry=registry,
        )
        self.underreplicated_ledgers = Gauge(
            "magnetar_bookie_underreplicated_ledgers",
            "Ledgers marked under-replicated; exported only by the bookie whose auditor is elected",
            label,
            registry=registry,
        )
        self.auditor_leader = Gauge(
            "magnetar_bookie_auditor_leader",
            "1 while this bookie's auditor is the elected one",
            label,
            registry=registry,
        )
        self.rereplicated_entries = Counter(
            "magnetar_bookie_rereplicated_entries",
            "Entries copied to a replacement bookie by this bookie's replication worker",
            label,
            registry=registry,
        )
        self.rereplicated_ledgers = Counter(
            "magnetar_bookie_rereplicated_ledgers",
            "Under-replicated ledgers this bookie's replication worker repaired",
            label,
            registry=registry,
        )

        self.scrub_entries = Counter(
            "magnetar_bookie_scrub_entries",
            "Entries whose stored checksums the scrubber verified",
            label,
            registry=registry,
        )
        self.scrub_corrupt = Counter(
            "magnetar_bookie_scrub_corrupt",
            "Damage the scrubber found: kind=entry (checksum), state (ledger state), missing (index lost a key), "
            "stale (a damaged copy the metadata no longer points to)",
            [*label, "kind"],
            registry=registry,
        )
        self.scrub_damaged = Gauge(
            "magnetar_bookie_scrub_damaged_entries",
            "Entries known damaged on this bookie and not yet overwritten by a repair",
            label,
            registry=registry,
        )
        self.scrub_repaired = Counter(
            "magnetar_bookie_scrub_repaired",
            "Damaged entries (or ledger states) of this bookie overwritten by a good copy",
            label,
            registry=registry,
        )
        self.scrub_runs = Counter(
            "magnetar_bookie_scrub_runs", "Complete scrubber passes over the bookie's storage", label, registry=registry
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> BookieMetrics:
        registry = REGISTRY if registry is None else registry
        with cls._lock:
            found = cls._instances.get(id(registry))
            if found is None:
                found = cls._instances[id(registry)] = cls(registry)
            return found

    def bind(self, bookie_id: str) -> BoundBookieMetrics:
        return BoundBookieMetrics(
            bookie_id=bookie_id,
            adds=self.adds.labels(bookie_id),
            add_failures=self.add_failures,
            add_latency=self.add_latency.labels(bookie_id),
            add_bytes=self.add_bytes.labels(bookie_id),
            batch_size=self.batch_size.labels(bookie_id),
            commit_latency=self.commit_latency.labels(bookie_id),
            journal_batch_size=self.journal_batch_size.labels(bookie_id),
            reads=self.reads.labels(bookie_id),
            read_failures=self.read_failures,
            read_bytes=self.read_bytes.labels(bookie_id),
            read_only=self.read_only.labels(bookie_id),
            underreplicated_ledgers=self.underreplicated_ledgers,
            auditor_leader=self.auditor_leader,
            rereplicated_entries=self.rereplicated_entries.labels(bookie_id),
            rereplicated_ledgers=self.rereplicated_ledgers.labels(bookie_id),
            scrub_entries=self.scrub_entries.labels(bookie_id),
            scrub_corrupt=self.scrub_corrupt,
            scrub_damaged=self.scrub_damaged.labels(bookie_id),
            scrub_repaired=self.scrub_repaired.labels(bookie_id),
            scrub_runs=self.scrub_runs.labels(bookie_id),
        )
