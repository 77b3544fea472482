"""Where an unowned bundle goes, by Pulsar's ``LeastResourceUsageWithWeight``.

The candidates are the brokers whose usage (``broker_usage``: the same smoothed, weighted figure
the shedder uses) is at least ``loadBalancerAverageResourceUsageDifferenceThresholdPercentage``
points below the candidates' average; if none is, every broker not over
``loadBalancerBrokerOverloadedThresholdPercentage``; if every one is, all of them.

Among the candidates Pulsar picks at random. Here the pick is the highest hash of bundle and broker
instead: as spread out as random over many bundles, but every broker computes the same answer for
the same bundle and reports, so two brokers asked about one bundle at once agree.

Reports lag: a broker that took ten bundles a second ago still reports its old usage, and a burst
of new bundles would all go to the one that looked emptiest. So the bundles assigned since the
reports can be given, and each adds its expected usage to its broker before the choice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence

from magnetar.broker.loadbalance.broker_usage import weighted_max_usage
from magnetar.broker.loadbalance.model import BrokerLoad
from magnetar.broker.loadbalance.settings import LEAST_LONG_TERM_MESSAGE_RATE, LoadBalancerSettings


def score(bundle: str, broker: str) -> int:
    """The tie-break among equally good brokers: a cryptographic hash, so a namespace's bundles do
    not all prefer the same broker (a linear hash like CRC would make them)."""
    return int.from_bytes(hashlib.blake2b(f"{bundle}|{broker}".encode(), digest_size=8).digest(), "big")


class LeastResourceUsageWithWeight:
    """The placement figures of one set of reports, computed once and then asked per bundle.

    ``history`` is broker -> smoothed usage (``UsageHistory.snapshot()``); a broker missing from it
    counts at its current report, one without a report as idle."""

    def __init__(
        self,
        reports: Mapping[str, BrokerLoad],
        settings: LoadBalancerSettings,
        history: Mapping[str, float] | None = None,
    ) -> None:
        self.reports = reports
        self.settings = settings
        past = history or {}
        now = {broker: weighted_max_usage(load, settings) for broker, load in reports.items()}
        self._usage = {broker: past.get(broker, now[broker]) for broker in reports}
        self._current = {broker: load.max_resource_usage() for broker, load in reports.items()}
        total_usage = sum(now.values())
        total_throughput = sum(load.throughput for load in reports.values())
        total_bundles = sum(len(load.bundles | load.last_stats.keys()) for load in reports.values())
        self._per_byte = total_usage / total_throughput if total_throughput > 0 else 0.0
        self._per_bundle = total_usage / total_bundles if total_bundles else 0.0
        self._throughput = {b: st.throughput for load in reports.values() for b, st in load.last_stats.items()}

    def expected_usage(self, bundle: str) -> float:
        """The usage (a fraction of one broker) a bundle is expected to add where it lands.

        A bundle some report still lists is priced by its throughput at the cluster's usage per
        byte/s; an unknown one (new, or its owner gone) at the cluster's average usage per bundle."""
        throughput = self._throughput.get(bundle)
        if throughput is not None and self._per_byte > 0:
            return throughput * self._per_byte
        return self._per_bundle

    def _assigned_usage(self, broker: str, bundles: Collection[str]) -> float:
        load = self.reports.get(broker)
        listed = (load.bundles | load.last_stats.keys()) if load is not None else set()
        return sum(self.expected_usage(b) for b in bundles if b not in listed)

    def select(
        self, candidates: Sequence[str], bundle: str, assigned: Mapping[str, Collection[str]] | None = None
    ) -> str | None:
        """The broker among ``candidates`` (live brokers allowed to own ``bundle``) to place it on;
        ``assigned`` is broker -> bundles given to it since its report. None without candidates."""
        if not candidates:
            return None
        recent = assigned or {}
        usage: dict[str, float] = {}
        current: dict[str, float] = {}
        for broker in candidates:
            extra = self._assigned_usage(broker, recent[broker]) if broker in recent else 0.0
            usage[broker] = self._usage.get(broker, 0.0) + extra
            current[broker] = self._current.get(broker, 0.0) + extra
        average = sum(usage.values()) / len(usage)
        difference = self.settings.average_resource_usage_difference_threshold_percentage / 100.0
        best = [b for b in candidates if usage[b] + difference <= average]
        if not best:
            overloaded = self.settings.broker_overloaded_threshold_percentage / 100.0
            best = [b for b in candidates if current[b] <= overloaded]
        if not best:
            best = list(candidates)
        return max(best, key=lambda b: score(bundle, b))


