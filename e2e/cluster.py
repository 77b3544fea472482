"""The cluster the end-to-end suite runs against, and the few verbs the tests need on it.

Why a thin wrapper over the kubectl and helm binaries rather than the Python client: the suite
checks what a user sees, and users run kubectl and helm; their exit codes and messages are the
interface. Every wait is a poll of a condition with a deadline that names what it waited for.

Two ways to get a cluster (DESIGN.md section 7):
- ``LocalNode``: the real single-node Kubernetes of ``scripts/k8s/up.sh`` (kubelet on containerd,
  kube-proxy, CNI bridge, DNS) in a fresh run directory, with the images imported from their OCI
  archives and static hostPath PersistentVolumes (there is no dynamic provisioning here); it is
  taken down by ``scripts/k8s/down.sh``, which stops every process it started by PID.
- an existing cluster named by ``MAGNETAR_E2E_KUBECONFIG`` (kind: ``e2e/kind/run.sh``), whose
  default StorageClass provisions volumes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.operator.harness import BIN, K8S_HOME, SCRIPTS

#: Where the last run's node logs are kept for a look after a failure (the run directory is removed).
LAST_LOGS = Path(tempfile.gettempdir()) / "magnetar-e2e-last"
LOCAL_STORAGE_CLASS = "magnetar-local"
#: The user and group every Magnetar image runs as; static volumes are handed to it.
IMAGE_UID = 10000

T = TypeVar("T")
#: Figures the suite measured (install time, recovery times...), printed at the end of the run.
FIGURES: dict[str, object] = {}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``.

    Unlike tests.operator.harness.wait_for, which takes any exception for an API hiccup, only a
    failed kubectl call or an unreadable answer is retried here: a probe's AssertionError (a Job or
    pod that failed) ends the wait at once, with its own message."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except (subprocess.CalledProcessError, ValueError, KeyError) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error!r})")
        time.sleep(every)  # polling interval of a condition with a deadline


class CommandFailed(subprocess.CalledProcessError):
    """A failed kubectl or helm call whose message carries what the tool said (helm's schema
    errors, kubectl's Forbidden...), which CalledProcessError's own message leaves out."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {str(self.stderr or '').strip()[-2000:]}"


@dataclass
class Cluster:
    """kubectl and helm bound to one kubeconfig."""

    kubeconfig: Path
    storage_class: str | None
    #: Pod-network addresses are reachable from this process (true on the local node).
    pods_reachable: bool

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{BIN}:{os.environ['PATH']}"}

    def run(self, *argv: str, input: str | None = None, check: bool = True, timeout: float = 300) -> str:
        proc = subprocess.run(
            argv, input=input, capture_output=True, text=True, env=self.env(), timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise CommandFailed(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc.stdout

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        return self.run(_tool("kubectl"), *args, input=input, check=check, timeout=timeout)

    def helm(self, *args: str, timeout: float = 600) -> str:
        return self.run(_tool("helm"), *args, timeout=timeout)

    def get(self, kind: str, name: str = "", namespace: str | None = None) -> Any:
        """``kubectl get -o json``; None when a named object does not exist."""
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        args += ["-n", namespace] if namespace else ["-A"] if not name else []
        proc = subprocess.run(
            [_tool("kubectl"), *args], capture_output=True, text=True, env=self.env(), timeout=60, check=False
        )
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise CommandFailed(proc.returncode, args, proc.stdout, proc.stderr)
        return json.loads(proc.stdout)

    def apply(self, manifest: dict[str, Any] | str) -> str:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.kubectl("apply", "-f", "-", input=text)

    def diagnose(self, namespace: str) -> str:
        """What a user would look at when a release does not get Ready: the pods with their
        restarts, the namespace's warning events, and the last log lines of every container that
        restarted or is not ready (its previous run's, where it crashed). Best effort: a failing
        kubectl call is reported in the text, never raised over the failure being diagnosed."""
        parts = []
        for args in (
            ["get", "pods", "-n", namespace, "-o", "wide"],
            ["get", "events", "-n", namespace, "--field-selector", "type=Warning", "--sort-by", ".lastTimestamp"],
        ):
            out = self.run(_tool("kubectl"), *args, check=False, timeout=60)
            parts.append(f"$ kubectl {' '.join(args)}\n{out[-4000:]}")
        try:
            pods = self.pods(namespace, "")
        except (subprocess.SubprocessError, ValueError) as exc:
            return "\n".join([*parts, f"(pods unreadable: {exc})"])
        for pod in pods:
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if status.get("ready") and not status.get("restartCount"):
                    continue
                previous = ["--previous"] if status.get("restartCount") else []
                args = ["logs", "-n", namespace, pod["metadata"]["name"], "-c", status["name"], "--tail", "25"]
                out = self.run(_tool("kubectl"), *args, *previous, check=False, timeout=60)
                parts.append(f"$ kubectl {' '.join(args + previous)}\n{out[-3000:]}")
        text = "\n".join(parts)
        logs = self.kubeconfig.parent / "logs"
        if logs.is_dir():  # the local node: kept with its logs in LAST_LOGS after down()
            (logs / f"diagnose-{namespace}.txt").write_text(text)
        return text

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        select = ["-l", selector] if selector else []
        doc = json.loads(self.kubectl("get", "pods", "-n", namespace, *select, "-o", "json"))
        return list(doc.get("items", []))


def _tool(name: str) -> str:
    local = BIN / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (scripts/k8s/build.sh, scripts/k8s/helm.sh)")
    return found


def pod_ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def missing_for_local_node() -> list[str]:
    """What this machine lacks to run the local node: binaries, packages, the helm binary."""
    missing = [
        str(BIN / b) for b in ("kube-apiserver", "kubelet", "kube-proxy", "kubectl", "helm") if not (BIN / b).exists()
    ]
    missing += [
        tool for tool in ("containerd", "runc", "ctr", "dnsmasq", "podman", "etcd") if shutil.which(tool) is None
    ]
    return missing


def static_volumes(root: Path, count: int, size: str) -> list[dict[str, Any]]:
    """``count`` hostPath PersistentVolumes under ``root`` for the local node's StorageClass.

    Retain, not Delete: nothing here can delete a hostPath volume (no provisioner), and a released
    volume must not be bound again with another bookie's data on it. The directories belong to the
    images' user, as a provisioner's fsGroup handling would arrange on a real cluster."""
    out = []
    for i in range(count):
        path = root / f"pv-{i:02d}"
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, IMAGE_UID, IMAGE_UID)
        path.chmod(0o700)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"magnetar-e2e-pv-{i:02d}", "labels": {"magnetar.dev/e2e": "true"}},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": LOCAL_STORAGE_CLASS,
                    "hostPath": {"path": str(path), "type": "Directory"},
                },
            }
        )
    return out


