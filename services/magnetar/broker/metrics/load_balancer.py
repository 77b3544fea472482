"""The load manager's Prometheus metrics, Pulsar's load-balancing names with Magnetar's prefix.

Read at scrape time from the load manager (broker/cluster/load_manager.py):

- this broker's usage in percent of its limit, from its last load report:
  ``magnetar_lb_cpu_usage``, ``magnetar_lb_memory_usage``, ``magnetar_lb_directMemory_usage``,
  ``magnetar_lb_bandwidth_in_usage``, ``magnetar_lb_bandwidth_out_usage`` (Pulsar's ``pulsar_lb_*``);
- the leader's decisions: ``magnetar_lb_unload_bundle_total``, ``magnetar_lb_unload_broker_total``
  (brokers shed from, counted once per round) and ``magnetar_lb_bundles_split_total``; 0 on the
  other brokers, which decide nothing;
- per bundle this broker serves (label ``bundle``): ``magnetar_bundle_msg_rate_in`` / ``_out``,
  ``magnetar_bundle_msg_throughput_in`` / ``_out``, ``magnetar_bundle_topics_count``,
  ``magnetar_bundle_consumer_count``, ``magnetar_bundle_producer_count`` (Pulsar's ``pulsar_bundle_*``);
- ``magnetar_lb_leader`` (Magnetar's): 1 on the leader, so a dashboard finds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from magnetar.broker.cluster.load_manager import LoadManager

__all__ = ["LoadBalancerCollector"]


class LoadBalancerCollector(Collector):
    def __init__(self, manager: LoadManager) -> None:
        self._manager = manager

    def collect(self) -> Iterable[Metric]:
        m = self._manager
        report = m.reports.written
        out: list[Metric] = []
        if report is not None:
            for name, usage in (
                ("cpu", report.cpu),
                ("memory", report.memory),
                ("directMemory", report.direct_memory),
                ("bandwidth_in", report.bandwidth_in),
                ("bandwidth_out", report.bandwidth_out),
            ):
                gauge = GaugeMetricFamily(
                    f"magnetar_lb_{name}_usage", f"This broker's {name} usage, percent of its limit"
                )
                gauge.add_metric([], usage.percent())
                out.append(gauge)
        for name, value, text in (
            ("unload_bundle", m.unloaded_bundles, "Bundles the leader unloaded from overloaded brokers"),
            ("unload_broker", m.unloaded_brokers, "Brokers the leader shed bundles from (once per round)"),
            ("bundles_split", m.splits, "Bundles the leader split"),
        ):
            counter = CounterMetricFamily(f"magnetar_lb_{name}", text)
            counter.add_metric([], value)
            out.append(counter)
        leader = GaugeMetricFamily("magnetar_lb_leader", "1 if this broker is the load manager's leader")
        leader.add_metric([], 1.0 if m.election.is_leader else 0.0)
        out.append(leader)
        families = {
            "msg_rate_in": GaugeMetricFamily("magnetar_bundle_msg_rate_in", "Messages/s in", labels=["bundle"]),
            "msg_rate_out": GaugeMetricFamily("magnetar_bundle_msg_rate_out", "Messages/s out", labels=["bundle"]),
            "msg_throughput_in": GaugeMetricFamily(
                "magnetar_bundle_msg_throughput_in", "Bytes/s in", labels=["bundle"]
            ),
            "msg_throughput_out": GaugeMetricFamily(
                "magnetar_bundle_msg_throughput_out", "Bytes/s out", labels=["bundle"]
            ),
            "topics": GaugeMetricFamily("magnetar_bundle_topics_count", "Loaded topics", labels=["bundle"]),
            "consumer_count": GaugeMetricFamily("magnetar_bundle_consumer_count", "Consumers", labels=["bundle"]),
            "producer_count": GaugeMetricFamily("magnetar_bundle_producer_count", "Producers", labels=["bundle"]),
        }
        if report is not None:
            for bundle, stats in sorted(report.last_stats.items()):
                for attr, family in families.items():
                    family.add_metric([bundle], float(getattr(stats, attr)))
        out.extend(families.values())
        return out
