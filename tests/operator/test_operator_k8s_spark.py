"""Topic exports and retention sweeps as SparkApplications, on the harness's real API server with the
kubeflow spark-operator's v2.0.2 CRDs installed, so that every document the operator writes (the
applications and their status, as the `job` submitter mirrors it) is validated by the real schema.

The control plane has no kubelet, so no pod ever runs. Where a test needs a pod to run or finish,
it writes the pod's status phase through the status subresource, standing in for the kubelet; the
Job controller of the harness's controller manager then does what it always does (marks the Job
complete), and the garbage collector does the cascading deletion. There is no pod log either:
the rows/bytes path (the driver's MAGNETAR_RESULT line) is left to the end-to-end test on the node.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from tests.operator.harness import ROOT, ControlPlane, OperatorProcess, condition, gone, wait_for
from tests.operator.test_operator_k8s_resources import apply, manifest
from tests.support.admin import create_namespace
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

SPARK_KIND = "sparkapplications.sparkoperator.k8s.io"
SCHEDULED_KIND = "scheduledsparkapplications.sparkoperator.k8s.io"
MAIN = "local:///opt/magnetar/lib/python3.11/site-packages/magnetar/jobs/main.py"


def spark_crd_dir() -> Path | None:
    """$MAGNETAR_SPARK_OPERATOR_CRDS, <repo>/../shared/spark-operator-crds, /work/shared/spark-operator-crds."""
    candidates = [os.environ.get("MAGNETAR_SPARK_OPERATOR_CRDS"), ROOT.parent / "shared" / "spark-operator-crds"]
    candidates.append("/work/shared/spark-operator-crds")
    for candidate in candidates:
        if candidate and (Path(candidate) / "sparkoperator.k8s.io_sparkapplications.yaml").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def spark_crds(crds: ControlPlane) -> ControlPlane:
    folder = spark_crd_dir()
    if folder is None:
        # Another project's files, not committed here (their README asks for a skip where absent).
        pytest.skip(
            "spark-operator v2.0.2 CRDs not found: set MAGNETAR_SPARK_OPERATOR_CRDS or put them in "
            "../shared/spark-operator-crds (kubeflow spark-operator charts/spark-operator-chart/crds/)"
        )
    for path in sorted(folder.glob("sparkoperator.k8s.io_*.yaml")):
        out = crds.kubectl("create", "-f", str(path), check=False)  # ~0.8 MB each: not `apply`
        assert "created" in out or "AlreadyExists" in out, out
    # `kubectl wait` fails outright while a new CRD has no status yet: poll instead
    established = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    for crd in (SPARK_KIND, SCHEDULED_KIND):
        wait_for(f"{crd} Established", lambda c=crd: crds.kubectl("get", "crd", c, "-o", established) == "True")
    return crds


@pytest.fixture(scope="module")
def core(spark_crds: ControlPlane) -> Iterator[k8s_client.CoreV1Api]:
    api = k8s_config.new_client_from_config(str(spark_crds.kubeconfig))
    yield k8s_client.CoreV1Api(api)
    api.close()


@pytest.fixture
def spark_ns(spark_crds: ControlPlane, ns: str) -> str:
    """The test namespace with the driver's service account (the chart makes it in a release)."""
    spark_crds.kubectl("-n", ns, "create", "serviceaccount", "magnetar-spark")
    return ns


def get(cp: ControlPlane, kind: str, name: str, ns: str) -> dict[str, Any] | None:
    return cp.get(kind, name, ns)


def wait_owner(cp: ControlPlane, kind: str, name: str, ns: str, type_: str, reason: str, timeout: float = 30) -> dict:
    def probe() -> dict[str, Any] | None:
        obj = cp.get(f"{kind}.magnetar.dev", name, ns)
        return obj if condition(obj, type_).get("reason") == reason else None

    return wait_for(f"{kind}/{name} {type_} reason {reason}", probe, timeout=timeout)


