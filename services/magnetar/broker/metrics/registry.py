"""Broker Prometheus metrics, named in Pulsar's ``pulsar_*`` style with a ``magnetar_`` prefix."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from magnetar.ledger.bookie_latency import BOOKIE_LATENCY, BUCKETS, BookieLatency
from magnetar.managed_ledger.clock import POLICY_CLOCK, GuardedClock


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
        # Per-topic and per-subscription families (topics, storage, backlog, rates, rate-limit
        # events, drop rates) are read from the loaded topics at scrape time: metrics/topics.py.
        # The time connections spent paused by publish rate limits (rate_limit.py):
        self.publish_throttled_seconds = Counter(
            "magnetar_broker_publish_throttled_seconds",
            "Seconds connections spent with reading paused by publish rate limits",
            registry=r,
        )
        # Non-persistent topics: messages dropped for subscriptions whose consumers had no permits.
        self.msgs_dropped = Counter(
            "magnetar_broker_messages_dropped",
            "Non-persistent messages dropped (no consumer could take them)",
            registry=r,
        )
        # Per-bookie add latency as this broker's ledger writers see it, and which bookie is slow
        # (ledger/bookie_latency.py): read at scrape time.
        r.register(BookieLatencyCollector(BOOKIE_LATENCY))
        # The clock TTL, retention and delayed delivery age data by (managed_ledger/clock.py).
        r.register(ClockCollector(POLICY_CLOCK))


class ClockCollector(Collector):
    """The guarded policy clock at scrape time: ``magnetar_broker_clock_steps_total``, the steps of
    the wall clock it saw and did not follow, and ``magnetar_broker_clock_offset_seconds``, how far
    the wall clock is from the time data is aged by (0 in step; it shrinks as the guard slews). An
    operator alerting on the first sees a stepped clock before anyone asks why a TTL looked off."""

    def __init__(self, clock: GuardedClock) -> None:
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        self._clock.now()  # a reading brings the offset up to date
        steps = CounterMetricFamily(
            "magnetar_broker_clock_steps",
            "Steps of the wall clock seen and not followed for TTL, retention and delayed delivery",
        )
        steps.add_metric([], self._clock.jumps)
        offset = GaugeMetricFamily(
            "magnetar_broker_clock_offset_seconds",
            "Wall clock minus the guarded time that TTL, retention and delayed delivery age data by",
        )
        offset.add_metric([], self._clock.offset)
        return [steps, offset]


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
