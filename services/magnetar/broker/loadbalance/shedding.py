"""Which bundles the leader unloads, by Pulsar's ``ThresholdShedder``.

Every broker's usage (``broker_usage``: weighted, smoothed) is compared with the cluster's average.
A broker more than ``loadBalancerBrokerThresholdShedderPercentage`` points above it sheds its
busiest bundles until the throughput taken off covers its excess plus a 5-point margin; the margin
is what keeps a broker that was just brought back from crossing the line again on the next tick.
Shedding little is not worth a move (clients reconnect), hence the minimum throughput; moving a
bundle twice in a row is churn, hence the grace period; and a broker's only bundle cannot be
helped by a move (it would only overload another broker), hence never that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.broker.loadbalance.broker_usage import UsageHistory
from magnetar.broker.loadbalance.model import BrokerLoad
from magnetar.broker.loadbalance.settings import LoadBalancerSettings

MB = 1024.0 * 1024.0
# Shed down to this much below the threshold line, as Pulsar does.
ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05

# Why a broker was or was not shed from (the names of Pulsar's unload decision reasons).
OVERLOADED = "Overloaded"
BALANCED = "Balanced"
NO_BUNDLES = "NoBundles"
SOLE_BUNDLE = "SoleBundle"
COOL_DOWN = "CoolDown"
TOO_LITTLE = "BelowMinThroughput"
NO_BROKERS = "NoBrokers"
NO_LOAD_DATA = "NoLoadData"


@dataclass(frozen=True, slots=True)
class Unload:
    """One bundle to unload from its broker, and the figures that decided it (for stats and logs)."""

    bundle: str
    broker: str
    reason: str
    broker_usage: float  # the broker's smoothed usage, a fraction
    average_usage: float  # the cluster's average of those
    throughput: float  # the bundle's bytes/s in + out


@dataclass(slots=True)
class SheddingPlan:
    unloads: list[Unload] = field(default_factory=list)
    # broker -> why nothing was shed from it (brokers shed from are in ``unloads``)
    skipped: dict[str, str] = field(default_factory=dict)
    average_usage: float = 0.0

    def pairs(self) -> list[tuple[str, str]]:
        """``(bundle, broker)`` for each unload, in the order chosen."""
        return [(u.bundle, u.broker) for u in self.unloads]


def in_grace_period(
    bundle: str, recently_unloaded: Mapping[str, int], now_ms: int, settings: LoadBalancerSettings
) -> bool:
    """Whether a bundle was unloaded less than ``loadBalancerSheddingGracePeriodMinutes`` ago."""
    at = recently_unloaded.get(bundle)
    return at is not None and now_ms - at < settings.shedding_grace_period_minutes * 60_000


def bundle_throughputs(load: BrokerLoad) -> dict[str, float]:
    """Each bundle of a report with its throughput (0 for a listed bundle without stats yet)."""
    out = {bundle: 0.0 for bundle in load.bundles}
    for bundle, stats in load.last_stats.items():
        out[bundle] = stats.throughput
    return out


class ThresholdShedder:
    """Keeps the usage history between ticks; call ``find_bundles_to_unload`` once per tick."""

    def __init__(self, history: UsageHistory | None = None) -> None:
        self.history = history if history is not None else UsageHistory()

    def find_bundles_to_unload(
        self,
        reports: Mapping[str, BrokerLoad],
        settings: LoadBalancerSettings,
        now_ms: int,
        recently_unloaded: Mapping[str, int] | None = None,
    ) -> SheddingPlan:
        recent = recently_unloaded or {}
        usages = self.history.observe(reports, settings)
        plan = SheddingPlan()
        if len(reports) < 2:
            # Nowhere to move a bundle to.
            plan.skipped = dict.fromkeys(reports, NO_BROKERS)
            return plan
        average = sum(usages.values()) / len(usages)
        plan.average_usage = average
        if average == 0.0:
            plan.skipped = dict.fromkeys(reports, NO_LOAD_DATA)
            return plan
        threshold = settings.broker_threshold_shedder_percentage / 100.0
        min_throughput = settings.bundle_unload_min_throughput_threshold * MB
        for broker in sorted(reports):
            load = reports[broker]
            usage = usages[broker]
            if usage < average + threshold:
                plan.skipped[broker] = BALANCED
                continue
            to_offload = load.throughput * (usage - average - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN)
            if to_offload < min_throughput:
                plan.skipped[broker] = TOO_LITTLE
                continue
            bundles = bundle_throughputs(load)
            if not bundles:
                plan.skipped[broker] = NO_BUNDLES
                continue
            if len(bundles) == 1:
                plan.skipped[broker] = SOLE_BUNDLE
                continue
            movable = [(b, t) for b, t in bundles.items() if not in_grace_period(b, recent, now_ms, settings)]
            if not movable:
                plan.skipped[broker] = COOL_DOWN
                continue
            # Busiest first; ties by name so every run picks the same.
            movable.sort(key=lambda bt: (-bt[1], bt[0]))
            marked = 0.0
            for n, (bundle, throughput) in enumerate(movable):
                if n > 0 and marked >= to_offload:
                    break
                plan.unloads.append(Unload(bundle, broker, OVERLOADED, usage, average, throughput))
                marked += throughput
        return plan
