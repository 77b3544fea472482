"""The load manager's settings: flags and ``--config`` keys derived from one list, answered by
``configuration/runtime`` under their broker.conf keys, and a strategy Magnetar lacks refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.standalone import admin_call, run_standalone

from magnetar.broker.loadbalance.settings import THRESHOLD_SHEDDER, keys
from magnetar.cli.load_balancer_flags import KEYS, kebab
from magnetar.cli.main import build_parser

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


def test_every_setting_has_a_flag_on_both_commands_and_a_config_key() -> None:
    parser = build_parser()
    for command in ("standalone", "broker"):
        sub = parser.parse_args([command])._parser
        options = {o for action in sub._actions for o in action.option_strings}
        for key in keys():
            assert "--" + kebab(key) in options, (command, key)
    assert set(KEYS) == set(keys())
    assert kebab("loadBalancerCPUResourceWeight") == "load-balancer-cpu-resource-weight"
    assert kebab("loadBalancerSheddingIntervalMinutes") == "load-balancer-shedding-interval-minutes"


def test_runtime_configuration_answers_flags_and_file_under_broker_conf_keys(tmp_path: Path) -> None:
    conf = tmp_path / "standalone.yaml"
    conf.write_text(
        "loadBalancerBrokerThresholdShedderPercentage: '25'\n"
        "loadBalancerLoadSheddingStrategy: ThresholdShedder\n"
        "defaultNamespaceBundleSplitAlgorithm: topic_count_equally_divide\n"
    )
    with run_standalone(
        tmp_path,
        "--config",
        str(conf),
        "--load-balancer-shedding-interval-minutes",
        "0.5",
        "--load-balancer-override-broker-nic-speed-gbps",
        "0.01",
    ) as sa:
        status, runtime = admin_call(sa, "GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200, runtime
    assert runtime["loadBalancerSheddingIntervalMinutes"] == "0.5"
    assert runtime["loadBalancerBrokerThresholdShedderPercentage"] == "25.0"
    assert runtime["loadBalancerOverrideBrokerNicSpeedGbps"] == "0.01"
    assert runtime["loadBalancerLoadSheddingStrategy"] == THRESHOLD_SHEDDER  # the short name, as Pulsar's class
    assert runtime["defaultNamespaceBundleSplitAlgorithm"] == "topic_count_equally_divide"
    assert runtime["loadBalancerNamespaceBundleMaxTopics"] == "1000"  # Pulsar's default
    assert not [k for k in runtime if k.startswith("managedLedgerLoad")]  # not named as the ledger's
    assert "managedLedgerMaxEntriesPerLedger" in runtime


def test_a_strategy_magnetar_lacks_is_refused_with_one_line(tmp_path: Path) -> None:
    flag = subprocess.run(
        [*MAGNETAR, "broker", "--metadata-url", "etcd://127.0.0.1:1", "--load-balancer-load-shedding-strategy", "X"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert flag.returncode != 0
    lines = flag.stderr.strip().splitlines()
    assert lines == [
        "magnetar broker: loadBalancerLoadSheddingStrategy (--load-balancer-load-shedding-strategy) must be "
        f"ThresholdShedder ({THRESHOLD_SHEDDER}), got 'X'"
    ], flag.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text("defaultNamespaceBundleSplitAlgorithm=specified_positions_divide\n")
    file = subprocess.run(
        [*MAGNETAR, "standalone", "--config", str(conf), "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert file.returncode != 0
    assert file.stderr.strip().splitlines()[-1] == (
        "magnetar standalone: defaultNamespaceBundleSplitAlgorithm (--default-namespace-bundle-split-algorithm) "
        "must be range_equally_divide or topic_count_equally_divide, got 'specified_positions_divide'"
    ), file.stderr