def storage_class() -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": LOCAL_STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }


@dataclass
class LocalNode:
    """One run of scripts/k8s/up.sh in a fresh directory; ``down()`` stops it by PID."""

    images: str
    run_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="magnetar-e2e-", dir="/tmp")))

    def script_env(self) -> dict[str, str]:
        return {**os.environ, "R": str(self.run_dir), "K8S_HOME": str(K8S_HOME), "IMAGES": self.images}

    def up(self) -> Cluster:
        started = time.monotonic()
        log = self.run_dir / "up.log"
        with log.open("w") as out:
            for stale in reap_stale_runs(self.run_dir.parent, keep=self.run_dir):
                out.write(f"reaped {stale}: a node that was killed rather than taken down\n")
            out.flush()
            proc = subprocess.run(
                ["bash", str(SCRIPTS / "up.sh")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.script_env(),
                timeout=420,
            )
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/k8s/up.sh failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
        cluster = Cluster(self.run_dir / "admin.kubeconfig", LOCAL_STORAGE_CLASS, pods_reachable=True)
        FIGURES["node up (s)"] = round(time.monotonic() - started, 1)
        cluster.apply(storage_class())
        for pv in static_volumes(self.run_dir / "volumes", 16, "2Gi"):
            cluster.apply(pv)
        return cluster

    def down(self) -> str:
        if (self.run_dir / "logs").is_dir():
            shutil.rmtree(LAST_LOGS, ignore_errors=True)
            shutil.copytree(self.run_dir / "logs", LAST_LOGS, dirs_exist_ok=True)
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "down.sh")],
            capture_output=True,
            text=True,
            env={**self.script_env(), "CLEAN": "1"},
            timeout=300,
            check=False,
        )
        return proc.stdout + proc.stderr


def reap_stale_runs(parent: Path, keep: Path) -> list[Path]:
    """Unmount and remove the run directories of local nodes that were killed (CI cancelled, a
    machine's session ended) rather than taken down by down.sh.

    Such a directory keeps its pods' network namespaces alive through their mounts, and with them
    addresses on the pod network; with the bridge gone (up.sh deletes a stale one) they reach
    nothing, but they pile up (about 110 mounts a run). A directory is stale only when none of the
    processes up.sh recorded is alive and no containerd shim serves its socket: a node another
    suite is running right now is left alone."""
    reaped = []
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    for run_dir in sorted(parent.glob("magnetar-e2e-*")):
        if run_dir == keep or not (run_dir / "pid").is_dir() or any(running_pids(run_dir)):
            continue
        shims = subprocess.run(
            ["pgrep", "-f", f"containerd-shim-runc-v2 .*-address {run_dir}/ctd/containerd.sock"],
            capture_output=True,
            check=False,
        )
        if shims.returncode == 0:
            continue
        for point in sorted((m for m in points if m.startswith(f"{run_dir}/")), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)
        reaped.append(run_dir)
    return reaped


def running_pids(run_dir: Path) -> Iterator[int]:
    """PIDs recorded by up.sh that are still alive (none after down.sh)."""
    for pidfile in (run_dir / "pid").glob("*") if (run_dir / "pid").is_dir() else []:
        try:
            pid = int(pidfile.read_text().strip())
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            continue
        yield pid
