"""A Topic's ``spec.streamingExport`` on the real Kubernetes node: the continuous export as a
long-running SparkApplication, in the chart's ``spark.submitter: job`` mode.

What a user relies on, and what only a real node shows: the operator's application keeps a driver
running (restartPolicy Always); a driver killed with SIGKILL is replaced by the Job, a deleted Job
by the operator, and each new driver goes on from the checkpoint on its PersistentVolumeClaim (a
static hostPath volume of the local node's StorageClass), so the Parquet files hold exactly the
acknowledged messages, none lost and none twice; the query's progress reaches the Topic's status;
removing the field stops it and deletes what the operator made.

Exactly is judged as Spark's readers see the folder: the files that the file sink's log
(``_spark_metadata``) lists. A driver killed in the middle of a batch may leave files of its own
that the log never lists; readers that go through Spark never see them.

Runs beside e2e/test_spark_on_kubernetes.py on the same node and release (conftest orders both
before the uninstall test); it adds only the chart's spark values.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.operator.harness import ROOT, condition

from e2e.cluster import FIGURES, Cluster, wait_for
from e2e.release import Release
from e2e.spark_export import (
    export_directory,
    install_crds,
    remove_directory,
    spark_operator_crds,
    wait_gone,
)
from e2e.test_spark_on_kubernetes import spark_values

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

RESOURCE = "spark-stream"
TOPIC = "persistent://acme/orders/spark-stream"
PARTITIONS = 2
MOUNT = "/exports"
APP = f"{RESOURCE}-streaming-export"
JOB = f"{APP}-submit"
CLAIM = f"{APP}-checkpoint"
#: Messages of each wave: the first landed while the driver is SIGKILLed, the second while the Job
#: is deleted, the third after.
WAVES = {"a": 20_000, "b": 20_000, "c": 10_000}


def topic_manifest(namespace: str) -> dict[str, Any]:
    spec = {
        "namespace": "acme/orders",
        "name": RESOURCE,
        "partitions": PARTITIONS,
        "lifecyclePolicy": "CleanUpAfterDeletion",
    }
    return {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": RESOURCE, "namespace": namespace},
        "spec": spec,
    }


def streaming_export(cluster: Cluster) -> dict[str, Any]:
    """Small micro-batches (4 entries each, a trigger a second), so that a wave takes many batches
    and the kills land while the query is busy; one executor on the 2-core node."""
    checkpoint: dict[str, Any] = {"deleteClaim": True, "size": "1Gi"}
    if cluster.storage_class:
        checkpoint["storageClassName"] = cluster.storage_class
    return {
        "target": f"file://{MOUNT}/{RESOURCE}",
        "triggerSeconds": 1,
        "maxEntriesPerTrigger": 4,
        "executors": 1,
        "checkpoint": checkpoint,
    }


def start_producer(release: Release, wave: str) -> str:
    """``magnetar produce`` of a wave in a pod (batching on); returns the pod's name."""
    cluster, name = release.cluster, f"{RESOURCE}-producer-{wave}"
    policy = "Never" if cluster.pods_reachable else "IfNotPresent"
    cluster.kubectl(
        "run", name, "-n", release.namespace, f"--image={release.image}", f"--image-pull-policy={policy}",
        "--restart=Never", f"--env=MAGNETAR_SERVICE_URL={release.service_url}", "--",
        "produce", TOPIC, "-n", str(WAVES[wave]), "-m", f"stream-e2e-{wave}-{{i}}",
    )  # fmt: skip
    return name


def wait_produced(release: Release, pod: str, count: int) -> None:
    """Exit code 0 and the count said: every message of the wave was acknowledged."""
    cluster, ns = release.cluster, release.namespace

    def finished() -> bool:
        phase = str(((cluster.get("pod", pod, ns) or {}).get("status") or {}).get("phase"))
        if phase == "Failed":
            raise AssertionError(cluster.kubectl("logs", "-n", ns, pod, check=False))
        return phase == "Succeeded"

    wait_for(f"{pod} to produce {count} messages", finished, 300, every=1)
    log = cluster.kubectl("logs", "-n", ns, pod)
    assert f"{count} messages produced" in log, log


def committed_files(target: Path) -> list[Path]:
    """The files the file sink's log lists (paths in it are the pods' ``file:/exports/...``)."""
    log = target / "_spark_metadata"
    files: set[Path] = set()
    for entry in sorted(log.iterdir()) if log.is_dir() else []:
        if entry.name.startswith(".") or entry.name.endswith(".tmp"):
            continue
        lines = entry.read_text().splitlines()
        if not lines or lines[0] != "v1":
            continue
        for line in lines[1:]:
            doc = json.loads(line)
            path = urllib.parse.unquote(urllib.parse.urlparse(doc["path"]).path)
            host = target.parent / Path(path).relative_to(MOUNT)
            if doc.get("action", "add") == "add":
                files.add(host)
            else:
                files.discard(host)
    return sorted(files)


