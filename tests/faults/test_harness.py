"""``Proc``, the process wrapper of the fault harness, on a tiny stand-in process (fast, no cluster)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tests.support.cluster import Proc, ProcessExited, free_ports

SCRIPT = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("noise before the banner", flush=True)
print("stand-in ready on port " + sys.argv[1], flush=True)
while True:
    time.sleep(0.05)
"""


def stand_in(tmp_path: Path, *args: str) -> Proc:
    return Proc(
        "stand-in",
        "test",
        [sys.executable, "-c", SCRIPT, *args],
        tmp_path / "logs" / "stand-in.log",
        re.compile(r"stand-in ready on port (\d+)"),
    )


def test_free_ports_are_distinct_and_never_handed_out_twice() -> None:
    first, second = free_ports(5), free_ports(5)
    assert len(set(first)) == 5 and not set(first) & set(second)


def test_readiness_comes_from_the_banner_and_the_log_keeps_everything(tmp_path: Path) -> None:
    p = stand_in(tmp_path, "4242")
    p.start(timeout=20)
    try:
        assert p.banner == ("4242",) and p.is_ready
    finally:
        p.kill9()
    text = p.log_path.read_text()
    assert "noise before the banner" in text and "exited with -9" in text


def test_sigterm_returns_the_exit_code_and_restart_runs_it_again(tmp_path: Path) -> None:
    p = stand_in(tmp_path, "1")
    p.start(timeout=20)
    first_pid = p.pid
    assert p.stop() == 7
    p.restart(timeout=20)
    try:
        assert p.is_ready and p.pid != first_pid and p.starts == 2
    finally:
        p.kill9()


def test_a_paused_process_is_still_killed_and_reaped(tmp_path: Path) -> None:
    p = stand_in(tmp_path, "1")
    p.start(timeout=20)
    p.pause()
    p.kill9()
    assert not p.alive and p.returncode == -9


def test_a_process_that_exits_before_its_banner_is_reported_with_its_log(tmp_path: Path) -> None:
    p = Proc(
        "quitter",
        "test",
        [sys.executable, "-c", "import sys; print('cannot start: disk wiped', flush=True); sys.exit(2)"],
        tmp_path / "quitter.log",
        re.compile("never"),
    )
    with pytest.raises(ProcessExited) as exited:
        p.start(timeout=20)
    assert exited.value.code == 2 and "disk wiped" in exited.value.tail
