"""``magnetar-admin brokers``, ``clusters`` and ``bookies list`` against a real standalone, with
pulsar-admin's verbs, flags and output: names one a line, objects as JSON, ``ok`` for a health
check, and a refusal as one ``error:`` line."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from tests.support.standalone import StandaloneProcess


def admin(sa: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


def test_brokers_list_leader_health_and_runtime_config(standalone: StandaloneProcess) -> None:
    assert ok(admin(standalone, "brokers", "list")).splitlines() == ["standalone"]
    assert ok(admin(standalone, "brokers", "list", "standalone")).splitlines() == ["standalone"]
    assert refused(admin(standalone, "brokers", "list", "elsewhere")).startswith(
        "error: Cluster elsewhere does not exist"
    )
    leader = json.loads(ok(admin(standalone, "brokers", "leader-broker")))
    assert leader == {"brokerId": "standalone", "serviceUrl": standalone.admin_url}
    assert ok(admin(standalone, "brokers", "healthcheck")) == "ok\n"
    assert ok(admin(standalone, "brokers", "healthcheck", "-tv", "V2")) == "ok\n"
    config = json.loads(ok(admin(standalone, "brokers", "get-runtime-config")))
    assert config["clusterName"] == "standalone"
    assert config["webServicePort"] == "0"  # the fixture asks for any free port
    assert config["brokerDeduplicationEnabled"] == "false"
    assert all(isinstance(v, str) for v in config.values())
    assert "tokenSecretKey" not in config


def test_clusters_create_get_list_update_delete(standalone: StandaloneProcess) -> None:
    name = f"east-{uuid.uuid4().hex[:6]}"
    ok(admin(standalone, "clusters", "create", name, "--url", "http://east:8080", "--broker-url", "pulsar://east:6650"))
    assert json.loads(ok(admin(standalone, "clusters", "get", name))) == {
        "serviceUrl": "http://east:8080",
        "brokerServiceUrl": "pulsar://east:6650",
    }
    assert refused(admin(standalone, "clusters", "create", name, "--url", "http://east:8080")) == (
        f"error: Cluster {name} already exists (HTTP 409)"
    )
    listed = ok(admin(standalone, "clusters", "list")).splitlines()
    assert name in listed and "standalone" in listed
    current = ok(admin(standalone, "clusters", "list", "-c")).splitlines()
    assert "standalone(*)" in current and name in current
    ok(admin(standalone, "clusters", "update", name, "--url-secure", "https://east:8443", "--tls-enable"))
    assert json.loads(ok(admin(standalone, "clusters", "get", name))) == {
        "serviceUrlTls": "https://east:8443",
        "brokerClientTlsEnabled": True,
    }
    ok(admin(standalone, "clusters", "delete", name))
    assert refused(admin(standalone, "clusters", "get", name)) == f"error: Cluster {name} does not exist (HTTP 404)"
    assert name not in ok(admin(standalone, "clusters", "list")).splitlines()
    assert refused(admin(standalone, "clusters", "delete", "standalone")).endswith("(HTTP 412)")
    assert "serviceUrl" in json.loads(ok(admin(standalone, "clusters", "get", "standalone")))


def test_bookies_list_prints_json(standalone: StandaloneProcess) -> None:
    bookies = json.loads(ok(admin(standalone, "bookies", "list")))
    assert isinstance(bookies, list) and len(bookies) == 1
