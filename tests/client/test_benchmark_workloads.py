"""``scripts/benchmark_workloads.py --quick --peers`` measures every figure of every system.

The side-by-side table of issue 14 is only worth reading if each cell comes from a workload that
really ran: the quick mode (one run of a few thousand messages, two short open loops) runs W1, W2
and the high-rate latency run for Magnetar and for each peer, each producer and consumer in its
own process, as a user would run it. Magnetar's figures are always checked; a peer's are skipped,
with the reason, when its server is not installed on this machine (CI installs both).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "benchmark_workloads.py"
FIGURES = [
    "publish_msg_per_s",
    "consume_msg_per_s",
    "pub_ack_p50_ms",
    "pub_ack_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "pub_ack_p99_high_ms",
    # W2's CPU per message on each side (producer, server, consumer) and the cores it kept busy
    "w2_cpu_producer_us",
    "w2_cpu_server_us",
    "w2_cpu_consumer_us",
    "w2_cpu_total_us",
    "w2_cores",
]
# Three servers start three times each: past the suite's 300 s default under a loaded 2-core machine.
pytestmark = pytest.mark.timeout(900)
PEER_BINARIES = {"redis": "redis-server", "rabbitmq": "/usr/lib/rabbitmq/bin/rabbitmq-server"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """One quick run with the peers, shared by the tests: (its stdout, its JSON summary)."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--peers", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,  # every child step has its own timeout; this bounds the whole run
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(out.read_text())["summary"]
    return done.stdout, summary


def assert_all_positive(stdout: str, summary: dict[str, Any], system: str) -> None:
    assert f"| {system} |" in stdout, f"the table has no {system!r} row:\n{stdout}"
    figures = summary["systems"][system]
    for key in FIGURES:
        assert isinstance(figures[key], float) and figures[key] > 0, (system, key, figures[key])


def test_quick_workloads_measure_every_magnetar_figure(quick_run: tuple[str, dict[str, Any]]) -> None:
    stdout, summary = quick_run
    assert "| system | publish msg/s | consume msg/s |" in stdout
    assert "| system | W2 CPU per message, µs: producer / server / consumer = total |" in stdout
    figures = summary["systems"]["magnetar"]  # --quick is one run: its medians are that run's figures
    parts = figures["w2_cpu_producer_us"] + figures["w2_cpu_server_us"] + figures["w2_cpu_consumer_us"]
    assert abs(figures["w2_cpu_total_us"] - parts) < 1e-6 * parts
    assert_all_positive(stdout, summary, "magnetar")


@pytest.mark.parametrize("peer", sorted(PEER_BINARIES))
def test_quick_workloads_measure_every_peer_figure(quick_run: tuple[str, dict[str, Any]], peer: str) -> None:
    binary = PEER_BINARIES[peer]
    if not (shutil.which(binary) or Path(binary).exists()):
        pytest.skip(f"{binary} is not installed: apt-get install {Path(binary).name}")
    stdout, summary = quick_run
    assert_all_positive(stdout, summary, peer)
    for key in ("publish_msg_per_s", "consume_msg_per_s"):
        assert isinstance(summary["ratios"][f"magnetar / {peer}"][key], float), (peer, key)
