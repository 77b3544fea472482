"""A Topic's ``spec.export`` run by Spark on the real Kubernetes node, in the chart's
``spark.submitter: job`` mode (issue 11).

The operator turns the Topic into a SparkApplication (validated by the API server against the
kubeflow spark-operator's own CRD schema) and, without the Go spark-operator, runs it as a Job
doing ``spark-submit --master k8s://https://kubernetes.default.svc`` in client mode: the Job's pod
is the driver, and Spark itself starts the executor pods. The export reads the topic's ledgers
from the bookies and writes Parquet to a hostPath volume mounted in the driver and the executors;
the test reads that directory back on this machine and compares it with what was produced.

Runs after the main e2e file's upgrade tests and before its uninstall test (conftest orders
it), on the same node and release; it reinstalls nothing, it only adds the chart's spark values.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.operator.harness import ROOT, condition

from e2e.cluster import FIGURES, wait_for
from e2e.release import Release
from e2e.spark_export import (
    export_directory,
    install_crds,
    owned_by_uid,
    read_export,
    remove_directory,
    spark_operator_crds,
    wait_gone,
    watch_pods,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

MESSAGES = 20_000
RESOURCE = "spark-export"
TOPIC = "persistent://acme/orders/spark-export"
PARTITIONS = 2
MOUNT = "/exports"
PRODUCER = "spark-export-producer"


def spark_values(release: Release, exports: Path) -> list[str]:
    """The chart's job mode, the spark image of this run, and the export volume (hostPath)."""
    return [
        "spark.submitter=job",
        "spark.pollInterval=2",
        "spark.image.repository=localhost/magnetar-spark",
        f"spark.image.tag={release.images.tag}",
        "spark.volumes[0].name=exports",
        f"spark.volumes[0].hostPath.path={exports}",
        "spark.volumes[0].hostPath.type=Directory",
        "spark.volumeMounts[0].name=exports",
        f"spark.volumeMounts[0].mountPath={MOUNT}",
    ]


def topic_manifest(namespace: str) -> dict[str, Any]:
    """The Topic, without spec.export yet: the export is asked for once the messages are in."""
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


def produce(release: Release, count: int) -> None:
    """``magnetar produce`` in a pod, as the README's in-cluster client (batching on: rows carry
    batch indexes). Exit code 0 means every message was acknowledged."""
    cluster = release.cluster
    policy = "Never" if cluster.pods_reachable else "IfNotPresent"
    cluster.kubectl(
        "run", PRODUCER, "-n", release.namespace, f"--image={release.image}", f"--image-pull-policy={policy}",
        "--restart=Never", f"--env=MAGNETAR_SERVICE_URL={release.service_url}", "--",
        "produce", TOPIC, "-n", str(count), "-m", "spark-e2e-{i}",
    )  # fmt: skip

    def finished() -> bool:
        pod = cluster.get("pod", PRODUCER, release.namespace) or {}
        phase = str(pod.get("status", {}).get("phase"))
        if phase == "Failed":
            raise AssertionError(cluster.kubectl("logs", "-n", release.namespace, PRODUCER, check=False))
        return phase == "Succeeded"

    wait_for(f"{PRODUCER} to produce {count} messages", finished, 300, every=1)
    log = cluster.kubectl("logs", "-n", release.namespace, PRODUCER)
    assert f"{count} messages produced" in log, log


def driver_log(release: Release, job: str) -> str:
    return release.cluster.kubectl("logs", "-n", release.namespace, f"job/{job}", check=False, timeout=60)


