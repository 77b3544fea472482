"""Pulsar's load-report update rules and the network limit (broker/cluster/load_reports.py)."""

from __future__ import annotations

from pathlib import Path

from magnetar.broker.cluster.load_reports import needs_update, nic_speed_kbps, percent_change
from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats, ResourceUsage
from magnetar.broker.loadbalance.settings import LoadBalancerSettings

SETTINGS = LoadBalancerSettings()  # Pulsar's defaults: 10 %, 5,000 ms, 15 minutes


def _load(at_ms: int, rate: float = 100.0, cpu: float = 50.0, bundles: int = 4, throughput: float = 1e6) -> BrokerLoad:
    return BrokerLoad(
        "b1",
        cpu=ResourceUsage(cpu, 100.0),
        msg_rate_in=rate,
        msg_throughput_in=throughput,
        num_bundles=bundles,
        last_stats={"t/ns/0x00000000_0xffffffff": BundleStats(msg_rate_in=rate)},
        last_update=at_ms,
    )


def test_percent_change_as_pulsar() -> None:
    assert percent_change(100.0, 110.0) == 10.0
    assert percent_change(100.0, 50.0) == 50.0
    assert percent_change(0.0, 0.0) == 0.0
    assert percent_change(0.0, 1.0) == float("inf")  # a broker's first traffic is news


def test_the_first_report_is_always_written() -> None:
    assert needs_update(None, _load(0), 0, SETTINGS)


def test_nothing_is_written_within_the_minimum_interval_however_large_the_change() -> None:
    last = _load(1_000_000)
    changed = _load(1_004_999, rate=10_000.0, cpu=99.0)
    assert not needs_update(last, changed, changed.last_update, SETTINGS)


def test_a_change_over_the_threshold_is_written_a_smaller_one_is_not() -> None:
    last = _load(1_000_000)
    assert needs_update(last, _load(1_006_000, rate=115.0), 1_006_000, SETTINGS)  # msg rate +15 %
    assert not needs_update(last, _load(1_006_000, rate=105.0), 1_006_000, SETTINGS)  # +5 %
    assert needs_update(last, _load(1_006_000, cpu=65.0), 1_006_000, SETTINGS)  # max usage +15 points
    assert not needs_update(last, _load(1_006_000, cpu=55.0), 1_006_000, SETTINGS)
    assert needs_update(last, _load(1_006_000, bundles=5), 1_006_000, SETTINGS)  # bundles +25 %
    assert needs_update(last, _load(1_006_000, throughput=2e6), 1_006_000, SETTINGS)  # throughput x2


def test_an_unchanged_report_is_written_after_the_maximum_interval() -> None:
    last = _load(0)
    assert not needs_update(last, _load(15 * 60_000), 15 * 60_000, SETTINGS)
    assert needs_update(last, _load(15 * 60_000 + 1), 15 * 60_000 + 1, SETTINGS)


def test_the_threshold_and_intervals_come_from_the_settings() -> None:
    settings = LoadBalancerSettings(
        report_update_threshold_percentage=50.0,
        report_update_min_interval_millis=100,
        report_update_max_interval_minutes=0.01,
    )
    last = _load(0)
    assert not needs_update(last, _load(200, rate=140.0), 200, settings)
    assert needs_update(last, _load(200, rate=160.0), 200, settings)
    assert needs_update(last, _load(601), 601, settings)


def test_the_network_limit_is_the_override_else_the_physical_nics(tmp_path: Path) -> None:
    override = LoadBalancerSettings(override_broker_nic_speed_gbps=0.5)
    assert nic_speed_kbps(override, tmp_path) == 0.5 * 1024 * 1024
    for name, speed, physical in (
        ("eth0", "1000", True),
        ("eth1", "10000", True),
        ("lo", "0", False),
        ("br0", "-1", True),
    ):
        nic = tmp_path / name
        nic.mkdir()
        (nic / "speed").write_text(speed + "\n")
        if physical:
            (nic / "device").mkdir()
    assert nic_speed_kbps(SETTINGS, tmp_path) == 11000 * 1024  # Mbit/s -> Kbit/s; virtual and unknown left out
    assert nic_speed_kbps(SETTINGS, tmp_path / "missing") == 0.0  # unknown: usage counts as none
