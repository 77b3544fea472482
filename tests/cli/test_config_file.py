"""``--config`` files for bookies and brokers, and the bookie's HTTP endpoints, on real processes."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from magnetar.cli.config_file import apply_config_file
from magnetar.cli.listener_flags import listener_settings
from magnetar.cli.main import build_parser


def _args(tmp_path: Path, text: str, *argv: str) -> object:
    cfg = tmp_path / "conf.yaml"
    cfg.write_text(text)
    args = build_parser().parse_args([*argv, "--config", str(cfg)])
    apply_config_file(args, args._parser)
    return args


def test_flags_win_over_file_and_pod_name_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "broker-1")
    text = (
        "brokerServicePort: 7000\nwebServicePort: 9000\nmetadataUrl: etcd://e:2379\n"
        "advertisedAddressTemplate: '{POD_NAME}.brokers.svc'\nmanagedLedgerDefaultAckQuorum: 1\n"
    )
    args = _args(tmp_path, text, "broker", "--port", "7100")
    assert args.port == 7100  # type: ignore[attr-defined]
    assert args.web_port == 9000  # type: ignore[attr-defined]
    assert args.metadata_url == "etcd://e:2379"  # type: ignore[attr-defined]
    assert args.advertised_address == "broker-1.brokers.svc"  # type: ignore[attr-defined]
    assert args.ack_quorum == 1  # type: ignore[attr-defined]


def test_unknown_setting_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        _args(tmp_path, "brokerServicePortt: 1\n", "broker")
    assert "brokerServicePortt" in str(info.value) and "brokerServicePort" in str(info.value)


def test_string_values_take_their_flags_types(tmp_path: Path) -> None:
    """ConfigMaps made from the chart's values hold strings: '0.97' must become the float the
    bookie compares its disk usage with (found by the e2e upgrade test: the bookie crashed)."""
    text = "dataDir: /d\ndiskUsageThreshold: '0.97'\nbookiePort: '3199'\n"
    args = _args(tmp_path, text, "bookie")
    assert args.readonly_threshold == 0.97  # type: ignore[attr-defined]
    assert args.port == 3199  # type: ignore[attr-defined]


def test_journal_enabled_sets_the_bookie_journal(tmp_path: Path) -> None:
    """``--journal`` / ``journalEnabled``; unset (None) lets MAGNETAR_BOOKIE_JOURNAL decide (on unless 0)."""
    assert build_parser().parse_args(["bookie"]).journal is None
    assert _args(tmp_path, "dataDir: /d\njournalEnabled: 'false'\n", "bookie").journal is False  # type: ignore[attr-defined]
    assert build_parser().parse_args(["standalone", "--journal", "false"]).journal is False


def test_ledger_roll_over_settings_reach_the_managed_ledger_config(tmp_path: Path) -> None:
    """Pulsar's two roll-over keys: the entry limit, and the minimum age in minutes (10 by default)."""
    from magnetar.cli.broker_flags import policy_check_settings

    default = policy_check_settings(build_parser().parse_args(["broker"]))["managed_ledger"]
    assert (default.max_entries_per_ledger, default.min_ledger_seconds) == (50_000, 600.0)
    text = "managedLedgerMaxEntriesPerLedger: 100\nmanagedLedgerMinLedgerRolloverTimeMinutes: '0.5'\n"
    config = policy_check_settings(_args(tmp_path, text, "broker"))["managed_ledger"]
    assert (config.max_entries_per_ledger, config.min_ledger_seconds) == (100, 30.0)


def test_a_value_its_flag_cannot_take_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        _args(tmp_path, "dataDir: /d\ndiskUsageThreshold: lots\n", "bookie")
    assert "diskUsageThreshold" in str(info.value) and "lots" in str(info.value)


def test_bookie_from_config_serves_health_ready_and_metrics(tmp_path: Path) -> None:
    cfg = tmp_path / "bookie.yaml"
    cfg.write_text(f"bookiePort: 0\nhttpPort: 0\ndataDir: {tmp_path / 'data'}\nbookieId: b-test\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "bookie", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = ""
        for line in proc.stdout:
            if "ready on" in line:
                banner = line
                break
        m = re.search(r"http (\S+)", banner)
        assert m, banner
        base = f"http://{m.group(1)}"
        with urllib.request.urlopen(base + "/health") as r:
            assert r.read() == b"ok"
        with urllib.request.urlopen(base + "/ready") as r:
            assert r.read().startswith(b"ok writable")
        with urllib.request.urlopen(base + "/metrics") as r:
            assert b"magnetar_bookie" in r.read()
        assert (tmp_path / "data").is_dir()
    finally:
        proc.terminate()
        proc.wait(30)


def test_advertised_listeners_take_the_pod_name_on_kubernetes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's ``broker.config`` reaches every broker pod's config file: ``{POD_NAME}`` gives each
    pod its own in-cluster and outside address (README, Kubernetes: advertised listeners)."""
    monkeypatch.setenv("POD_NAME", "magnetar-broker-1")
    text = (
        "advertisedListeners: 'internal:pulsar://{POD_NAME}.magnetar-broker-headless.magnetar.svc:6650,"
        "external:pulsar://{POD_NAME}.brokers.example.com:6650'\ninternalListenerName: internal\n"
    )
    args = _args(tmp_path, text, "broker")
    settings = listener_settings(args)  # type: ignore[arg-type]
    assert settings["internal_listener_name"] == "internal"
    listeners = settings["advertised_listeners"]
    assert "magnetar-broker-1.magnetar-broker-headless.magnetar.svc:6650" in str(listeners["internal"])
    assert "magnetar-broker-1.brokers.example.com:6650" in str(listeners["external"])
