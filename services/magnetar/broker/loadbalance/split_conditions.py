"""Which bundles the leader splits, by Pulsar's ``BundleSplitterTask``.

A bundle is split when it holds more than ``loadBalancerNamespaceBundleMaxTopics`` topics, more
than ``...MaxSessions`` producers and consumers (0 = no limit), more than ``...MaxMsgRate`` messages
per second in and out, or more than ``...MaxBandwidthMbytes`` MB/s in and out: past those one
bundle is more than one broker should carry, and only a split lets part of it move. A namespace
stops splitting at ``loadBalancerNamespaceMaximumBundles``, counting the splits decided in the same
pass; and a bundle of one topic is never split, since both halves but one would be empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats
from magnetar.broker.loadbalance.settings import LoadBalancerSettings

MB = 1024.0 * 1024.0

TOPICS = "topics"
SESSIONS = "sessions"
MSG_RATE = "msgRate"
BANDWIDTH = "bandwidth"


@dataclass(frozen=True, slots=True)
class Split:
    bundle: str
    broker: str  # its owner, where the split runs
    reason: str  # the first limit it is over: topics, sessions, msgRate or bandwidth


def namespace_of(bundle: str) -> str:
    """``tenant/namespace`` of a bundle's full name ``tenant/namespace/0x00000000_0x40000000``."""
    return bundle.rsplit("/", 1)[0]


def over_limit(stats: BundleStats, settings: LoadBalancerSettings) -> str | None:
    """The first split limit a bundle is over, or None."""
    if stats.topics > settings.namespace_bundle_max_topics:
        return TOPICS
    if settings.namespace_bundle_max_sessions > 0 and stats.sessions > settings.namespace_bundle_max_sessions:
        return SESSIONS
    if stats.msg_rate > settings.namespace_bundle_max_msg_rate:
        return MSG_RATE
    if stats.throughput > settings.namespace_bundle_max_bandwidth_mbytes * MB:
        return BANDWIDTH
    return None


def _busiest_first(item: tuple[str, tuple[BundleStats, str, str]]) -> tuple[float, float, int, str]:
    bundle, (stats, _, _) = item
    return (-stats.throughput, -stats.msg_rate, -stats.topics, bundle)


def find_bundles_to_split(
    reports: Mapping[str, BrokerLoad],
    settings: LoadBalancerSettings,
    bundle_counts: Mapping[str, int],
) -> list[Split]:
    """The bundles to split now, busiest first (so under the namespace limit the hottest go first).

    ``bundle_counts`` is namespace -> its current number of bundles; a namespace missing from it
    counts the bundles the reports show for it."""
    seen: dict[str, int] = {}
    hot: dict[str, tuple[BundleStats, str, str]] = {}
    for broker in sorted(reports):
        for bundle, stats in reports[broker].last_stats.items():
            seen[namespace_of(bundle)] = seen.get(namespace_of(bundle), 0) + 1
            if bundle in hot or stats.topics < 2:
                continue
            reason = over_limit(stats, settings)
            if reason is not None:
                hot[bundle] = (stats, broker, reason)
    splits: list[Split] = []
    added: dict[str, int] = {}
    for bundle, (_, broker, reason) in sorted(hot.items(), key=_busiest_first):
        namespace = namespace_of(bundle)
        count = bundle_counts.get(namespace, seen.get(namespace, 1)) + added.get(namespace, 0)
        if count >= settings.namespace_maximum_bundles:
            continue
        splits.append(Split(bundle, broker, reason))
        added[namespace] = added.get(namespace, 0) + 1
    return splits