def app_state(cp: ControlPlane, name: str, ns: str) -> str:
    app = cp.get(SPARK_KIND, name, ns) or {}
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def set_pod_phase(core: k8s_client.CoreV1Api, pod: str, ns: str, phase: str) -> None:
    """What the kubelet would report (there is none in the control-plane harness)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["startTime"] = now
    core.patch_namespaced_pod_status(pod, ns, {"status": status})


def job_pod(cp: ControlPlane, job: str, ns: str) -> str:
    def probe() -> str | None:
        pods = json.loads(cp.kubectl("-n", ns, "get", "pods", "-l", f"job-name={job}", "-o", "json"))["items"]
        return str(pods[0]["metadata"]["name"]) if pods else None

    return wait_for(f"the pod of Job {job}", probe, timeout=60)


def test_topic_export_runs_as_a_spark_application_through_a_submit_job(
    operator: OperatorProcess, spark_crds: ControlPlane, spark_ns: str, core: k8s_client.CoreV1Api, uid: str
) -> None:
    cp, ns = spark_crds, spark_ns
    export = {"target": "file:///exports/orders", "executors": 2}
    apply(cp, ns, manifest("Topic", "orders", {"namespace": f"t{uid}/sales", "name": "orders", "export": export}))

    app = wait_for("SparkApplication orders-export", lambda: get(cp, SPARK_KIND, "orders-export", ns))
    topic = cp.get("topic.magnetar.dev", "orders", ns)
    assert topic is not None
    (ref,) = app["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "Topic",
        "orders",
        topic["metadata"]["uid"],
        True,
    )
    spec = app["spec"]
    assert (spec["type"], spec["mode"], spec["mainApplicationFile"]) == ("Python", "cluster", MAIN)
    assert spec["image"].startswith("localhost/magnetar-spark:") and spec["sparkVersion"] == "4.3.0"
    assert spec["arguments"] == [
        "export",
        "--admin-url",
        operator.admin_url,
        "--topic",
        f"persistent://t{uid}/sales/orders",
        "--target",
        "file:///exports/orders",
        "--name",
        "export",
    ]
    assert spec["executor"]["instances"] == 2 and spec["driver"]["serviceAccount"] == "magnetar-spark"

    # job submitter: a Job whose pod is the driver, running spark-submit in client mode
    job = wait_for("Job orders-export-submit", lambda: get(cp, "job", "orders-export-submit", ns))
    assert job["metadata"]["ownerReferences"][0]["kind"] == "SparkApplication"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:5] == [
        "/opt/spark/bin/spark-submit",
        "--master",
        "k8s://https://kubernetes.default.svc",
        "--deploy-mode",
        "client",
    ]
    assert "spark.kubernetes.driver.pod.name=$(POD_NAME)" in args and args[-9:] == spec["arguments"]
    wait_for("state SUBMITTED", lambda: app_state(cp, "orders-export", ns) == "SUBMITTED")
    wait_owner(cp, "topic", "orders", ns, "Exported", "Submitted")

    pod = job_pod(cp, "orders-export-submit", ns)
    set_pod_phase(core, pod, ns, "Running")
    wait_for("state RUNNING", lambda: app_state(cp, "orders-export", ns) == "RUNNING", timeout=60)
    wait_owner(cp, "topic", "orders", ns, "Exported", "Running")
    set_pod_phase(core, pod, ns, "Succeeded")  # the Job controller then marks the Job Complete
    wait_for("state COMPLETED", lambda: app_state(cp, "orders-export", ns) == "COMPLETED", timeout=60)
    topic = wait_owner(cp, "topic", "orders", ns, "Exported", "Succeeded")
    assert condition(topic, "Exported")["status"] == "True"
    status = (cp.get(SPARK_KIND, "orders-export", ns) or {})["status"]
    assert status["driverInfo"]["podName"] == pod and status["terminationTime"] and status["submissionAttempts"] == 1
    recorded = topic["status"]["export"]
    assert recorded["application"] == "orders-export" and recorded["state"] == "COMPLETED" and recorded["lastSuccess"]
    assert "rows" not in recorded  # no pod log without a kubelet: the figures are the e2e test's

    # deleting the Topic deletes the application and its Job (owner references, garbage collector)
    cp.kubectl("-n", ns, "delete", "topic.magnetar.dev", "orders", "--wait=false")
    wait_for("the SparkApplication to be collected", lambda: gone(cp, SPARK_KIND, "orders-export", ns), timeout=90)
    wait_for("the Job to be collected", lambda: gone(cp, "job", "orders-export-submit", ns), timeout=90)


def test_changing_the_export_spec_replaces_the_one_off_application(
    operator: OperatorProcess, spark_crds: ControlPlane, spark_ns: str, broker: StandaloneProcess
) -> None:
    cp, ns = spark_crds, spark_ns
    # kopf runs a resource's handlers cause by cause: a spec change waits until the creation is
    # done, the topic's included, so this topic's namespace must exist on the broker
    spec: dict[str, Any] = {"namespace": create_namespace(broker, "sales"), "name": "items"}
    spec["export"] = {"target": "file:///a"}
    apply(cp, ns, manifest("Topic", "items", spec))
    wait_owner(cp, "topic", "items", ns, "Ready", "Created")
    first = wait_for("SparkApplication items-export", lambda: get(cp, SPARK_KIND, "items-export", ns))
    spec["export"] = {"target": "file:///b", "name": "second"}
    apply(cp, ns, manifest("Topic", "items", spec))

    def replaced() -> dict[str, Any] | None:
        app = get(cp, SPARK_KIND, "items-export", ns)
        return app if app and app["metadata"]["uid"] != first["metadata"]["uid"] else None

    app = wait_for("a new SparkApplication", replaced)
    assert app["spec"]["arguments"][-4:] == ["--target", "file:///b", "--name", "second"]
    spec.pop("export")
    apply(cp, ns, manifest("Topic", "items", spec))
    wait_for("the application to go with spec.export", lambda: gone(cp, SPARK_KIND, "items-export", ns))
    wait_for(
        "the Exported condition to go",
        lambda: not condition(cp.get("topic.magnetar.dev", "items", ns), "Exported"),
    )


def test_scheduled_namespace_sweep_creates_runs_on_schedule(
    operator: OperatorProcess, spark_crds: ControlPlane, spark_ns: str, core: k8s_client.CoreV1Api, uid: str
) -> None:
    cp, ns = spark_crds, spark_ns
    sweep = {"schedule": "*/5 * * * *", "dryRun": False, "report": "file:///reports/sales", "executors": 1}
    apply(cp, ns, manifest("Namespace", "sales", {"tenant": f"t{uid}", "name": "sales", "retentionSweep": sweep}))
    name = "sales-retention-sweep"
    sched = wait_for("ScheduledSparkApplication", lambda: get(cp, SCHEDULED_KIND, name, ns))
    assert sched["metadata"]["ownerReferences"][0]["kind"] == "Namespace"
    assert sched["spec"]["schedule"] == "*/5 * * * *" and sched["spec"]["concurrencyPolicy"] == "Forbid"
    args = sched["spec"]["template"]["arguments"]
    assert args == [
        "retention-sweep",
        "--admin-url",
        operator.admin_url,
        "--namespace",
        f"t{uid}/sales",
        "--report",
        "file:///reports/sales",
        "--apply",
    ]
    sched = wait_for(
        "status.nextRun", lambda: (s := get(cp, SCHEDULED_KIND, name, ns)) and s.get("status", {}).get("nextRun") and s
    )
    assert sched["status"]["scheduleState"] == "Scheduled"
    owner = wait_owner(cp, "namespace", "sales", ns, "RetentionSwept", "Scheduled")
    assert "*/5 * * * *" in condition(owner, "RetentionSwept")["message"]

    # Make the schedule due now rather than waiting up to five minutes: the status subresource is
    # where the scheduler keeps nextRun, so this is exactly what the passing of time would do.
    custom = k8s_client.CustomObjectsApi(core.api_client)
    past = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def make_due() -> None:
        body = {"status": {"nextRun": past}}
        custom.patch_namespaced_custom_object_status(
            "sparkoperator.k8s.io",
            "v1beta2",
            ns,
            "scheduledsparkapplications",
            name,
            body,
            _content_type="application/merge-patch+json",
        )

    make_due()
    sched = wait_for("a run", lambda: (s := get(cp, SCHEDULED_KIND, name, ns)) and s["status"].get("lastRunName") and s)
    run = sched["status"]["lastRunName"]
    assert run.startswith(f"{name}-") and run[len(name) + 1 :].isdigit()
    app = get(cp, SPARK_KIND, run, ns)
    assert app is not None and app["metadata"]["ownerReferences"][0]["kind"] == "ScheduledSparkApplication"
    assert app["spec"]["arguments"] == args
    wait_for("the run's Job", lambda: get(cp, "job", f"{run}-submit", ns))
    wait_owner(cp, "namespace", "sales", ns, "RetentionSwept", "Submitted")

    # Forbid: while the run is unfinished, a due tick starts nothing and says so
    make_due()
    sched = wait_for(
        "the skipped tick",
        lambda: (s := get(cp, SCHEDULED_KIND, name, ns)) and "has not finished" in s["status"].get("reason", "") and s,
    )
    assert sched["status"]["lastRunName"] == run
    assert len(json.loads(cp.kubectl("-n", ns, "get", SPARK_KIND, "-o", "json"))["items"]) == 1


def test_tenant_sweep_is_a_dry_run_by_default(
    operator: OperatorProcess, spark_crds: ControlPlane, spark_ns: str, uid: str
) -> None:
    cp, ns = spark_crds, spark_ns
    apply(cp, ns, manifest("Tenant", "acme", {"name": f"t{uid}", "retentionSweep": {"report": "file:///r"}}))
    app = wait_for("SparkApplication", lambda: get(cp, SPARK_KIND, "acme-retention-sweep", ns))
    assert app["spec"]["arguments"][3:] == ["--tenant", f"t{uid}", "--report", "file:///r"]


def test_invalid_specs_are_refused_with_the_reason(
    operator: OperatorProcess, spark_crds: ControlPlane, spark_ns: str, uid: str, broker: StandaloneProcess
) -> None:
    cp, ns = spark_crds, spark_ns
    csv = manifest("Topic", "csv", {"namespace": f"t{uid}/a", "name": "x", "export": {"target": "/x", "format": "csv"}})
    out = cp.kubectl("apply", "-n", ns, "-f", "-", input=csv, check=False)
    assert 'Unsupported value: "csv"' in out, out

    # on the broker, so that the later spec change is not held back behind the topic's creation
    bad = {
        "namespace": create_namespace(broker, "a"),
        "name": "y",
        "export": {"target": "/y", "schedule": "every hour"},
    }
    apply(cp, ns, manifest("Topic", "bad", bad))
    topic = wait_owner(cp, "topic", "bad", ns, "Exported", "InvalidSpec")
    cond = condition(topic, "Exported")
    assert cond["status"] == "False" and "'every hour' is not a cron expression" in cond["message"]
    assert get(cp, SCHEDULED_KIND, "bad-export", ns) is None and get(cp, SPARK_KIND, "bad-export", ns) is None

    bad["export"]["schedule"] = "@daily"  # fixed: the application appears and the condition follows
    apply(cp, ns, manifest("Topic", "bad", bad))
    wait_for("ScheduledSparkApplication bad-export", lambda: get(cp, SCHEDULED_KIND, "bad-export", ns))
    wait_owner(cp, "topic", "bad", ns, "Exported", "Scheduled")
