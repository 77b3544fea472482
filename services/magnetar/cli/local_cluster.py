"""``magnetar local-cluster``: etcd, N bookies and M brokers as child processes on loopback.

Each child is a real process (the same commands an operator would run by hand), so kill -9,
SIGSTOP and restarts of any one of them behave as they would on separate machines. The first
broker listens on the standalone's ports (6650, 8080), so every example and tool that works
against standalone works against the cluster. Logs go to ``DATA_DIR/logs``.

The children die with the supervisor, however it ends: a clean stop (SIGINT/SIGTERM) stops the
brokers, then the bookies, then etcd; a kill -9 of the supervisor reaches every child through
``PR_SET_PDEATHSIG`` (Linux), set in the child between fork and exec so it holds for the etcd
binary too. The kernel sends that signal when the *thread* that forked the child ends, so children
are spawned from the main thread only. Every port is checked before any child starts, and a port
taken anyway (or a child that fails to start) is reported in one line.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# A child's own report of a taken port: ours ("port N is already in use"), etcd's (Go's net error).
_PORT_TAKEN = re.compile(r"port (\d+) is already in use|:(\d+): bind: address already in use")


class StartFailed(Exception):
    """The cluster could not start; the message is the one line to print."""


@dataclass
class Child:
    role: str
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    address: str = ""
    ready: threading.Event = field(default_factory=threading.Event)
    output_done: threading.Event = field(default_factory=threading.Event)
    last_lines: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=50))


def _pump(child: Child, marker: str | None) -> None:
    """Copy the child's output to its log; its first line containing ``marker`` means ready."""
    assert child.proc.stdout is not None
    with open(child.log_path, "ab") as log:
        for raw in child.proc.stdout:
            log.write(raw)
            log.flush()
            line = raw.decode(errors="replace")
            child.last_lines.append(line)
            if marker is not None and marker in line:
                child.ready.set()
    child.output_done.set()


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the child when this process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _spawn(role: str, name: str, argv: list[str], logs: Path, marker: str | None) -> Child:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("spawn children from the main thread: PR_SET_PDEATHSIG follows the forking thread")
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a ^C in the terminal reaches the supervisor only, which stops them in order
        preexec_fn=_die_with_parent(),
    )
    child = Child(role, name, proc, logs / f"{name}.log")
    threading.Thread(target=_pump, args=(child, marker), daemon=True).start()
    return child


def _port_plan(args: argparse.Namespace) -> dict[int, tuple[str, str]]:
    """Every port the cluster will listen on: what it is for, and the option that moves it."""
    plan = {
        args.etcd_port: ("etcd client port", "--etcd-port"),
        args.etcd_port + 1: ("etcd peer port", "--etcd-port"),
    }
    for i in range(args.bookies):
        plan[args.bookie_port + i] = (f"bookie-{i} port", "--bookie-port")
    for i in range(args.brokers):
        plan[args.broker_port + i] = (f"broker-{i} service port", "--broker-port")
        plan[args.web_port + i] = (f"broker-{i} admin port", "--web-port")
    return plan


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no obstacle
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _port_message(port: int, plan: dict[int, tuple[str, str]], who: str) -> str:
    what, flag = plan.get(port, (who, ""))
    hint = f"; pass {flag} to choose another" if flag else ""
    return f"magnetar local-cluster: port {port} is already in use ({what}){hint}"


def _exited(child: Child, plan: dict[int, tuple[str, str]]) -> StartFailed:
    """One line for a child that ended before it was ready: a taken port when it says so."""
    child.output_done.wait(5)  # its last words, for the port
    for line in reversed(child.last_lines):
        m = _PORT_TAKEN.search(line)
        if m:
            return StartFailed(_port_message(int(m.group(1) or m.group(2)), plan, child.name))
    return StartFailed(
        f"magnetar local-cluster: {child.name} exited with {child.proc.returncode} before it was ready; "
        f"see {child.log_path}"
    )


def _wait(child: Child, timeout: float, plan: dict[int, tuple[str, str]]) -> None:
    deadline = time.monotonic() + timeout
    while not child.ready.wait(0.1):
        if child.proc.poll() is not None:
            raise _exited(child, plan)
        if time.monotonic() > deadline:
            raise StartFailed(f"magnetar local-cluster: {child.name} not ready after {timeout}s; see {child.log_path}")


def _wait_etcd(child: Child, port: int, plan: dict[int, tuple[str, str]], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise _exited(child, plan)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
                if b"true" in resp.read():
                    child.ready.set()
                    return
        except OSError:
            pass
        time.sleep(0.1)  # poll interval while etcd boots; there is no event to wait on
    raise StartFailed(f"magnetar local-cluster: etcd not healthy after {timeout}s; see {child.log_path}")


def run_local_cluster(args: argparse.Namespace) -> int:
    etcd_bin = shutil.which("etcd")
    if etcd_bin is None:
        print("local-cluster needs etcd: apt-get install etcd-server", file=sys.stderr)
        return 2
    plan = _port_plan(args)
    for port in sorted(plan):
        if _port_taken(port):
            print(_port_message(port, plan, "local-cluster"), file=sys.stderr, flush=True)
            return 1
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
        _wait_etcd(etcd, ep, plan)
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
            _wait(b, 60, plan)
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
            _wait(br, 60, plan)
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
    except StartFailed as exc:
        print(exc, file=sys.stderr, flush=True)
        return 1
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
