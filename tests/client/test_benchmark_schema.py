"""``scripts/benchmark_schema.py --quick`` runs every path it measures and reports real figures.

The schema figures (AvroSchema and JsonSchema against bytes, produce and consume) are only worth
their table if each path still works end to end: the quick mode (one run, 500 records, its own
standalone) is the smoke test of that, run here as a user would run it. The script itself refuses a
consumer that decodes anything but the ``Order`` records it sent, so a broken decode fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "benchmark_schema.py"
FIGURES = ["produce_bytes", "produce_avro", "produce_json", "consume_bytes", "consume_avro", "consume_json"]


def test_quick_schema_benchmark_measures_every_path(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for label in ("AvroSchema", "JsonSchema", "bytes (baseline)"):
        assert label in done.stdout, f"the table has no {label!r} row:\n{done.stdout}"
    summary = json.loads(out.read_text())["summary"]
    for key in FIGURES:
        assert isinstance(summary[key], float) and summary[key] > 0, (key, summary[key])
