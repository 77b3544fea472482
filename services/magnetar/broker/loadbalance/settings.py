"""The load manager's settings, under Pulsar's broker.conf names and defaults.

Each field carries its broker.conf key in its metadata, so this dataclass is the one list: the
``magnetar broker`` / ``standalone`` flags, the ``--config`` file keys and the chart's values are
all derived from it (``cli/load_balancer_flags.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

THRESHOLD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
LEAST_LONG_TERM_MESSAGE_RATE = "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate"
LEAST_RESOURCE_USAGE_WITH_WEIGHT = "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight"
SPLIT_ALGORITHMS = ("range_equally_divide", "topic_count_equally_divide")


def _key(name: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"key": name, "doc": doc})


@dataclass(slots=True)
class LoadBalancerSettings:
    load_balancer_enabled: bool = _key("loadBalancerEnabled", True, "run the load manager")
    report_update_threshold_percentage: float = _key(
        "loadBalancerReportUpdateThresholdPercentage", 10.0, "a change of this many percent writes a new load report"
    )
    report_update_min_interval_millis: int = _key(
        "loadBalancerReportUpdateMinIntervalMillis", 5000, "never write load reports more often than this"
    )
    report_update_max_interval_minutes: float = _key(
        "loadBalancerReportUpdateMaxIntervalMinutes", 15.0, "write a load report at least this often"
    )
    host_usage_check_interval_minutes: float = _key(
        "loadBalancerHostUsageCheckIntervalMinutes", 1.0, "how often the broker samples its own usage"
    )
    shedding_enabled: bool = _key("loadBalancerSheddingEnabled", True, "unload bundles from overloaded brokers")
    shedding_interval_minutes: float = _key("loadBalancerSheddingIntervalMinutes", 1.0, "how often the leader sheds")
    shedding_grace_period_minutes: float = _key(
        "loadBalancerSheddingGracePeriodMinutes", 30.0, "a bundle moved is not moved again within this time"
    )
    broker_overloaded_threshold_percentage: float = _key(
        "loadBalancerBrokerOverloadedThresholdPercentage", 85.0, "a broker above this usage takes no new bundles"
    )
    broker_threshold_shedder_percentage: float = _key(
        "loadBalancerBrokerThresholdShedderPercentage", 10.0, "shed from brokers this far above the average usage"
    )
    history_resource_percentage: float = _key(
        "loadBalancerHistoryResourcePercentage", 0.9, "weight of the past in a broker's usage"
    )
    bandwidth_in_resource_weight: float = _key("loadBalancerBandwithInResourceWeight", 1.0, "weight of bandwidth in")
    bandwidth_out_resource_weight: float = _key("loadBalancerBandwithOutResourceWeight", 1.0, "weight of bandwidth out")
    cpu_resource_weight: float = _key("loadBalancerCPUResourceWeight", 1.0, "weight of CPU")
    memory_resource_weight: float = _key("loadBalancerMemoryResourceWeight", 1.0, "weight of memory")
    direct_memory_resource_weight: float = _key(
        "loadBalancerDirectMemoryResourceWeight", 1.0, "weight of direct memory"
    )
    bundle_unload_min_throughput_threshold: float = _key(
        "loadBalancerBundleUnloadMinThroughputThreshold", 10.0, "MB/s a shedding must move at least"
    )
    average_resource_usage_difference_threshold_percentage: float = _key(
        "loadBalancerAverageResourceUsageDifferenceThresholdPercentage",
        10.0,
        "placement prefers brokers this far below the average usage",
    )
    override_broker_nic_speed_gbps: float | None = _key(
        "loadBalancerOverrideBrokerNicSpeedGbps", None, "the network limit bandwidth usage is measured against"
    )
    auto_bundle_split_enabled: bool = _key("loadBalancerAutoBundleSplitEnabled", True, "split hot bundles")
    auto_unload_split_bundles_enabled: bool = _key(
        "loadBalancerAutoUnloadSplitBundlesEnabled", True, "unload the halves of a split bundle"
    )
    namespace_bundle_max_topics: int = _key("loadBalancerNamespaceBundleMaxTopics", 1000, "split above this")
    namespace_bundle_max_sessions: int = _key("loadBalancerNamespaceBundleMaxSessions", 1000, "split above this")
    namespace_bundle_max_msg_rate: float = _key("loadBalancerNamespaceBundleMaxMsgRate", 30000.0, "split above this")
    namespace_bundle_max_bandwidth_mbytes: float = _key(
        "loadBalancerNamespaceBundleMaxBandwidthMbytes", 100.0, "split above this (MB/s in + out)"
    )
    namespace_maximum_bundles: int = _key("loadBalancerNamespaceMaximumBundles", 128, "never split past this")
    default_namespace_bundle_split_algorithm: str = _key(
        "defaultNamespaceBundleSplitAlgorithm",
        "range_equally_divide",
        "range_equally_divide or topic_count_equally_divide",
    )
    load_shedding_strategy: str = _key("loadBalancerLoadSheddingStrategy", THRESHOLD_SHEDDER, "ThresholdShedder")
    load_placement_strategy: str = _key(
        "loadBalancerLoadPlacementStrategy",
        LEAST_RESOURCE_USAGE_WITH_WEIGHT,
        "LeastResourceUsageWithWeight or LeastLongTermMessageRate",
    )


def keys() -> dict[str, str]:
    """broker.conf key -> field name, for every setting above."""
    return {f.metadata["key"]: f.name for f in fields(LoadBalancerSettings)}
