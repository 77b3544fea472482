"""ThresholdShedder: each test breaks if the rule it names were left out of ``shedding.py``."""

from __future__ import annotations

from dataclasses import replace

from magnetar.broker.loadbalance.broker_usage import UsageHistory, weighted_max_usage
from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats, ResourceUsage
from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.broker.loadbalance.shedding import (
    BALANCED,
    COOL_DOWN,
    NO_BROKERS,
    SOLE_BUNDLE,
    TOO_LITTLE,
    ThresholdShedder,
)

MB = 1024 * 1024
NOW = 10_000_000_000
SETTINGS = LoadBalancerSettings()


def report(broker: str, cpu: float, bundles_mb: dict[str, float] | None = None) -> BrokerLoad:
    """A broker at ``cpu`` percent whose bundles carry the given MB/s (named ``t/ns/<key>``)."""
    stats = {
        f"t/ns/{name}": BundleStats(msg_rate_in=100.0, msg_throughput_in=mb * MB, topics=2)
        for name, mb in (bundles_mb or {}).items()
    }
    return BrokerLoad(
        broker,
        cpu=ResourceUsage(cpu, 100.0),
        msg_rate_in=100.0 * len(stats),
        msg_throughput_in=sum(s.msg_throughput_in for s in stats.values()),
        bundles=set(stats),
        last_stats=stats,
    )


def light(broker: str, cpu: float) -> BrokerLoad:
    return report(broker, cpu, {f"{broker}-x": 1.0, f"{broker}-y": 1.0})


def test_a_broker_above_average_plus_threshold_sheds_its_busiest_bundles_until_enough() -> None:
    # average (90 + 10 + 20) / 3 = 40%; a is over 40 + 10: shed 200 MB/s x (0.9 - 0.4 - 0.1 + 0.05) = 90 MB/s
    reports = {
        "a": report("a", 90, {"b20": 20, "b60": 60, "b30": 30, "b50": 50, "b40": 40}),
        "b": light("b", 10),
        "c": light("c", 20),
    }
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW)
    assert plan.pairs() == [("t/ns/b60", "a"), ("t/ns/b50", "a")]
    assert plan.skipped == {"b": BALANCED, "c": BALANCED}
    assert abs(plan.average_usage - 0.4) < 1e-9


def test_the_five_point_margin_takes_off_more_than_the_excess() -> None:
    # average 30%, line 40%: the excess alone is 0.2 x 200 = 40 MB/s (one 45 MB/s bundle), with the
    # margin 0.25 x 200 = 50 MB/s: two bundles
    reports = {
        "a": report("a", 60, {"b1": 45, "b2": 45, "b3": 40, "b4": 40, "b5": 30}),
        "b": light("b", 20),
        "c": light("c", 10),
    }
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW)
    assert [b for b, _ in plan.pairs()] == ["t/ns/b1", "t/ns/b2"]


def test_a_broker_less_than_the_threshold_above_average_keeps_its_bundles() -> None:
    # average (44 + 30 + 31) / 3 = 35%; a is 9 points over it, under the 10-point threshold
    reports = {"a": report("a", 44, {"b1": 100, "b2": 100}), "b": light("b", 30), "c": light("c", 31)}
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW)
    assert plan.unloads == []
    assert plan.skipped["a"] == BALANCED


def test_history_weighting_ignores_a_one_tick_spike_but_not_a_lasting_one() -> None:
    shedder = ThresholdShedder()
    calm = {"a": report("a", 30, {"b1": 100, "b2": 100}), "b": light("b", 30), "c": light("c", 30)}
    assert shedder.find_bundles_to_unload(calm, SETTINGS, NOW).unloads == []
    hot = dict(calm, a=report("a", 90, {"b1": 100, "b2": 100}))
    # smoothed: 0.9 x 30% + 0.1 x 90% = 36%, average 32%: not over 42%
    assert shedder.find_bundles_to_unload(hot, SETTINGS, NOW).unloads == []
    for _ in range(20):
        plan = shedder.find_bundles_to_unload(hot, SETTINGS, NOW)
    assert plan.pairs() == [("t/ns/b1", "a")]


def test_a_resource_with_weight_zero_does_not_count() -> None:
    reports = {"a": report("a", 90, {"b1": 100, "b2": 100}), "b": light("b", 10), "c": light("c", 10)}
    assert ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW).unloads != []
    no_cpu = replace(SETTINGS, cpu_resource_weight=0.0)
    plan = ThresholdShedder().find_bundles_to_unload(reports, no_cpu, NOW)
    assert plan.unloads == []


def test_less_than_the_minimum_throughput_is_not_worth_a_move() -> None:
    # 0.45 x 10 MB/s = 4.5 MB/s to shed, under the default 10 MB/s
    reports = {"a": report("a", 90, {"b1": 5, "b2": 5}), "b": light("b", 10), "c": light("c", 20)}
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW)
    assert plan.unloads == [] and plan.skipped["a"] == TOO_LITTLE
    low = replace(SETTINGS, bundle_unload_min_throughput_threshold=1.0)
    assert ThresholdShedder().find_bundles_to_unload(reports, low, NOW).pairs() == [("t/ns/b1", "a")]


def test_a_bundle_unloaded_within_the_grace_period_stays() -> None:
    reports = {"a": report("a", 90, {"b1": 100, "b2": 50, "b3": 50}), "b": light("b", 10), "c": light("c", 20)}
    ten_minutes_ago = {"t/ns/b1": NOW - 10 * 60_000}
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW, ten_minutes_ago)
    assert "t/ns/b1" not in [b for b, _ in plan.pairs()]
    assert plan.pairs()[0] == ("t/ns/b2", "a")
    long_ago = {"t/ns/b1": NOW - 31 * 60_000}
    assert ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW, long_ago).pairs()[0] == ("t/ns/b1", "a")
    all_recent = dict.fromkeys(reports["a"].bundles, NOW - 60_000)
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW, all_recent)
    assert plan.unloads == [] and plan.skipped["a"] == COOL_DOWN


def test_a_broker_s_only_bundle_is_never_shed() -> None:
    reports = {"a": report("a", 95, {"b1": 500}), "b": light("b", 10), "c": light("c", 10)}
    plan = ThresholdShedder().find_bundles_to_unload(reports, SETTINGS, NOW)
    assert plan.unloads == [] and plan.skipped["a"] == SOLE_BUNDLE


def test_one_broker_alone_sheds_nothing() -> None:
    plan = ThresholdShedder().find_bundles_to_unload({"a": report("a", 99, {"b1": 100, "b2": 100})}, SETTINGS, NOW)
    assert plan.unloads == [] and plan.skipped == {"a": NO_BROKERS}


def test_a_usage_over_its_limit_is_left_out_of_the_maximum() -> None:
    load = BrokerLoad("a", cpu=ResourceUsage(30, 100), bandwidth_in=ResourceUsage(300, 100))
    assert abs(weighted_max_usage(load, SETTINGS) - 0.3) < 1e-9


def test_an_emptied_broker_starts_its_history_again() -> None:
    history = UsageHistory()
    for _ in range(5):
        history.observe({"a": light("a", 90)}, SETTINGS)
    history.observe({"a": BrokerLoad("a", cpu=ResourceUsage(5, 100))}, SETTINGS)
    assert history.usage("a") == 0.05
    history.observe({"b": light("b", 10)}, SETTINGS)
    assert history.usage("a") is None