class LeastLongTermMessageRate:
    """Pulsar's ``LeastLongTermMessageRate``, its default placement: the broker with the lowest
    message rate (in + out) of its bundles, a broker over
    ``loadBalancerBrokerOverloadedThresholdPercentage`` only when every one is. Reports carry one
    rate per bundle rather than Pulsar's long-term averages, so the reported rate stands for them.
    Bundles assigned since the reports add their last reported rate (nothing for a new one, as in
    Pulsar); equal rates are broken by the same hash as ``LeastResourceUsageWithWeight``."""

    def __init__(
        self,
        reports: Mapping[str, BrokerLoad],
        settings: LoadBalancerSettings,
        history: Mapping[str, float] | None = None,
    ) -> None:
        del history  # the same constructor as LeastResourceUsageWithWeight; rates need no smoothing here
        self.reports = reports
        self.settings = settings
        self._rate = {b: st.msg_rate for load in reports.values() for b, st in load.last_stats.items()}

    def _score(self, broker: str, recent: Collection[str]) -> float:
        load = self.reports.get(broker)
        if load is None:
            return 0.0  # no report yet: a broker that has just joined is idle
        if load.max_resource_usage() > self.settings.broker_overloaded_threshold_percentage / 100.0:
            return float("inf")
        listed = load.bundles | load.last_stats.keys()
        return load.msg_rate + sum(self._rate.get(b, 0.0) for b in recent if b not in listed)

    def select(
        self, candidates: Sequence[str], bundle: str, assigned: Mapping[str, Collection[str]] | None = None
    ) -> str | None:
        """As ``LeastResourceUsageWithWeight.select``."""
        if not candidates:
            return None
        recent = assigned or {}
        scores = {b: self._score(b, recent.get(b, ())) for b in candidates}
        finite = [b for b in candidates if scores[b] != float("inf")]
        if finite:
            lowest = min(scores[b] for b in finite)
            best = [b for b in finite if scores[b] == lowest]
        else:  # every candidate overloaded: any of them
            best = list(candidates)
        return max(best, key=lambda b: score(bundle, b))


PlacementStrategy = LeastResourceUsageWithWeight | LeastLongTermMessageRate


def strategy_for(
    name: str,
    reports: Mapping[str, BrokerLoad],
    settings: LoadBalancerSettings,
    history: Mapping[str, float] | None = None,
) -> PlacementStrategy:
    """The placement of ``loadBalancerLoadPlacementStrategy`` (a class name of settings.py)."""
    if name == LEAST_LONG_TERM_MESSAGE_RATE:
        return LeastLongTermMessageRate(reports, settings, history)
    return LeastResourceUsageWithWeight(reports, settings, history)


def select_broker(
    candidates: Sequence[str],
    bundle: str,
    reports: Mapping[str, BrokerLoad],
    settings: LoadBalancerSettings,
    history: Mapping[str, float] | None = None,
    assigned: Mapping[str, Collection[str]] | None = None,
) -> str | None:
    """One placement (see ``LeastResourceUsageWithWeight``); for many, build that once."""
    return LeastResourceUsageWithWeight(reports, settings, history).select(candidates, bundle, assigned)
