"""``scripts/benchmark_client.py --quick`` runs every path it measures and reports real figures.

The benchmark is only worth its table if each path it times still works end to end; the quick mode
(one run, 500 messages, its own standalone) is the smoke test of that, run here as a user would run
it. A path the client refuses is reported as ``n/a: reason``, which this test refuses for every
row, so a path that breaks fails here by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "benchmark_client.py"
FIGURES = [
    "consume_receive",
    "consume_listener",
    "consume_batch_receive",
    "produce_plain",
    "produce_encrypted",
    "consume_encrypted",
]
LABELS = ["receive() (baseline)", "message_listener", "batch_receive()", "produce, plain", "produce, encrypted"]


def test_quick_benchmark_measures_every_path(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for label in LABELS:
        assert label in done.stdout, f"the table has no {label!r} row:\n{done.stdout}"
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert summary["runs"] == 1 and summary["messages"] == 500
    assert len(result["runs"]) == 1
    for key in FIGURES:
        value = summary[key]
        assert isinstance(value, float) and value > 0, f"{key}: {value!r}"
    assert isinstance(summary["consume_listener_ratio"], float) and summary["consume_listener_ratio"] > 0
    assert isinstance(summary["consume_batch_receive_ratio"], float) and summary["consume_batch_receive_ratio"] > 0
