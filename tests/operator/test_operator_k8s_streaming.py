"""A Topic's or Namespace's `spec.streamingExport` as a long-running SparkApplication, on the
harness's real API server with the spark-operator's v2.0.2 CRDs (every document the operator writes
is checked by the real schemas) and the `job` submitter.

As in test_operator_k8s_spark.py, there is no kubelet: where a driver pod would run, fail or
report progress, the test writes what the kubelet or the driver would (the pod's status phase;
the `magnetar.dev/streaming-progress` annotation the job's listener writes), and the harness's
Job controller and garbage collector do the rest for real. The lag comes from the real standalone:
the query's progress subscription is made there with messages behind it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client
from tests.operator.harness import ControlPlane, OperatorProcess, condition, gone, wait_for
from tests.operator.test_operator_k8s_resources import apply, manifest
from tests.operator.test_operator_k8s_spark import (  # noqa: F401  # fixtures
    SPARK_KIND,
    app_state,
    core,
    job_pod,
    set_pod_phase,
    spark_crds,
    spark_ns,
)
from tests.support.admin import create_namespace
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.client import aio
from magnetar.jobs.streaming_export import DriverPod

pytestmark = pytest.mark.k8s

PROGRESS = "magnetar.dev/streaming-progress"


def streaming(cp: ControlPlane, kind: str, name: str, ns: str) -> dict[str, Any]:
    obj = cp.get(f"{kind}.magnetar.dev", name, ns) or {}
    return dict((obj.get("status") or {}).get("streamingExport") or {})


def wait_streaming(cp: ControlPlane, kind: str, name: str, ns: str, reason: str, timeout: float = 60) -> dict:
    def probe() -> dict[str, Any] | None:
        obj = cp.get(f"{kind}.magnetar.dev", name, ns)
        return obj if condition(obj, "Streaming").get("reason") == reason else None

    return wait_for(f"{kind}/{name} Streaming reason {reason}", probe, timeout=timeout)


def pods_of(cp: ControlPlane, job: str, ns: str) -> list[dict[str, Any]]:
    return list(json.loads(cp.kubectl("-n", ns, "get", "pods", "-l", f"job-name={job}", "-o", "json"))["items"])


async def _produce(url: str, topic: str, n: int) -> None:
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic)
        for i in range(n):
            await producer.send(b"%d" % i)
        await producer.close()


def driver_pod(cp: ControlPlane, api: k8s_client.CoreV1Api, ns: str, pod: str, tmp_path: Path) -> DriverPod:
    """The job's own way to annotate its pod, as the driver's service account with the chart's
    Spark Role (pods: patch), through the token Secret the controller manager made for it."""
    rules = [
        {
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
            "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"],
        }
    ]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "spark"}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "spark"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark"},
        "subjects": [{"kind": "ServiceAccount", "name": "magnetar-spark", "namespace": ns}],
    }
    cp.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({**role, "rules": rules}))
    cp.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(binding))

    def token_secret() -> Any:
        for secret in api.list_namespaced_secret(ns).items:
            sa = (secret.metadata.annotations or {}).get("kubernetes.io/service-account.name")
            if secret.type == "kubernetes.io/service-account-token" and sa == "magnetar-spark":
                return secret
        return None

    secret = wait_for("the driver service account's token", token_secret)
    (tmp_path / "token").write_bytes(base64.b64decode(secret.data["token"]))
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(secret.data["ca.crt"]))
    server = yaml.safe_load(cp.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return DriverPod(pod, ns, server, tmp_path / "token", tmp_path / "ca.crt")


def test_streaming_export_runs_restarts_reports_progress_and_stops(
    operator: OperatorProcess,
    spark_crds: ControlPlane,  # noqa: F811
    spark_ns: str,  # noqa: F811
    core: k8s_client.CoreV1Api,  # noqa: F811
    broker: StandaloneProcess,
    tmp_path: Path,
) -> None:
    cp, ns = spark_crds, spark_ns
    started = time.monotonic()
    namespace = create_namespace(broker, "stream")
    topic = f"persistent://{namespace}/events"
    section = {
        "target": "file:///exports/events",
        "triggerSeconds": 2,
        "maxEntriesPerTrigger": 500,
        "executors": 1,
        "checkpoint": {"size": "2Gi", "deleteClaim": True},
    }
    spec: dict[str, Any] = {"namespace": namespace, "name": "events", "streamingExport": section}
    apply(cp, ns, manifest("Topic", "events", spec))

    app = wait_for(
        "SparkApplication events-streaming-export", lambda: cp.get(SPARK_KIND, "events-streaming-export", ns)
    )
    owner = cp.get("topic.magnetar.dev", "events", ns) or {}
    assert app["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert app["metadata"]["labels"]["magnetar.dev/spark-job"] == "streaming-export"
    app_spec = app["spec"]
    assert app_spec["restartPolicy"] == {
        "type": "Always",
        "onFailureRetryInterval": 10,
        "onSubmissionFailureRetryInterval": 10,
    }
    assert app_spec["arguments"] == [
        "export",
        "--streaming",
        "--admin-url",
        operator.admin_url,
        "--topic",
        topic,
        "--target",
        "file:///exports/events",
        "--name",
        "export",
        "--checkpoint",
        "/checkpoint/export",
        "--trigger-seconds",
        "2",
        "--max-entries-per-trigger",
        "500",
    ]
    claim = "events-streaming-export-checkpoint"
    assert {"name": "checkpoint", "persistentVolumeClaim": {"claimName": claim}} in app_spec["volumes"]
    for part in ("driver", "executor"):
        assert {"name": "checkpoint", "mountPath": "/checkpoint"} in app_spec[part]["volumeMounts"]

    # the claim the operator made: owned by the Topic, marked to go with the streaming export
    pvc = wait_for("the checkpoint claim", lambda: cp.get("persistentvolumeclaim", claim, ns))
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert pvc["metadata"]["annotations"]["magnetar.dev/delete-with-streaming-export"] == "true"

    # the job submitter: a Job that replaces its failed drivers, the claim mounted in the driver pod
    # and handed to the executors through spark-submit
    job = wait_for("Job events-streaming-export-submit", lambda: cp.get("job", "events-streaming-export-submit", ns))
    assert job["spec"]["backoffLimit"] == 2147483647
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "checkpoint", "mountPath": "/checkpoint"} in container["volumeMounts"]
    assert (
        f"spark.kubernetes.executor.volumes.persistentVolumeClaim.checkpoint.options.claimName={claim}"
        in container["args"]
    )
    wait_streaming(cp, "topic", "events", ns, "Submitted")

    first = job_pod(cp, "events-streaming-export-submit", ns)
    set_pod_phase(core, first, ns, "Running")
    wait_for("state RUNNING", lambda: app_state(cp, "events-streaming-export", ns) == "RUNNING", timeout=60)
    topic_obj = wait_streaming(cp, "topic", "events", ns, "Running")
    assert condition(topic_obj, "Streaming")["status"] == "True"

    # progress: the driver's annotation, and the lag from the brokers' backlog of the query's
    # progress subscription (made here as the source would, with 25 messages behind it)
    sub = f"persistent/{namespace}/events/subscription/magnetar-streaming-export"
    assert admin_call(broker, "PUT", f"/admin/v2/{sub}")[0] in (200, 204)
    asyncio.run(_produce(broker.service_url, topic, 25))
    doc = {
        "batchId": 7,
        "timestamp": "2026-11-29T12:00:00.000Z",
        "numInputRows": 500,
        "inputRowsPerSecond": 250.5,
        "processedRowsPerSecond": 1000.0,
    }
    reporter = driver_pod(cp, core, ns, first, tmp_path)
    reporter.annotate(doc)  # what the job's listener does after each batch
    assert not reporter.warned, "the driver's service account could not annotate its pod"
    annotations = core.read_namespaced_pod(first, ns).metadata.annotations or {}
    assert json.loads(annotations[PROGRESS]) == doc

    def mirrored() -> dict[str, Any] | None:
        found = streaming(cp, "topic", "events", ns)
        return found if found.get("batchId") == 7 and found.get("lagEntries") == 25 else None

    status = wait_for("progress and lag in status.streamingExport", mirrored, timeout=60)
    assert status["batchTime"] == "2026-11-29T12:00:00.000Z" and status["batchRows"] == 500
    assert status["inputRowsPerSecond"] == 250.5 and status["processedRowsPerSecond"] == 1000.0
    assert status["application"] == "events-streaming-export" and status["checkpointClaim"] == claim
    message = condition(cp.get("topic.magnetar.dev", "events", ns), "Streaming")["message"]
    assert "batch 7" in message and "lag 25 entries" in message, message

    # the driver dies: the Job controller starts a new driver pod (after its back-off), the state
    # goes through PENDING_RERUN, and the last batch known stays in the status meanwhile
    set_pod_phase(core, first, ns, "Failed")
    wait_for("PENDING_RERUN", lambda: app_state(cp, "events-streaming-export", ns) in ("PENDING_RERUN", "SUBMITTED"))

    def replacement() -> str | None:
        names = [p["metadata"]["name"] for p in pods_of(cp, "events-streaming-export-submit", ns)]
        return next((n for n in names if n != first), None)

    second = wait_for("a new driver pod", replacement, timeout=90)
    set_pod_phase(core, second, ns, "Running")

    def restarted() -> dict[str, Any] | None:
        found = streaming(cp, "topic", "events", ns)
        return found if found.get("restarts") == 1 and found.get("state") == "RUNNING" else None

    status = wait_for("one restart, RUNNING again", restarted, timeout=60)
    assert status["batchId"] == 7, "the last batch known stays until the new driver reports one"
    app = cp.get(SPARK_KIND, "events-streaming-export", ns) or {}
    assert app["status"]["driverInfo"]["podName"] == second and app["status"]["executionAttempts"] == 2

    # a driver pod deleted (kubectl delete pod, a node drained) is replaced too, and counted
    core.delete_namespaced_pod(second, ns)
    third = wait_for(
        "another driver pod",
        lambda: next(
            (
                p["metadata"]["name"]
                for p in pods_of(cp, "events-streaming-export-submit", ns)
                if p["metadata"]["name"] not in (first, second)
            ),
            None,
        ),
        timeout=90,
    )
    set_pod_phase(core, third, ns, "Running")
    wait_for("two restarts", lambda: streaming(cp, "topic", "events", ns).get("restarts") == 2, timeout=60)

    # removing the block stops it: the application, its Job and pods, and (deleteClaim) the claim
    del spec["streamingExport"]
    apply(cp, ns, manifest("Topic", "events", spec))
    wait_for("the SparkApplication to go", lambda: gone(cp, SPARK_KIND, "events-streaming-export", ns), timeout=60)
    wait_for("the Job to go", lambda: gone(cp, "job", "events-streaming-export-submit", ns), timeout=90)
    wait_for("the claim to go", lambda: gone(cp, "persistentvolumeclaim", claim, ns), timeout=90)

    def cleared() -> bool:
        obj = cp.get("topic.magnetar.dev", "events", ns) or {}
        return not condition(obj, "Streaming") and not (obj.get("status") or {}).get("streamingExport")

    wait_for("the Streaming condition and status to go", cleared, timeout=30)
    print(f"\nstreaming export lifecycle: {time.monotonic() - started:.1f}s")


def test_impossible_specs_are_refused_and_a_users_claim_is_kept(
    operator: OperatorProcess,
    spark_crds: ControlPlane,  # noqa: F811
    spark_ns: str,  # noqa: F811
    broker: StandaloneProcess,
) -> None:
    cp, ns = spark_crds, spark_ns
    # a Topic whose streaming export would share the batch export's folder
    namespace = create_namespace(broker, "clash")
    shared = "file:///exports/shared"
    topic_spec = {
        "namespace": namespace,
        "name": "orders",
        "export": {"target": shared, "schedule": "@daily"},
        "streamingExport": {"target": shared + "/"},
    }
    apply(cp, ns, manifest("Topic", "orders", topic_spec))
    topic = wait_streaming(cp, "topic", "orders", ns, "InvalidSpec")
    cond = condition(topic, "Streaming")
    assert cond["status"] == "False" and "spec.export.target" in cond["message"] and "own target" in cond["message"]
    assert cp.get(SPARK_KIND, "orders-streaming-export", ns) is None

    # a Namespace naming its own claim, with a size that only a claim the operator makes can have
    cp.kubectl(
        "-n",
        ns,
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "mine"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
        ),
    )
    section: dict[str, Any] = {"target": "file:///exports/sales", "checkpoint": {"claimName": "mine", "size": "5Gi"}}
    # kopf handles a resource's causes one at a time: the namespace must exist on the broker for
    # the creation to finish and the spec change below to be seen
    tenant, local = create_namespace(broker, "sales").split("/")
    spec = {"tenant": tenant, "name": local, "streamingExport": section}
    apply(cp, ns, manifest("Namespace", "sales", spec))
    refused = condition(wait_streaming(cp, "namespace", "sales", ns, "InvalidSpec"), "Streaming")
    assert "claimName names an existing claim" in refused["message"] and "size" in refused["message"]
    assert cp.get(SPARK_KIND, "sales-streaming-export", ns) is None

    section["checkpoint"] = {"claimName": "mine"}
    section["startingOffsets"] = "latest"
    section["failOnDataLoss"] = False
    apply(cp, ns, manifest("Namespace", "sales", spec))
    app = wait_for("SparkApplication sales-streaming-export", lambda: cp.get(SPARK_KIND, "sales-streaming-export", ns))
    args = app["spec"]["arguments"]
    assert args[4:6] == ["--namespace", f"{tenant}/{local}"]
    assert args[-3:] == ["--starting-offsets", "latest", "--no-fail-on-data-loss"]
    assert {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "mine"}} in app["spec"]["volumes"]
    wait_streaming(cp, "namespace", "sales", ns, "Submitted")
    assert cp.get("persistentvolumeclaim", "sales-streaming-export-checkpoint", ns) is None

    del spec["streamingExport"]
    apply(cp, ns, manifest("Namespace", "sales", spec))
    wait_for("the SparkApplication to go", lambda: gone(cp, SPARK_KIND, "sales-streaming-export", ns), timeout=60)
    assert cp.get("persistentvolumeclaim", "mine", ns) is not None, "a claim of the user's is never deleted"