def test_topic_export_runs_on_spark_executors_in_job_mode(release: Release) -> None:
    cluster, ns = release.cluster, release.namespace
    if not cluster.pods_reachable:
        pytest.skip("the export's hostPath directory must be on this machine: local node only (scripts/k8s/up.sh)")
    crds = spark_operator_crds()
    if crds is None:
        pytest.skip("no spark-operator CRDs ($MAGNETAR_SPARK_OPERATOR_CRDS, ../shared/spark-operator-crds)")
    install_crds(cluster, crds)
    exports = export_directory()
    try:
        release.helm_upgrade(*spark_values(release, exports))
        for example in ("tenant", "namespace"):
            cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "examples" / f"{example}.yaml"))
        created = time.monotonic()
        cluster.apply(topic_manifest(ns))
        wait_for(
            f"Topic {RESOURCE} Ready",
            lambda: condition(cluster.get("topic", RESOURCE, ns)).get("status") == "True",
            180,
            every=1,
        )
        produce(release, MESSAGES)

        app_name = f"{RESOURCE}-export"
        job = f"{app_name}-submit"
        export = {"target": f"file://{MOUNT}/{RESOURCE}", "format": "parquet", "executors": 2}
        with (
            watch_pods(cluster, ns, "spark-role=executor") as executors,
            watch_pods(cluster, ns, f"job-name={job}") as drivers,
        ):
            started = time.monotonic()
            cluster.kubectl(
                "patch", "topic", RESOURCE, "-n", ns, "--type=merge", "-p", json.dumps({"spec": {"export": export}})
            )

            def job_done() -> bool:
                status = (cluster.get("job", job, ns) or {}).get("status") or {}
                if status.get("failed"):
                    raise AssertionError(f"Job {job} failed; driver log:\n{driver_log(release, job)[-6000:]}")
                return bool(status.get("succeeded"))

            wait_for(f"the submit Job {job} to complete", job_done, 900, every=1)
            finished = time.monotonic()

        # Spark started the executors: pods of role executor, owned by the driver (the Job's pod),
        # with the export volume mounted; they are gone by now (Spark deletes them at the end).
        assert len(drivers) == 1, drivers
        driver = next(iter(drivers))
        assert len(executors) >= 2, executors
        for pod in executors.values():
            assert f"Pod/{driver}" in pod.owners, pod
            assert MOUNT in pod.mounts, pod
            assert "Running" in pod.phases, pod
        assert MOUNT in drivers[driver].mounts

        def app_completed() -> dict[str, Any] | None:
            app = cluster.get("sparkapplication", app_name, ns) or {}
            state = ((app.get("status") or {}).get("applicationState") or {}).get("state")
            return app if state == "COMPLETED" else None

        app = wait_for(f"SparkApplication {app_name} COMPLETED", app_completed, 120, every=1)
        assert app["spec"]["type"] == "Python" and app["spec"]["executor"]["instances"] == 2, app["spec"]

        def exported() -> dict[str, Any] | None:
            topic = cluster.get("topic", RESOURCE, ns)
            cond = condition(topic, "Exported")
            return topic if cond.get("reason") == "Succeeded" and (topic.get("status") or {}).get("export") else None

        topic = wait_for(f"Topic {RESOURCE}: Exported Succeeded", exported, 120, every=1)
        status = topic["status"]["export"]
        assert status["rows"] == MESSAGES, status
        assert status["bytes"] > 0 and status["application"] == app_name, status
        result_lines = [x for x in driver_log(release, job).splitlines() if x.startswith("MAGNETAR_RESULT ")]
        assert result_lines, driver_log(release, job)[-4000:]
        result = json.loads(result_lines[-1].removeprefix("MAGNETAR_RESULT "))
        assert result["job"] == "export" and result["rows"] == MESSAGES, result

        # The Parquet files on this machine's disk, written by the pods' user.
        target = exports / RESOURCE
        assert owned_by_uid(target), sorted(str(p) for p in target.rglob("*"))
        table = read_export(target)
        assert table.num_rows == MESSAGES
        ids = zip(
            table.column("ledger_id").to_pylist(),
            table.column("entry_id").to_pylist(),
            table.column("batch_index").to_pylist(),
            strict=True,
        )
        assert len(set(ids)) == MESSAGES
        payloads = Counter(bytes(p) for p in table.column("payload").to_pylist())
        assert payloads == Counter(f"spark-e2e-{i}".encode() for i in range(MESSAGES))
        partitions = {f"{TOPIC}-partition-{i}" for i in range(PARTITIONS)}
        assert set(table.column("topic").to_pylist()) == partitions

        took = finished - started
        FIGURES["spark export: Topic created to submit Job complete (s)"] = round(finished - created, 1)
        FIGURES["spark export: spec.export set to submit Job complete (s)"] = round(took, 1)
        FIGURES["spark export: rows/s (spec.export set to Job complete)"] = round(MESSAGES / took)
        FIGURES["spark export: job's own seconds, rows/s"] = (result["seconds"], round(MESSAGES / result["seconds"]))
        first_executor = min(pod.first_seen for pod in executors.values())
        FIGURES["spark export: spec.export set to first executor pod (s)"] = round(first_executor - started, 1)
        FIGURES["spark export: executor pods"] = len(executors)
    finally:
        cluster.kubectl("delete", "pod", PRODUCER, "-n", ns, "--wait=false", check=False)
        # The SparkApplication, its Job and the driver pod are owned by the Topic: they go with it.
        cluster.kubectl("delete", "topic", RESOURCE, "-n", ns, "--wait=true", check=False, timeout=240)
        wait_gone(cluster, "the export's pods gone", "pods", ns, "spark-role", 180)
        remove_directory(exports)
