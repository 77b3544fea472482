"""``--config`` with Pulsar's properties format (standalone.conf / broker.conf), and the one line a
bad settings file ends with: on real ``magnetar`` processes, as an operator runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.standalone import admin_call, run_standalone

from magnetar.cli.config_file import apply_config_file, is_properties
from magnetar.cli.main import build_parser
from magnetar.cli.properties_file import PropertiesError, parse_properties

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


def test_java_properties_rules_as_pulsar_files_use_them() -> None:
    text = (
        "# a comment\n! another comment\n\n"
        "   brokerServicePort=6650\n"
        "clusterName : standalone\n"
        "bindAddress 0.0.0.0\n"
        "superUserRoles=admin,\\\n     superUser\n"
        "tokenSecretKey=\n"
        "advertisedListeners=internal:pulsar://h:6650\n"
        "escaped\\=key=a\\tb\\u00e9\n"
        "brokerServicePort=6660\n"
    )
    assert parse_properties(text) == {
        "brokerServicePort": "6660",  # the last of two equal keys wins
        "clusterName": "standalone",
        "bindAddress": "0.0.0.0",
        "superUserRoles": "admin,superUser",
        "tokenSecretKey": "",
        "advertisedListeners": "internal:pulsar://h:6650",
        "escaped=key": "a\tb\u00e9",
    }
    with pytest.raises(PropertiesError, match="line 2"):
        parse_properties("a=1\nb=\\u12x4\n")


def test_format_is_told_by_suffix_then_by_the_first_setting() -> None:
    assert is_properties("standalone.conf", "a: b")
    assert not is_properties("values.yaml", "a=b")
    assert is_properties("settings", "# c\nadvertisedListeners=internal:pulsar://h:1\n")
    assert not is_properties("settings", "---\nadvertisedListeners: 'internal:pulsar://h:1'\n")


def test_properties_values_take_their_flags_types_blank_means_default_flags_win(tmp_path: Path) -> None:
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        "webServicePort=9090\nbrokerServicePort=\nauthenticationEnabled=true\nsuperUserRoles=a, b\n"
        "tokenAuthClaim=\nmaxUnackedMessagesPerConsumer= 7 \nclusterName=east\n"
    )
    args = build_parser().parse_args(["standalone", "--config", str(conf), "--web-port", "0"])
    apply_config_file(args, args._parser)
    assert args.web_port == 0  # the flag wins
    assert args.port is None  # a blank service port: no plaintext listener, as in Pulsar
    assert args.authentication_enabled is True
    assert args.super_user_roles == ["a", "b"]
    assert args.token_auth_claim == "sub"  # blank: the default
    assert args.max_unacked_messages_per_consumer == 7
    assert args.cluster == "east"


def _refused(tmp_path: Path, name: str, text: str | None, command: str = "standalone") -> str:
    """Run ``magnetar COMMAND --config FILE`` expecting a refusal: its one line of output."""
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    argv = [*MAGNETAR, command, "--config", str(path), "--data-dir", str(tmp_path / "data")]
    argv += ["--port", "0", "--web-port", "0"] + (["--bookie-port", "0"] if command == "standalone" else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, output
    assert "Traceback" not in output and len(output.splitlines()) == 1, output
    return output


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.conf", "authenticationEnabled=maybe\n", "authenticationEnabled must be true or false, got 'maybe'"),
        ("a.conf", "maxProducersPerConnection=lots\n", "maxProducersPerConnection must be a whole number, got 'lots'"),
        ("a.yaml", "backlogQuotaCheckIntervalInSeconds: soon\n", "must be a number, got 'soon'"),
        ("a.yaml", "brokerServicePort: [6650\n", "not valid YAML"),
        ("a.conf", "tokenSecretKey=\\uZZZZ\n", "not a valid properties file: line 1: malformed"),
        ("a.yaml", "brokerServicePortt: 1\n", "unknown setting(s) brokerServicePortt"),
        ("missing.conf", None, "cannot read the config file: No such file or directory"),
    ],
)
def test_a_bad_settings_file_is_one_line_naming_the_key_and_type(
    tmp_path: Path, name: str, text: str | None, expected: str
) -> None:
    line = _refused(tmp_path, name, text)
    assert line.startswith(f"magnetar standalone: {tmp_path / name}: "), line
    assert expected in line, line
    assert "flag_bool" not in line


def test_a_pulsar_standalone_conf_starts_and_reports_unused_keys_once(tmp_path: Path) -> None:
    """Pulsar keys Magnetar has no use for are listed in one warning line, and the standalone starts
    with the ones it knows (``clusterName`` becomes the cluster the tenant ``public`` may use)."""
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        "### --- General broker settings --- ###\n"
        "zookeeperServers=\nconfigurationStoreServers=\n"
        "clusterName=conf-cluster\n"
        "brokerShutdownTimeoutMs=3000\n"
        "loadManagerClassName=org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl\n"
        "managedLedgerCacheSizeMB=1024\n"
        "maxUnackedMessagesPerConsumer=50000\n"
    )
    with run_standalone(tmp_path, "--config", str(conf)) as sa:
        status, tenant = admin_call(sa, "GET", "/admin/v2/tenants/public")
        log = sa.log_path.read_text()
    assert status == 200 and tenant["allowedClusters"] == ["conf-cluster"], tenant
    warnings = [line for line in log.splitlines() if "does not use" in line]
    assert warnings == [
        f"magnetar standalone: {conf}: ignoring 5 setting(s) that magnetar standalone does not use: "
        "brokerShutdownTimeoutMs, configurationStoreServers, loadManagerClassName, managedLedgerCacheSizeMB, "
        "zookeeperServers"
    ], log
