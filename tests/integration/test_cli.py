"""The ``magnetar`` client commands against a real standalone, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.standalone import StandaloneProcess


def magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "--log-level", "WARNING", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_produce_then_consume(standalone: StandaloneProcess, topic: str) -> None:
    produced = magnetar("produce", topic, "-m", "hello-{i}", "-n", "5", "--url", standalone.service_url)
    assert produced.returncode == 0, produced.stderr
    consumed = magnetar("consume", topic, "-s", "cli", "-n", "5", "--timeout", "20", "--url", standalone.service_url)
    assert consumed.returncode == 0, consumed.stderr
    for i in range(5):
        assert f"hello-{i}" in consumed.stdout


def test_perf_produce_and_consume_report_rates(standalone: StandaloneProcess, topic: str, tmp_path: Path) -> None:
    out = tmp_path / "produce.json"
    produced = magnetar(
        "perf", "produce", topic, "--url", standalone.service_url, "-n", "20000", "--size", "100", "--json", str(out)
    )
    assert produced.returncode == 0, produced.stderr
    summary = json.loads(out.read_text())
    assert summary["messages"] == 20000 and summary["errors"] == 0
    assert summary["latency_ms"]["p99"] >= summary["latency_ms"]["p50"] > 0
    consumed_json = tmp_path / "consume.json"
    consumed = magnetar(
        "perf",
        "consume",
        topic,
        "--url",
        standalone.service_url,
        "-s",
        "perf",
        "--initial-position",
        "Earliest",
        "-n",
        "20000",
        "--json",
        str(consumed_json),
    )
    assert consumed.returncode == 0, consumed.stderr
    assert json.loads(consumed_json.read_text())["messages"] == 20000
