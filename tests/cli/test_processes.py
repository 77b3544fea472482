"""The server commands as processes: a taken port is one line on the console and a non-zero exit,
and ``magnetar local-cluster`` takes its children with it when it is killed with -9.

Real processes on loopback; every wait polls for an event (a banner, a pid gone, a port free)
until a deadline, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import LEASE_TTL_ENV, wait_until
from tests.support.etcd import EtcdProcess

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]
CHILD_LINE = re.compile(r"^\s+(etcd|bookie|broker)\s+(\S+)\s+pid (\d+)")
needs_etcd = pytest.mark.skipif(shutil.which("etcd") is None, reason="local-cluster needs etcd on the PATH")


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A loopback port held by a listening socket of this test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def free_run(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (etcd's peer port is its client port + 1)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n < 65536 and all(port_free(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no run of {n} free ports")


def alive(pid: int) -> bool:
    """Running (a zombie, already dead but not yet reaped by its new parent, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def run_refused(argv: list[str]) -> tuple[int, list[str]]:
    """Run a command expected to refuse to start; its exit code and its output lines."""
    proc = subprocess.run([*MAGNETAR, *argv], capture_output=True, text=True, timeout=120)
    return proc.returncode, (proc.stdout + proc.stderr).splitlines()


def assert_one_port_line(code: int, lines: list[str], prefix: str, port: int, what: str, flag: str) -> None:
    """Refused (non-zero, no traceback) with exactly one line about the port, naming it."""
    output = "\n".join(lines)
    assert code != 0, output
    assert "Traceback" not in output, output
    reported = [line for line in lines if "already in use" in line]
    assert reported == [f"{prefix}: port {port} is already in use ({what}); pass {flag} to choose another"], output


@pytest.mark.parametrize(
    ("listener", "flag"),
    [("service", "--port"), ("admin", "--web-port"), ("bookie", "--bookie-port")],
)
def test_standalone_reports_a_taken_port_in_one_line(tmp_path: Path, listener: str, flag: str) -> None:
    ports = {"--port": "0", "--web-port": "0", "--bookie-port": "0"}
    with taken_port() as port:
        ports[flag] = str(port)
        code, lines = run_refused(["standalone", "--data-dir", str(tmp_path), *(x for kv in ports.items() for x in kv)])
    assert_one_port_line(code, lines, "magnetar standalone", port, f"{listener} port", flag)


@pytest.mark.parametrize(("listener", "flag"), [("bookie", "--port"), ("http", "--http-port")])
def test_bookie_reports_a_taken_port_in_one_line(tmp_path: Path, listener: str, flag: str) -> None:
    with taken_port() as port:
        ports = {"--port": "0", "--http-port": "0", flag: str(port)}
        argv = ["bookie", "--data-dir", str(tmp_path), "--bookie-id", "b1", *(x for kv in ports.items() for x in kv)]
        code, lines = run_refused(argv)
    assert_one_port_line(code, lines, "magnetar bookie", port, f"{listener} port", flag)


@pytest.mark.parametrize(("listener", "flag"), [("service", "--port"), ("admin", "--web-port")])
def test_broker_reports_a_taken_port_in_one_line(etcd_server: EtcdProcess, listener: str, flag: str) -> None:
    url = f"{etcd_server.url}/taken-port-{uuid.uuid4().hex[:8]}"
    with taken_port() as port:
        ports = {"--port": "0", "--web-port": "0", flag: str(port)}
        code, lines = run_refused(["broker", "--metadata-url", url, *(x for kv in ports.items() for x in kv)])
    assert_one_port_line(code, lines, "magnetar broker", port, f"{listener} port", flag)


@needs_etcd
def test_local_cluster_reports_a_taken_port_before_starting_anything(tmp_path: Path) -> None:
    base = free_run(6)
    with taken_port() as port:
        argv = [
            "local-cluster",
            "--data-dir",
            str(tmp_path / "cluster"),
            "--bookies",
            "1",
            "--brokers",
            "1",
            "--etcd-port",
            str(base),
            "--bookie-port",
            str(base + 2),
            "--broker-port",
            str(port),
            "--web-port",
            str(base + 3),
        ]
        code, lines = run_refused(argv)
    assert_one_port_line(code, lines, "magnetar local-cluster", port, "broker-0 service port", "--broker-port")
    assert not (tmp_path / "cluster").exists()  # refused before any child or directory


class LocalClusterRun:
    """``magnetar local-cluster`` with one bookie and one broker on the given ports."""

    def __init__(self, data_dir: Path, etcd_port: int, bookie_port: int, broker_port: int, web_port: int) -> None:
        self.ports = [etcd_port, etcd_port + 1, bookie_port, broker_port, web_port]
        argv = [
            *MAGNETAR,
            "local-cluster",
            "--data-dir",
            str(data_dir),
            "--bookies",
            "1",
            "--brokers",
            "1",
            "--ensemble-size",
            "1",
            "--write-quorum",
            "1",
            "--ack-quorum",
            "1",
            "--etcd-port",
            str(etcd_port),
            "--bookie-port",
            str(bookie_port),
            "--broker-port",
            str(broker_port),
            "--web-port",
            str(web_port),
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{LEASE_TTL_ENV: "3"})
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.lines: list[str] = []
        self.children: dict[str, int] = {}
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            m = CHILD_LINE.match(line)
            if m:
                self.children[m.group(2)] = int(m.group(3))
                if len(self.children) == 3:
                    self._ready.set()

    def wait_ready(self, timeout: float = 120.0) -> None:
        wait_until(
            lambda: self._ready.is_set() or self.proc.poll() is not None, timeout, "local-cluster ready", interval=0.1
        )
        assert self._ready.is_set(), "local-cluster exited:\n" + "\n".join(self.lines)

    def kill(self) -> None:
        """End the supervisor (and, through SIGKILL, everything if something is left)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for pid in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.durability
@needs_etcd
def test_kill_9_of_local_cluster_takes_its_children_and_frees_its_ports(tmp_path: Path) -> None:
    etcd_port, bookie_port, broker_port, web_port = free_run(2), free_run(1), free_run(1), free_run(1)
    ports = (etcd_port, bookie_port, broker_port, web_port)
    first = LocalClusterRun(tmp_path / "cluster", *ports)
    try:
        first.wait_ready()
        assert sorted(first.children) == ["bookie-0", "broker-0", "etcd"]
        assert all(alive(pid) for pid in first.children.values())
        os.kill(first.proc.pid, signal.SIGKILL)
        assert first.proc.wait(30) == -signal.SIGKILL
        wait_until(lambda: not any(alive(pid) for pid in first.children.values()), 30, "every child gone")
        wait_until(lambda: all(port_free(p) for p in first.ports), 30, "every port free")
    finally:
        first.kill()

    # The next local-cluster, on the same ports and the same data, starts and stops cleanly.
    second = LocalClusterRun(tmp_path / "cluster", *ports)
    try:
        second.wait_ready()
        assert set(second.children.values()).isdisjoint(first.children.values())
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(120) == 0, "\n".join(second.lines)
        wait_until(lambda: not any(alive(pid) for pid in second.children.values()), 30, "every child gone")
    finally:
        second.kill()
    assert not any("already in use" in line for line in second.lines), "\n".join(second.lines)
