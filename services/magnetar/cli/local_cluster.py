"""``magnetar local-cluster``: etcd, N bookies and M brokers as child processes on loopback.

Each child is a real process (the same commands an operator would run by hand), so kill -9,
SIGSTOP and restarts of any one of them behave as they would on separate machines. The first
broker listens on the standalone's ports (6650, 8080), so every example and tool that works
against standalone works against the cluster. Logs go to ``DATA_DIR/logs``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Child:
    role: str
    name: str
    proc: subprocess.Popen[bytes]
    address: str = ""
    ready: threading.Event = field(default_factory=threading.Event)


def _pump(child: Child, log_path: Path, marker: str | None) -> None:
    """Copy the child's output to its log; its first line containing ``marker`` means ready."""
    assert child.proc.stdout is not None
    with open(log_path, "ab") as log:
        for raw in child.proc.stdout:
            log.write(raw)
            log.flush()
            line = raw.decode(errors="replace")
            if marker is not None and marker in line:
                child.ready.set()


def _spawn(role: str, name: str, argv: list[str], logs: Path, marker: str | None) -> Child:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    child = Child(role, name, proc)
    threading.Thread(target=_pump, args=(child, logs / f"{name}.log", marker), daemon=True).start()
    return child


def _wait(child: Child, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not child.ready.wait(0.1):
        if child.proc.poll() is not None:
            raise RuntimeError(f"{child.name} exited with {child.proc.returncode} (see its log)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{child.name} not ready after {timeout}s")


def _wait_etcd(child: Child, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {child.proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if b"true" in resp.read():
                    child.ready.set()
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("etcd not healthy")


def run_local_cluster(args: argparse.Namespace) -> int:
    etcd_bin = shutil.which("etcd")
    if etcd_bin is None:
        print("local-cluster needs etcd: apt-get install etcd-server", file=sys.stderr)
        return 2
    data = Path(args.data_dir).resolve()
    logs = data / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    py = [sys.executable, "-m", "magnetar.cli.main"]
    children: list[Child] = []
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        ep = args.etcd_port
        etcd = _spawn(
            "etcd",
            "etcd",
            [
                etcd_bin,
                "--name",
                "local",
                "--data-dir",
                str(data / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{ep}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{ep}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{ep + 1}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{ep + 1}",
                "--initial-cluster",
                f"local=http://127.0.0.1:{ep + 1}",
            ],
            logs,
            None,  # ready when /health says so (_wait_etcd)
        )
        etcd.address = f"127.0.0.1:{ep}"
        children.append(etcd)
        _wait_etcd(etcd, ep)
        url = f"etcd://127.0.0.1:{ep}"
        for i in range(args.bookies):
            port = args.bookie_port + i
            b = _spawn(
                "bookie",
                f"bookie-{i}",
                [*py, "bookie", "--metadata-url", url, "--data-dir", str(data / f"bookie-{i}"), "--port", str(port)],
                logs,
                "magnetar bookie",
            )
            b.address = f"127.0.0.1:{port}"
            children.append(b)
        for b in children[1:]:
            _wait(b, 60)
        for i in range(args.brokers):
            port, web = args.broker_port + i, args.web_port + i
            br = _spawn(
                "broker",
                f"broker-{i}",
                [
                    *py,
                    "broker",
                    "--metadata-url",
                    url,
                    "--port",
                    str(port),
                    "--web-port",
                    str(web),
                    "--ensemble-size",
                    str(args.ensemble_size),
                    "--write-quorum",
                    str(args.write_quorum),
                    "--ack-quorum",
                    str(args.ack_quorum),
                ],
                logs,
                "magnetar broker ready",
            )
            br.address = f"magnetar://127.0.0.1:{port} admin http://127.0.0.1:{web}"
            children.append(br)
        for br in children[1 + args.bookies :]:
            _wait(br, 60)
        print(f"magnetar local-cluster ready (data {data}, logs {logs})", flush=True)
        for c in children:
            print(f"  {c.role:7} {c.name:10} pid {c.proc.pid:<8} {c.address}", flush=True)
        while not stop.wait(0.5):
            for c in children:
                code = c.proc.poll()
                if code is not None and c.ready.is_set():
                    print(f"  {c.name} (pid {c.proc.pid}) exited with {code}", flush=True)
                    c.ready.clear()
        return 0
    finally:
        # Brokers first (graceful unload needs bookies and etcd), then bookies, then etcd.
        for group in ("broker", "bookie", "etcd"):
            members = [c for c in children if c.role == group and c.proc.poll() is None]
            for c in members:
                os.killpg(c.proc.pid, signal.SIGTERM)
            for c in members:
                try:
                    c.proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(c.proc.pid, signal.SIGKILL)
