"""``scripts/benchmark_load_balancer.py --quick`` measures every figure it reports, on a real cluster.

The figures (a bundle move's pause seen by a producer; the time from a broker joining until no broker
is over the shedding threshold) are only worth their table if each is really measured: the quick mode
(one run, five moves, one bookie) is the smoke test of that, run as a user would run it. The script
reads the moved topic back itself, so a move that lost or duplicated a message fails here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "benchmark_load_balancer.py"

pytestmark = [pytest.mark.timeout(300)]


def test_quick_load_balancer_benchmark_measures_every_figure(tmp_path: Path) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for label in ("producer pause p99", "broker joins -> balanced"):
        assert label in done.stdout, f"the table has no {label!r} row:\n{done.stdout}"
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    summary = data["summary"]
    # Every move measured, landed where it was sent, and cost a pause longer than none but not a stall.
    assert run["moves"] == 5 and len(run["pause_ms"]) == 5, run
    assert run["landed_on_destination"] == 5, run
    assert all(0 < p < 10_000 for p in run["pause_ms"]), run["pause_ms"]
    assert 0 < summary["pause_p50_ms"] <= summary["pause_p99_ms"], summary
    assert summary["latency_p99_ms"] >= summary["pause_p50_ms"] / 2, summary
    # Nothing lost or stored twice across the moves (deduplication on), and every send acknowledged.
    assert run["lost"] == 0 and run["duplicated"] == 0 and run["failed"] == 0, run
    assert run["read"] == run["acked"] == run["sent"], run
    # The joined broker was given bundles, and the message rates evened out.
    assert isinstance(summary["balance_s"], float) and summary["balance_s"] > 0, summary
    assert summary["balance_intervals"] == pytest.approx(summary["balance_s"] / summary["shedding_interval_s"])
    assert summary["ratio_after"] < summary["ratio_before"], summary
    assert summary["max_mean_after"] < summary["max_mean_before"], summary
    joined = min(run["bundles_before"], key=run["bundles_before"].get)
    assert run["bundles_before"][joined] == 0 and run["bundles_after"][joined] > 0, run
