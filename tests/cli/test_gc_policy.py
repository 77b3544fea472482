"""The servers' garbage-collection policy (node/gc_policy.py), in a child process so that this
test run's own collector is left alone.

What is checked: the startup heap and every survivor of a middle-generation collection are frozen
(so later collections do not walk them), garbage cycles made of frozen objects are freed by a sweep
and not before, the sweep timer runs on the loop and skips when the frozen set has not grown, and a
bad setting is refused by the server command with the variable's name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from magnetar.node import gc_policy

    class Node:
        def __init__(self):
            self.other = None

    async def main():
        policy = gc_policy.from_env()
        policy.start()
        out = {"frozen_at_start": gc.get_freeze_count()}
        # Long-lived state: survives a middle-generation collection, so it is frozen.
        keep = [Node() for _ in range(5000)]
        for a, b in zip(keep, keep[1:]):
            a.other = b
        before = gc.get_freeze_count()
        gc.collect(1)
        out["frozen_by_gen1"] = gc.get_freeze_count() - before
        # Those objects now become garbage cycles: a young collection does not see them.
        for a, b in zip(keep[::2], keep[1::2]):
            a.other, b.other = b, a
        del keep, a, b
        out["found_by_gen1"] = gc.collect(1)
        out["found_by_sweep"] = policy.sweep()
        # The timer: a sweep is skipped while the frozen set has not grown by a tenth.
        sweeps = policy.sweeps
        await asyncio.sleep(policy.sweep_seconds * 3)
        out["timer_sweeps_without_growth"] = policy.sweeps - sweeps
        grow = [Node() for _ in range(int(gc.get_freeze_count() * 0.2))]
        gc.collect(1)
        await asyncio.sleep(policy.sweep_seconds * 3)
        out["timer_sweeps_after_growth"] = policy.sweeps - sweeps
        policy.uninstall()
        out["frozen_after_uninstall"] = gc.get_freeze_count()
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _child(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def test_survivors_are_frozen_and_a_sweep_frees_frozen_garbage() -> None:
    import json

    done = _child(MAGNETAR_GC_SWEEP_SECONDS="0.2")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["frozen_at_start"] > 1000, out
    assert out["frozen_by_gen1"] >= 5000, out
    assert out["found_by_gen1"] == 0, "frozen objects are not walked by later collections"
    assert out["found_by_sweep"] >= 5000, "the sweep frees the cycles among frozen objects"
    assert out["timer_sweeps_without_growth"] == 0, out
    assert out["timer_sweeps_after_growth"] >= 1, out
    assert out["frozen_after_uninstall"] == 0, out


def test_a_bad_setting_is_refused_by_the_server_command(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(tmp_path)]
    for env, word in (
        ({"MAGNETAR_GC_POLICY": "sometimes"}, "MAGNETAR_GC_POLICY"),
        ({"MAGNETAR_GC_SWEEP_SECONDS": "-1"}, "MAGNETAR_GC_SWEEP_SECONDS"),
    ):
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and word in done.stderr, (done.returncode, done.stderr)
        assert not (tmp_path / "bookie").exists(), "refused before anything was started"
