"""A broker's usage as the shedder and the placement strategy see it: the highest of its five
resources, each weighted, smoothed over time.

One computation for both, so the leader never unloads a bundle from a broker that placement would
pick again at once: both rank brokers by the same figure. The smoothing is Pulsar's: each tick
keeps ``loadBalancerHistoryResourcePercentage`` of the old figure and adds the rest of the new one,
so a short spike neither sheds load nor repels new bundles.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.broker.loadbalance.model import BrokerLoad
from magnetar.broker.loadbalance.settings import LoadBalancerSettings


def weighted_max_usage(load: BrokerLoad, settings: LoadBalancerSettings) -> float:
    """The highest weighted resource usage of one report, as a fraction (1.0 = full).

    A resource over 100% means its limit is wrong (a NIC speed guessed too low, say): such signals
    are left out, as Pulsar does, rather than letting one misconfigured limit mark the broker full."""
    weights = (
        settings.cpu_resource_weight,
        settings.memory_resource_weight,
        settings.direct_memory_resource_weight,
        settings.bandwidth_in_resource_weight,
        settings.bandwidth_out_resource_weight,
    )
    weighted = [r.percent() * w / 100.0 for r, w in zip(load.resources(), weights, strict=True)]
    best = max(weighted)
    if best > 1.0:
        best = max((u for u, r in zip(weighted, load.resources(), strict=True) if r.percent() <= 100.0), default=0.0)
    return best


def _is_idle(load: BrokerLoad) -> bool:
    return (not load.bundles and not load.last_stats) or load.msg_rate == 0.0


class UsageHistory:
    """The time-weighted usage of each broker, folded in once per load-manager tick.

    A broker that reports no bundles or no traffic starts again from its current usage (it has
    restarted, or everything was moved away): carrying its old figure would keep new bundles off an
    empty broker for many ticks."""

    def __init__(self) -> None:
        self._usage: dict[str, float] = {}

    def observe(self, reports: Mapping[str, BrokerLoad], settings: LoadBalancerSettings) -> dict[str, float]:
        """Fold one set of reports in; brokers without a report are forgotten. Returns the figures."""
        keep = settings.history_resource_percentage
        updated: dict[str, float] = {}
        for broker, load in reports.items():
            current = weighted_max_usage(load, settings)
            previous = self._usage.get(broker)
            if previous is None or _is_idle(load):
                updated[broker] = current
            else:
                updated[broker] = previous * keep + (1.0 - keep) * current
        self._usage = updated
        return dict(updated)

    def usage(self, broker: str) -> float | None:
        return self._usage.get(broker)

    def snapshot(self) -> dict[str, float]:
        return dict(self._usage)
