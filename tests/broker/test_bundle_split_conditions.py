"""Bundle split conditions: each test breaks if the rule it names were left out."""

from __future__ import annotations

from dataclasses import replace

from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats
from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.broker.loadbalance.split_conditions import (
    BANDWIDTH,
    MSG_RATE,
    SESSIONS,
    TOPICS,
    find_bundles_to_split,
)

MB = 1024 * 1024
SETTINGS = LoadBalancerSettings()
BUNDLE = "t/ns/0x00000000_0x80000000"
OTHER = "t/ns/0x80000000_0xffffffff"


def with_bundles(**by_name: BundleStats) -> dict[str, BrokerLoad]:
    stats = {{"hot": BUNDLE, "other": OTHER}.get(k, k): v for k, v in by_name.items()}
    return {"a": BrokerLoad("a", bundles=set(stats), last_stats=stats)}


def splits(
    reports: dict[str, BrokerLoad], settings: LoadBalancerSettings = SETTINGS, count: int = 2
) -> list[tuple[str, str]]:
    return [(s.bundle, s.reason) for s in find_bundles_to_split(reports, settings, {"t/ns": count})]


def test_over_the_topic_limit_splits() -> None:
    assert splits(with_bundles(hot=BundleStats(topics=1001))) == [(BUNDLE, TOPICS)]
    assert splits(with_bundles(hot=BundleStats(topics=1000))) == []


def test_over_the_session_limit_splits_unless_it_is_zero() -> None:
    many = BundleStats(topics=2, producer_count=600, consumer_count=401)
    assert splits(with_bundles(hot=many)) == [(BUNDLE, SESSIONS)]
    assert splits(with_bundles(hot=BundleStats(topics=2, producer_count=500, consumer_count=500))) == []
    assert splits(with_bundles(hot=many), replace(SETTINGS, namespace_bundle_max_sessions=0)) == []


def test_over_the_message_rate_in_and_out_splits() -> None:
    assert splits(with_bundles(hot=BundleStats(topics=2, msg_rate_in=20_000, msg_rate_out=10_001))) == [
        (BUNDLE, MSG_RATE)
    ]
    assert splits(with_bundles(hot=BundleStats(topics=2, msg_rate_in=20_000, msg_rate_out=10_000))) == []


def test_over_the_bandwidth_in_and_out_in_mebibytes_splits() -> None:
    over = BundleStats(topics=2, msg_throughput_in=60 * MB, msg_throughput_out=40 * MB + 1)
    assert splits(with_bundles(hot=over)) == [(BUNDLE, BANDWIDTH)]
    # 100 MB/s counted in powers of ten is under 100 MiB/s
    assert splits(with_bundles(hot=BundleStats(topics=2, msg_throughput_in=100e6))) == []


def test_a_bundle_of_one_topic_is_never_split() -> None:
    assert splits(with_bundles(hot=BundleStats(topics=1, msg_rate_in=1e6, msg_throughput_in=1e12))) == []


def test_a_namespace_at_its_maximum_bundles_is_not_split() -> None:
    hot = BundleStats(topics=5000)
    assert splits(with_bundles(hot=hot), count=128) == []
    assert splits(with_bundles(hot=hot), count=127) == [(BUNDLE, TOPICS)]


def test_splits_decided_in_one_pass_count_toward_the_maximum_busiest_first() -> None:
    reports = with_bundles(
        hot=BundleStats(topics=5000, msg_throughput_in=1.0), other=BundleStats(topics=5000, msg_throughput_in=2.0)
    )
    assert splits(reports, count=127) == [(OTHER, TOPICS)]
    assert [b for b, _ in splits(reports, count=126)] == [OTHER, BUNDLE]


def test_a_namespace_without_a_count_counts_the_bundles_reported() -> None:
    reports = with_bundles(hot=BundleStats(topics=5000), other=BundleStats(topics=5))
    small = replace(SETTINGS, namespace_maximum_bundles=2)
    assert find_bundles_to_split(reports, small, {}) == []
    assert [s.bundle for s in find_bundles_to_split(reports, replace(small, namespace_maximum_bundles=3), {})] == [
        BUNDLE
    ]


def test_the_split_runs_on_the_owner() -> None:
    stats = {BUNDLE: BundleStats(topics=5000)}
    reports = {"a": BrokerLoad("a"), "b": BrokerLoad("b", bundles={BUNDLE}, last_stats=stats)}
    assert [(s.bundle, s.broker) for s in find_bundles_to_split(reports, SETTINGS, {"t/ns": 2})] == [(BUNDLE, "b")]
