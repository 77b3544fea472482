"""The load-balancer simulator runs the broker's own shedding, placement and split code end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "simulate_load_balancer.py"


def test_the_quick_simulation_moves_splits_and_places_and_prints_its_table() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines if line[:5].strip().isdigit()]
    assert len(rows) == 24
    assert any("hot" in line for line in lines) and any("broker lost" in line for line in lines)
    moved = sum(int(r[-9]) for r in rows)
    placed = sum(int(r[-7]) for r in rows)
    # the hot tenant's 4 bundles and the lost broker's bundles are placed; the shedder moves some
    assert moved > 0 and placed > 4
    assert "rounds to converge" in done.stdout and "leader CPU" in done.stdout
