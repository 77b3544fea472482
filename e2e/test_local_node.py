"""The local node's clean-up of runs that were killed rather than taken down.

A CI run cancelled in the middle of the end-to-end suite leaves its run directory behind with its
pods' network namespaces mounted in it, and its bridge with them: the next node's pods were then
given the addresses those namespaces still held (10.245.0.3 twice on one bridge), and its bookies
crash-looped until helm's ten minutes ran out. These tests need no cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.cluster import reap_stale_runs, running_pids


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _mounted_under(path: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(f"{path}/")]


def _run_dir(parent: Path, name: str, pid: int) -> Path:
    run_dir = parent / name
    (run_dir / "pid").mkdir(parents=True)
    (run_dir / "pid" / "kubelet").write_text(f"{pid}\n")
    return run_dir


def test_a_killed_run_is_unmounted_and_removed_and_a_running_one_is_left_alone(tmp_path: Path) -> None:
    killed = _run_dir(tmp_path, "magnetar-e2e-killed", _dead_pid())
    running = _run_dir(tmp_path, "magnetar-e2e-running", os.getpid())
    mine = _run_dir(tmp_path, "magnetar-e2e-mine", _dead_pid())
    exports = tmp_path / "magnetar-e2e-exports-x"  # not a node's run directory: no pid/
    exports.mkdir()
    mount = killed / "ctd" / "state" / "netns"
    mount.mkdir(parents=True)
    mounted = os.geteuid() == 0
    if mounted:  # what a pod's namespace or volume leaves: a mount inside the run directory
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], check=True)
        assert _mounted_under(killed)

    assert list(running_pids(running)) == [os.getpid()] and not list(running_pids(killed))
    assert reap_stale_runs(tmp_path, keep=mine) == [killed]

    assert not killed.exists() and not _mounted_under(killed)
    assert running.is_dir() and mine.is_dir() and exports.is_dir()
    if not mounted:
        pytest.skip("the directory was reaped; mounting needs root, so the unmount was not exercised")


BRIDGE_SH = Path(__file__).parents[1] / "scripts" / "k8s" / "bridge.sh"


def _bridge(name: str, podnet: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BR": name, "PODNET": podnet}
    return subprocess.run(["bash", str(BRIDGE_SH)], env=env, capture_output=True, text=True, timeout=30)


def _link(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a bridge needs root")
def test_a_stale_bridge_is_replaced_and_one_a_running_node_uses_is_refused() -> None:
    """bridge.sh on a bridge and subnet of its own (not the node's e2e0, which a running suite may
    hold): a leftover bridge with a port on it comes back empty; a process whose command line names
    the gateway, as a running node's dnsmasq does, makes it refuse and leave the bridge alone."""
    name, podnet, port = "mgtst0", "10.246.77", "mgtstp0"
    _link("link", "del", name)
    _link("link", "del", port)
    try:
        assert _link("link", "add", name, "type", "bridge").returncode == 0
        assert _link("link", "add", port, "type", "veth", "peer", "name", "mgtstp1").returncode == 0
        assert _link("link", "set", port, "master", name).returncode == 0

        done = _bridge(name, podnet)
        assert done.returncode == 0, done.stderr
        assert "deleting bridge mgtst0" in done.stdout
        assert f"{podnet}.1/24" in _link("-br", "addr", "show", name).stdout
        assert _link("link", "show", "master", name).stdout.strip() == ""  # the old port is gone

        # A running node: a process whose arguments name the gateway (the suffix must not match .12).
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--listen-address={podnet}.12"])
        live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--listen-address={podnet}.1"])
        try:
            refused = _bridge(name, podnet)
        finally:
            live.kill()
            other.kill()
        assert refused.returncode == 1 and "another local node runs on bridge mgtst0" in refused.stderr
        assert _link("link", "show", name).returncode == 0
        live.wait()
        other.wait()
        assert _bridge(name, podnet).returncode == 0  # the .12 process alone does not hold it
    finally:
        _link("link", "del", name)
        _link("link", "del", port)
