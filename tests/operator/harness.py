"""Helpers of the operator tests: the control plane, the operator subprocess, polling.

Everything is awaited by polling the API with a deadline (`wait_for`), never by fixed sleeps:
on a loaded two-core machine a sleep is either too short or wastes time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.support.standalone import StandaloneProcess
from tests.support.standalone import admin_call as standalone_admin_call

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "k8s"
K8S_HOME = Path(os.environ.get("K8S_HOME", Path.home() / ".cache" / "k8s-local" / "1.20.2"))
BIN = Path(os.environ.get("BIN", K8S_HOME / "bin"))
#: The drift timer interval the operator runs with in these tests (seconds).
INTERVAL = 3.0
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, every: float = 0.2) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = probe()
        except Exception as exc:  # the API may be briefly unavailable; keep polling until the deadline
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(every)


def free_port(pair: bool = False) -> int:
    """A free loopback port (and, with pair=True, one whose successor is free too, for etcd)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not pair:
            return port
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port pair")


# ----------------------------------------------------------------------------- control plane
@dataclass
class ControlPlane:
    run_dir: Path
    kubeconfig: Path
    started_in: float

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [str(BIN / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout + (proc.stderr if not check else "")

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        out = subprocess.run(
            [
                str(BIN / "kubectl"),
                f"--kubeconfig={self.kubeconfig}",
                "-n",
                namespace,
                "get",
                kind,
                name,
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            if "NotFound" in out.stderr or "not found" in out.stderr:
                return None
            raise AssertionError(f"kubectl get {kind} {name}: {out.stderr.strip()}")
        return dict(json.loads(out.stdout))

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        out = self.kubectl(
            "-n", namespace, "get", "events", "-o", "json", f"--field-selector=involvedObject.name={name}"
        )
        return list(json.loads(out)["items"])


def gone(cp: ControlPlane, kind: str, name: str, namespace: str) -> bool:
    """Whether the object is absent (a probe for `wait_for`, e.g. after garbage collection)."""
    return cp.get(kind, name, namespace) is None


def binaries_missing() -> list[str]:
    wanted = [BIN / "kube-apiserver", BIN / "kube-controller-manager", BIN / "kubectl"]
    missing = [str(p) for p in wanted if not os.access(p, os.X_OK)]
    if shutil.which("etcd") is None:
        missing.append("etcd (apt-get install etcd-server, or scripts/k8s/deps.sh control-plane)")
    return missing


# ----------------------------------------------------------------------------- broker
def admin_call(sa: StandaloneProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """The broker's admin REST API under ``/admin/v2/``, called directly (independent of the
    operator's client)."""
    return standalone_admin_call(sa, method, "/admin/v2/" + path, body)


# ----------------------------------------------------------------------------- operator
@dataclass
class OperatorProcess:
    """`kopf run -m magnetar_operator --all-namespaces` as a subprocess, restartable."""

    kubeconfig: Path
    admin_url: str
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    #: Watch only these namespaces (a second operator beside the session's); empty: all of them.
    namespaces: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self, *, console_script: bool = False) -> None:
        """Start with `kopf run -m magnetar_operator --all-namespaces`, or with the
        `magnetar-operator` console script (which must mean the same)."""
        port = free_port()
        env = dict(
            os.environ,
            KUBECONFIG=str(self.kubeconfig),
            MAGNETAR_ADMIN_URL=self.admin_url,
            MAGNETAR_RECONCILE_INTERVAL=str(INTERVAL),
            MAGNETAR_RETRY_DELAY="1",
            MAGNETAR_ADMIN_TIMEOUT="3",
            PYTHONUNBUFFERED="1",
            **self.extra_env,
        )
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== operator start #{self.starts} =====\n".encode())
        log.flush()
        liveness = f"--liveness=http://127.0.0.1:{port}/healthz"
        scope = [f"--namespace={n}" for n in self.namespaces]
        if console_script:
            script = Path(sys.executable).with_name("magnetar-operator")
            command = [str(script) if script.exists() else "magnetar-operator", *scope, liveness]
        else:
            kopf_run = [sys.executable, "-m", "kopf", "run", "-m", "magnetar_operator"]
            command = [*kopf_run, *(scope or ["--all-namespaces"]), "--standalone", liveness]
        self.proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(ROOT),
        )

        def alive() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_for("the operator's liveness endpoint", alive, timeout=60)

    def log_tail(self, n: int = 80) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill9()


POOL_NAMESPACE = "magnetar-system"


def condition(obj: dict[str, Any] | None, type_: str = "Ready") -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}
