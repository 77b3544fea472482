"""What the Spark export test needs on the node: the spark-operator CRDs, a host directory the
pods write Parquet into, a watch of Spark's executor pods, and the Parquet read back.

Why a watch: Spark deletes its executor pods when the application ends (and the submit Job's
driver pod is all that stays), so "Spark started executors" can only be seen while it runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.operator.harness import ROOT, condition

from e2e.cluster import IMAGE_UID, Cluster, CommandFailed, wait_for

#: Where the kubeflow spark-operator's CRDs are looked for, first found wins (they are another
#: project's files, kept outside the repository: ../shared/spark-operator-crds/README.md).
CRD_DIRS = [
    os.environ.get("MAGNETAR_SPARK_OPERATOR_CRDS", ""),
    str(ROOT.parent / "shared" / "spark-operator-crds"),
    "/work/shared/spark-operator-crds",
]
CRD_NAMES = ("sparkapplications.sparkoperator.k8s.io", "scheduledsparkapplications.sparkoperator.k8s.io")


def spark_operator_crds() -> list[Path] | None:
    """The two CRD files of the first directory that has them, or None."""
    for folder in filter(None, CRD_DIRS):
        files = sorted(Path(folder).glob("sparkoperator.k8s.io_*.yaml"))
        if len(files) >= 2:
            return files
    return None


def install_crds(cluster: Cluster, files: list[Path]) -> None:
    """``kubectl create`` (each CRD is ~0.8 MB: plain apply's last-applied annotation is too big);
    one that exists already is kept. Returns once the API server serves both kinds."""
    for path in files:
        try:
            cluster.kubectl("create", "-f", str(path), timeout=180)
        except CommandFailed as exc:
            if "AlreadyExists" not in str(exc.stderr):
                raise

    # Polled, not `kubectl wait`: kubectl 1.20 errors out on a CRD that has no conditions yet.
    def established() -> bool:
        crds = [cluster.get("crd", name) or {} for name in CRD_NAMES]
        return all(condition(crd, "Established").get("status") == "True" for crd in crds)

    wait_for("the spark-operator CRDs Established", established, 120, every=0.5)


def export_directory() -> Path:
    """A fresh host directory for a hostPath volume: the pods run as uid 10000, so 0777 (the
    sticky-less mode a scratch volume needs; the test removes it)."""
    path = Path(tempfile.mkdtemp(prefix="magnetar-e2e-exports-", dir="/tmp"))
    path.chmod(0o777)
    return path


def remove_directory(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class PodSeen:
    name: str
    #: time.monotonic() of the first sample that had it.
    first_seen: float
    phases: set[str] = field(default_factory=set)
    #: mountPath of each volume mount of the first container.
    mounts: set[str] = field(default_factory=set)
    run_as: int | None = None
    owners: set[str] = field(default_factory=set)


@contextmanager
def watch_pods(cluster: Cluster, namespace: str, selector: str, every: float = 0.5) -> Iterator[dict[str, PodSeen]]:
    """Every pod of ``selector`` seen while in the block (sampled every ``every`` seconds)."""
    seen: dict[str, PodSeen] = {}
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                pods = cluster.pods(namespace, selector)
            except Exception:  # a sample lost to an API hiccup; the next one follows
                pods = []
            for pod in pods:
                meta, spec = pod["metadata"], pod["spec"]
                entry = seen.setdefault(meta["name"], PodSeen(meta["name"], time.monotonic()))
                entry.phases.add(str((pod.get("status") or {}).get("phase")))
                entry.mounts |= {m["mountPath"] for m in spec["containers"][0].get("volumeMounts") or []}
                entry.owners |= {f"{r['kind']}/{r['name']}" for r in meta.get("ownerReferences") or []}
                ctx = spec["containers"][0].get("securityContext") or spec.get("securityContext") or {}
                entry.run_as = ctx.get("runAsUser", entry.run_as)
            stop.wait(every)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(10)


def read_export(target: Path) -> Any:
    """The committed export under ``target`` as one Arrow table (``date=`` directories are a hive
    partitioning; ``_magnetar/`` staging and manifests are skipped, as Spark skips them)."""
    import pyarrow.dataset as ds  # type: ignore[import-untyped, unused-ignore]

    return ds.dataset(str(target), format="parquet", partitioning="hive").to_table()


def wait_gone(cluster: Cluster, what: str, kind: str, namespace: str, selector: str, timeout: float) -> None:
    def gone() -> bool:
        out = cluster.kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "name")
        return not out.strip()

    wait_for(what, gone, timeout, every=1)


def owned_by_uid(path: Path) -> bool:
    """Whether every committed Parquet file under ``path`` was written by the images' user."""
    files = [p for p in path.rglob("*.parquet") if "_magnetar" not in p.parts]
    return bool(files) and all(p.stat().st_uid == IMAGE_UID for p in files)