def committed_rows(target: Path) -> Any:
    """The committed rows as one Arrow table (topic, ids, payload)."""
    import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

    columns = ["topic", "ledger_id", "entry_id", "batch_index", "payload"]
    tables = [pq.read_table(str(path), columns=columns) for path in committed_files(target)]
    if not tables:
        return pa.table({c: [] for c in columns})
    return pa.concat_tables(tables)


def wait_rows(target: Path, what: str, accept: Any, timeout: float = 600) -> int:
    def count() -> int | None:
        rows = int(committed_rows(target).num_rows)
        return rows if accept(rows) else None

    return int(wait_for(what, count, timeout, every=1))


def running_driver(cluster: Cluster, ns: str, not_named: set[str]) -> dict[str, Any]:
    """The Job's driver pod that runs now, other than the ones in ``not_named``."""

    def probe() -> dict[str, Any] | None:
        for pod in cluster.pods(ns, f"job-name={JOB}"):
            meta, status = pod["metadata"], pod.get("status") or {}
            if meta["name"] not in not_named and status.get("phase") == "Running" and not meta.get("deletionTimestamp"):
                return pod
        return None

    return dict(wait_for(f"a running driver pod of {JOB} other than {sorted(not_named)}", probe, 600, every=1))


def sigkill_pod_processes(pod: dict[str, Any]) -> list[int]:
    """SIGKILL every process of the pod's containers (not its sandbox's pause), found on this
    machine by the pod's cgroup: the driver dies as a process killed by the kernel would, and
    its pod fails (exit 137)."""
    uid = pod["metadata"]["uid"]
    marks = (uid, uid.replace("-", "_"))
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text()
            comm = (proc / "comm").read_text().strip()
        except OSError:
            continue
        if comm != "pause" and any(mark in cgroups for mark in marks):
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
            except ProcessLookupError:
                pass
    return killed


def streaming_status(cluster: Cluster, ns: str) -> dict[str, Any]:
    topic = cluster.get("topic", RESOURCE, ns) or {}
    return dict((topic.get("status") or {}).get("streamingExport") or {})


