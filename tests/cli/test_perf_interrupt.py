"""``magnetar perf`` stopped with Ctrl-C (SIGINT) still prints and writes its summary, as
pulsar-perf does: a benchmark is most often stopped by hand."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess


@pytest.mark.parametrize("mode", ["produce", "consume"])
def test_ctrl_c_prints_the_summary(standalone: StandaloneProcess, topic: str, tmp_path: Path, mode: str) -> None:
    out = tmp_path / "summary.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli.main", "perf", mode, topic, "--url", standalone.service_url,
         "--rate" if mode == "produce" else "--size", "2000" if mode == "produce" else "100", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()  # the first once-a-second report: the run is under way
        assert first.startswith(f"{mode}:"), first + (proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert f"{mode} summary:" in rest
    summary = json.loads(out.read_text())
    assert summary["mode"] == mode
    if mode == "produce":
        assert summary["messages"] > 0 and summary["errors"] == 0
