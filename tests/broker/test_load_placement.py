"""LeastResourceUsageWithWeight placement: each test breaks if the rule it names were left out."""

from __future__ import annotations

from collections import Counter

from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats, ResourceUsage
from magnetar.broker.loadbalance.placement import (
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    select_broker,
    strategy_for,
)
from magnetar.broker.loadbalance.settings import LEAST_LONG_TERM_MESSAGE_RATE, LoadBalancerSettings

SETTINGS = LoadBalancerSettings()
BUNDLES = [f"t/ns{i % 7}/0x{i:08x}_0x{i + 1:08x}" for i in range(400)]


def report(broker: str, cpu: float, bundles: int = 20, throughput: float = 1000.0) -> BrokerLoad:
    stats = {f"{broker}/held/{i}": BundleStats(msg_rate_in=10.0, msg_throughput_in=throughput) for i in range(bundles)}
    return BrokerLoad(
        broker,
        cpu=ResourceUsage(cpu, 100.0),
        msg_rate_in=10.0 * bundles,
        msg_throughput_in=throughput * bundles,
        bundles=set(stats),
        last_stats=stats,
    )


def placed(
    reports: dict[str, BrokerLoad], candidates: list[str] | None = None, history: dict[str, float] | None = None
) -> Counter[str | None]:
    chooser = LeastResourceUsageWithWeight(reports, SETTINGS, history)
    return Counter(chooser.select(candidates or list(reports), b) for b in BUNDLES)


def test_only_brokers_below_the_average_by_the_difference_threshold_are_chosen() -> None:
    # average 62.5%: only a (10% + 10 <= 62.5) qualifies, d at 60% does not
    reports = {"a": report("a", 10), "b": report("b", 80), "c": report("c", 100), "d": report("d", 60)}
    assert placed(reports) == {"a": len(BUNDLES)}


def test_a_broker_without_a_report_counts_as_idle() -> None:
    reports = {"a": report("a", 50), "b": report("b", 50), "c": report("c", 50)}
    assert placed(reports, ["a", "b", "c", "new"]) == {"new": len(BUNDLES)}


def test_when_none_is_below_average_an_overloaded_broker_is_left_out() -> None:
    # average 83.3%: none 10 points under it; c is over the 85% overload line
    reports = {"a": report("a", 80), "b": report("b", 84), "c": report("c", 86)}
    counts = placed(reports)
    assert counts["c"] == 0 and counts["a"] > 0 and counts["b"] > 0


def test_when_all_are_overloaded_all_share() -> None:
    reports = {"a": report("a", 90), "b": report("b", 95), "c": report("c", 99)}
    assert set(placed(reports)) == {"a", "b", "c"}


def test_the_choice_is_the_same_for_a_bundle_whatever_the_order_and_spreads_over_bundles() -> None:
    reports = {name: report(name, 40) for name in "abcd"}
    forward = [select_broker(list("abcd"), b, reports, SETTINGS) for b in BUNDLES]
    backward = [select_broker(list("dcba"), b, reports, SETTINGS) for b in BUNDLES]
    assert forward == backward
    counts = Counter(forward)
    assert set(counts) == set("abcd") and min(counts.values()) > len(BUNDLES) // 8


def test_the_smoothed_history_wins_over_the_last_report() -> None:
    reports = {"a": report("a", 10), "b": report("b", 50), "c": report("c", 50)}
    assert placed(reports) == {"a": len(BUNDLES)}
    # a's figure over time is high (it was just emptied by a spike, say): b and c share instead
    counts = placed(reports, history={"a": 0.9, "b": 0.4, "c": 0.4})
    assert counts["a"] == 0


def test_bundles_assigned_since_the_reports_spread_a_burst() -> None:
    reports = {"a": report("a", 10), "b": report("b", 40), "c": report("c", 40), "d": report("d", 40)}
    chooser = LeastResourceUsageWithWeight(reports, SETTINGS)
    assigned: dict[str, list[str]] = {}
    for bundle in BUNDLES[:60]:
        broker = chooser.select(list(reports), bundle, assigned)
        assert broker is not None
        assigned.setdefault(broker, []).append(bundle)
    # a first, until its expected usage reaches the others'; then all share
    assert 5 < len(assigned["a"]) < 40
    assert {"b", "c", "d"} <= set(assigned)
    blind = Counter(chooser.select(list(reports), b) for b in BUNDLES[:60])
    assert blind == {"a": 60}


def test_a_known_bundle_is_priced_by_its_throughput() -> None:
    reports = {"a": report("a", 40, bundles=10, throughput=1000.0), "b": report("b", 40, bundles=10, throughput=1000.0)}
    chooser = LeastResourceUsageWithWeight(reports, SETTINGS)
    # 0.8 usage over 20,000 B/s: a 1000 B/s bundle is 0.04; an unknown one the average per bundle, also 0.04
    assert abs(chooser.expected_usage("a/held/0") - 0.04) < 1e-9
    hot = dict(reports, a=report("a", 40, bundles=10, throughput=1000.0))
    hot["a"].last_stats["a/held/0"] = BundleStats(msg_throughput_in=11_000.0)
    chooser = LeastResourceUsageWithWeight(hot, SETTINGS)
    assert chooser.expected_usage("a/held/0") > 0.2


def test_no_candidate_no_choice() -> None:
    assert select_broker([], "t/ns/0x00000000_0xffffffff", {}, SETTINGS) is None


def test_least_long_term_message_rate_takes_the_quietest_broker_not_overloaded() -> None:
    """Pulsar's default placement: lowest msg rate in + out; an overloaded broker only if all are."""
    reports = {
        "busy": report("busy", 10, bundles=30),
        "quiet": report("quiet", 10, bundles=5),
        "hot": report("hot", 95, bundles=1),  # the lowest rate, but over the 85% overload threshold
    }
    chooser = strategy_for(LEAST_LONG_TERM_MESSAGE_RATE, reports, SETTINGS)
    assert isinstance(chooser, LeastLongTermMessageRate)
    assert Counter(chooser.select(list(reports), b) for b in BUNDLES) == {"quiet": len(BUNDLES)}
    assert chooser.select(["hot"], BUNDLES[0]) == "hot"
    # a quiet broker given the busy broker's bundles since its report is no longer the quietest
    moved = {"quiet": sorted(reports["busy"].last_stats)}
    assert chooser.select(["busy", "quiet"], BUNDLES[0], moved) == "busy"