def test_streaming_export_survives_driver_and_job_kills_exactly_and_stops_when_removed(release: Release) -> None:
    cluster, ns = release.cluster, release.namespace
    if not cluster.pods_reachable:
        pytest.skip(
            "the export's hostPath directory and the driver's processes must be on this machine: local node only"
        )
    crds = spark_operator_crds()
    if crds is None:
        pytest.skip("no spark-operator CRDs ($MAGNETAR_SPARK_OPERATOR_CRDS, ../shared/spark-operator-crds)")
    install_crds(cluster, crds)
    exports = export_directory()
    target = exports / RESOURCE
    producers: list[str] = []
    try:
        release.helm_upgrade(*spark_values(release, exports))
        for example in ("tenant", "namespace"):
            cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / f"{example}.yaml"))
        cluster.apply(topic_manifest(ns))
        wait_for(
            f"Topic {RESOURCE} Ready",
            lambda: condition(cluster.get("topic", RESOURCE, ns)).get("status") == "True",
            180,
            every=1,
        )

        # The field: a long-running application, its claim, a driver that runs a first batch.
        started = time.monotonic()
        patch = {"spec": {"streamingExport": streaming_export(cluster)}}
        cluster.kubectl("patch", "topic", RESOURCE, "-n", ns, "--type=merge", "-p", json.dumps(patch))
        app = wait_for(f"SparkApplication {APP}", lambda: cluster.get("sparkapplication", APP, ns), 120, every=1)
        assert app["spec"]["restartPolicy"]["type"] == "Always", app["spec"]
        assert app["spec"]["arguments"][:2] == ["export", "--streaming"], app["spec"]["arguments"]
        first = running_driver(cluster, ns, set())

        def streaming_running() -> dict[str, Any] | None:
            topic = cluster.get("topic", RESOURCE, ns) or {}
            status = (topic.get("status") or {}).get("streamingExport") or {}
            running = condition(topic, "Streaming").get("reason") == "Running"
            return status if running and "batchId" in status else None

        status = wait_for("Streaming Running with a first batch in the Topic's status", streaming_running, 600)
        FIGURES["spark streaming: spec.streamingExport set to first batch in status (s)"] = round(
            time.monotonic() - started, 1
        )
        assert status["application"] == APP and status["checkpointClaim"] == CLAIM, status
        claim = cluster.get("pvc", CLAIM, ns)
        assert claim is not None and claim["status"]["phase"] == "Bound", claim

        # Wave a; the driver SIGKILLed while it lands it: the Job starts another pod.
        producers.append(start_producer(release, "a"))
        wait_produced(release, producers[-1], WAVES["a"])
        landed = wait_rows(target, "the first rows of wave a landed", lambda n: n > 0)
        killed = sigkill_pod_processes(first)
        assert killed, f"no process of pod {first['metadata']['name']} found on this machine"
        kill_at = time.monotonic()
        second = running_driver(cluster, ns, {first["metadata"]["name"]})
        FIGURES["spark streaming: driver SIGKILLed to a new driver pod running (s)"] = round(
            time.monotonic() - kill_at, 1
        )
        FIGURES["spark streaming: rows landed when the driver was killed"] = f"{landed} of {WAVES['a']}"

        # Wave b; the Job deleted while it lands: the operator makes a new Job, whose pod goes on.
        producers.append(start_producer(release, "b"))
        wait_produced(release, producers[-1], WAVES["b"])
        landed = wait_rows(target, "wave b landing", lambda n: n > WAVES["a"])
        old_job_uid = cluster.get("job", JOB, ns)["metadata"]["uid"]
        cluster.kubectl("delete", "job", JOB, "-n", ns, "--wait=false")
        delete_at = time.monotonic()
        wait_for(
            f"a new Job {JOB}",
            lambda: (cluster.get("job", JOB, ns) or {}).get("metadata", {}).get("uid") not in (None, old_job_uid),
            300,
            every=1,
        )
        running_driver(cluster, ns, {first["metadata"]["name"], second["metadata"]["name"]})
        FIGURES["spark streaming: Job deleted to a new driver pod running (s)"] = round(time.monotonic() - delete_at, 1)
        FIGURES["spark streaming: rows landed when the Job was deleted"] = f"{landed} of {WAVES['a'] + WAVES['b']}"

        # Wave c, to the third driver; then everything acknowledged is in the output, exactly once.
        producers.append(start_producer(release, "c"))
        wait_produced(release, producers[-1], WAVES["c"])
        total = sum(WAVES.values())
        wait_rows(target, f"all {total} rows landed", lambda n: n >= total)
        table = committed_rows(target)
        assert table.num_rows == total
        ids = zip(
            table.column("topic").to_pylist(),
            table.column("ledger_id").to_pylist(),
            table.column("entry_id").to_pylist(),
            table.column("batch_index").to_pylist(),
            strict=True,
        )
        assert len(set(ids)) == total
        payloads = Counter(bytes(p) for p in table.column("payload").to_pylist())
        sent = Counter(f"stream-e2e-{wave}-{i}".encode() for wave, n in WAVES.items() for i in range(n))
        assert payloads == sent, (sum((payloads - sent).values()), sum((sent - payloads).values()))
        assert set(table.column("topic").to_pylist()) == {f"{TOPIC}-partition-{i}" for i in range(PARTITIONS)}

        # The status follows: more drivers than the first, and no lag once everything has landed
        # (the source moves the query's subscription when Spark asks it what is new).
        def caught_up() -> dict[str, Any] | None:
            status = streaming_status(cluster, ns)
            settled = status.get("lagEntries") == 0
            return status if settled and status.get("restarts", 0) >= 1 else None

        status = wait_for("status.streamingExport: restarts >= 1, lag 0", caught_up, 180, every=1)
        assert status["state"] == "RUNNING" and status["batchId"] > 0, status
        FIGURES["spark streaming: status after the kills"] = {
            k: status.get(k) for k in ("restarts", "batchId", "batchRows", "lagEntries")
        }

        # Removing the field stops it: application, Job, driver and executors, claim, status gone.
        removed_at = time.monotonic()
        cluster.kubectl(
            "patch", "topic", RESOURCE, "-n", ns, "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/spec/streamingExport"}]),
        )  # fmt: skip
        wait_for(f"SparkApplication {APP} gone", lambda: cluster.get("sparkapplication", APP, ns) is None, 180)
        wait_for(f"Job {JOB} gone", lambda: cluster.get("job", JOB, ns) is None, 180)
        wait_gone(cluster, "the streaming driver pods gone", "pods", ns, f"job-name={JOB}", 180)
        wait_gone(cluster, "the streaming executor pods gone", "pods", ns, "spark-role=executor", 180)
        wait_for(f"claim {CLAIM} gone (deleteClaim)", lambda: cluster.get("pvc", CLAIM, ns) is None, 180)

        def status_cleared() -> bool:
            topic = cluster.get("topic", RESOURCE, ns) or {}
            return not condition(topic, "Streaming") and not (topic.get("status") or {}).get("streamingExport")

        wait_for("the Streaming condition and status.streamingExport gone", status_cleared, 120, every=1)
        FIGURES["spark streaming: field removed to everything gone (s)"] = round(time.monotonic() - removed_at, 1)
        assert committed_rows(target).num_rows == total
    except AssertionError as exc:
        # What the operator did (or failed to do) is in its log: say it with the failure.
        log = cluster.kubectl("logs", "-n", ns, "deploy/magnetar-operator", "--tail", "120", check=False)
        raise AssertionError(f"{exc}\n--- operator log:\n{log}") from exc
    finally:
        for pod in producers:
            cluster.kubectl("delete", "pod", pod, "-n", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "topic", RESOURCE, "-n", ns, "--wait=true", check=False, timeout=240)
        wait_gone(cluster, "the streaming export's pods gone", "pods", ns, "spark-role", 180)
        remove_directory(exports)
