"""The SparkApplication / Job documents and the state functions of the Spark part, without a cluster."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest

from magnetar_operator.spark_apps import (
    EXPORT_KIND,
    MAX_NAME,
    SWEEP_KIND,
    InvalidSparkSpec,
    app_name,
    build_application,
    export_arguments,
    sweep_arguments,
    validate_schedule,
)
from magnetar_operator.spark_config import SparkSettings
from magnetar_operator.spark_status import Owned, desired, group_by_owner, parse_result
from magnetar_operator.spark_submitter import (
    build_run,
    build_submit_job,
    kube_memory,
    runs_to_delete,
    schedule_decision,
    status_from_job,
    submit_command,
)

UTC = datetime.UTC
TOPIC = {
    "apiVersion": "magnetar.dev/v1alpha1",
    "kind": "Topic",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1"},
    "spec": {"namespace": "acme/sales", "name": "orders"},
}
SETTINGS = SparkSettings(
    image="localhost/magnetar-spark:abc",
    service_account="spark-sa",
    volumes=[{"name": "exports", "persistentVolumeClaim": {"claimName": "exports"}}],
    volume_mounts=[{"name": "exports", "mountPath": "/exports"}],
)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def export_app(section: dict[str, Any]) -> dict[str, Any]:
    args = export_arguments("http://broker:8080", "persistent://acme/sales/orders", section)
    return build_application(TOPIC, EXPORT_KIND, args, section, SETTINGS)


def test_names_are_dns_labels_short_enough_for_runs_and_jobs() -> None:
    assert app_name("orders", "export") == "orders-export"
    long = app_name("a" * 200 + ".Topic_X", "retention-sweep")
    assert len(long) <= MAX_NAME and DNS_LABEL.match(long)
    assert long != app_name("a" * 200 + ".Topic_Y", "retention-sweep"), "the hash keeps long names apart"
    # a run <name>-<unix seconds> and its Job <run>-submit stay within 63 characters
    assert len(f"{long}-1790000000-submit") <= 63


def test_one_off_export_is_a_spark_application_owned_by_the_topic() -> None:
    app = export_app({"target": "file:///exports/orders", "executors": 3})
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["kind"] == "SparkApplication"
    meta, spec = app["metadata"], app["spec"]
    assert meta["name"] == "orders-export" and meta["namespace"] == "shop"
    assert meta["ownerReferences"] == [
        {"apiVersion": "magnetar.dev/v1alpha1", "kind": "Topic", "name": "orders", "uid": "u-1"}
        | {"controller": True, "blockOwnerDeletion": True}
    ]
    assert meta["labels"]["magnetar.dev/submitter"] == "job"
    assert spec["type"] == "Python" and spec["pythonVersion"] == "3" and spec["mode"] == "cluster"
    assert spec["image"] == "localhost/magnetar-spark:abc" and spec["imagePullPolicy"] == "IfNotPresent"
    assert spec["mainApplicationFile"] == "local:///opt/magnetar/lib/python3.11/site-packages/magnetar/jobs/main.py"
    assert spec["sparkVersion"] == "4.3.0" and spec["restartPolicy"] == {"type": "Never"}
    assert spec["arguments"] == [
        "export",
        "--admin-url",
        "http://broker:8080",
        "--topic",
        "persistent://acme/sales/orders",
        "--target",
        "file:///exports/orders",
        "--name",
        "export",
    ]
    assert spec["driver"]["serviceAccount"] == "spark-sa" and spec["executor"]["instances"] == 3
    assert spec["volumes"] == SETTINGS.volumes
    assert spec["driver"]["volumeMounts"] == spec["executor"]["volumeMounts"] == SETTINGS.volume_mounts


def test_the_spec_hash_changes_with_the_export_spec_only() -> None:
    first = export_app({"target": "file:///a"})["metadata"]["annotations"]
    assert first == export_app({"target": "file:///a"})["metadata"]["annotations"]
    assert first != export_app({"target": "file:///b"})["metadata"]["annotations"]


def test_scheduled_export_is_a_scheduled_application_with_forbid() -> None:
    app = export_app({"target": "s3a://bucket/orders", "schedule": "@hourly", "name": "nightly"})
    assert app["kind"] == "ScheduledSparkApplication"
    spec = app["spec"]
    assert spec["schedule"] == "@hourly" and spec["concurrencyPolicy"] == "Forbid"
    assert spec["template"]["arguments"][-2:] == ["--name", "nightly"]
    assert spec["template"]["type"] == "Python"


@pytest.mark.parametrize("schedule", ["*/5 * * * *", "0 3 * * 1-5", "@daily", "@hourly"])
def test_valid_schedules(schedule: str) -> None:
    validate_schedule(schedule)


@pytest.mark.parametrize("schedule", ["every hour", "61 * * * *", "@every 1h", "* * * * * *", ""])
def test_invalid_schedules_say_why(schedule: str) -> None:
    with pytest.raises(InvalidSparkSpec, match="not a cron expression"):
        validate_schedule(schedule)
    with pytest.raises(InvalidSparkSpec):
        export_app({"target": "file:///x", "schedule": schedule or " "})


def test_sweep_arguments_apply_only_when_dry_run_is_false() -> None:
    assert sweep_arguments("http://b", "--tenant", "acme", {"report": "file:///r"}) == [
        "retention-sweep",
        "--admin-url",
        "http://b",
        "--tenant",
        "acme",
        "--report",
        "file:///r",
    ]
    assert sweep_arguments("http://b", "--namespace", "acme/ns", {"report": "r", "dryRun": False})[-1] == "--apply"
    assert "--apply" not in sweep_arguments("http://b", "--namespace", "acme/ns", {"report": "r", "dryRun": True})
    ns = {"apiVersion": "magnetar.dev/v1alpha1", "kind": "Namespace", "metadata": {**TOPIC["metadata"], "name": "n"}}
    app = build_application(ns, SWEEP_KIND, ["retention-sweep"], {"report": "r"}, SETTINGS)
    assert app["metadata"]["name"] == "n-retention-sweep"


def test_submit_job_runs_spark_submit_in_client_mode_with_executor_volumes() -> None:
    app = export_app({"target": "file:///exports/orders"})
    app["metadata"]["uid"] = "a-1"
    job = build_submit_job(app, {"fsGroup": 10000})
    assert job["metadata"]["name"] == "orders-export-submit"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "SparkApplication"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "spark-sa"
    assert pod["securityContext"] == {"fsGroup": 10000} and pod["volumes"] == SETTINGS.volumes
    (container,) = pod["containers"]
    assert container["volumeMounts"] == SETTINGS.volume_mounts
    args = container["args"]
    assert args[:7] == [
        "/opt/spark/bin/spark-submit",
        "--master",
        "k8s://https://kubernetes.default.svc",
        "--deploy-mode",
        "client",
        "--name",
        "orders-export",
    ]
    confs = {args[i + 1] for i, a in enumerate(args) if a == "--conf"}
    for conf in (
        "spark.kubernetes.namespace=shop",
        "spark.kubernetes.container.image=localhost/magnetar-spark:abc",
        "spark.kubernetes.authenticate.driver.serviceAccountName=spark-sa",
        "spark.driver.host=$(POD_IP)",
        "spark.kubernetes.driver.pod.name=$(POD_NAME)",
        "spark.executor.instances=2",
        "spark.kubernetes.executor.request.cores=100m",
        "spark.kubernetes.executor.volumes.persistentVolumeClaim.exports.mount.path=/exports",
        "spark.kubernetes.executor.volumes.persistentVolumeClaim.exports.options.claimName=exports",
    ):
        assert conf in confs
    main = "/opt/magnetar/lib/python3.11/site-packages/magnetar/jobs/main.py"
    assert args[args.index(main) + 1 :] == app["spec"]["arguments"]
    assert {e["name"] for e in container["env"]} == {"POD_IP", "POD_NAME"}
    assert submit_command(app) == args
    assert kube_memory("512m") == "512Mi" and kube_memory("2g") == "2Gi"


NOW = datetime.datetime(2026, 11, 23, 12, 0, 30, tzinfo=UTC)


def test_job_state_becomes_the_application_state() -> None:
    job: dict[str, Any] = {"metadata": {"uid": "j", "creationTimestamp": "2026-11-23T12:00:00Z"}, "status": {}}
    assert status_from_job(job, [], {}, NOW)["applicationState"] == {"state": "SUBMITTED"}
    running_pod = {"metadata": {"name": "p-1"}, "status": {"phase": "Running"}}
    status = status_from_job({**job, "status": {"active": 1}}, [running_pod], {}, NOW)
    assert status["applicationState"] == {"state": "RUNNING"} and status["driverInfo"] == {"podName": "p-1"}
    done = {"succeeded": 1, "completionTime": "2026-11-23T12:05:00Z"}
    status = status_from_job({**job, "status": done}, [running_pod], status, NOW)
    assert status["applicationState"] == {"state": "COMPLETED"} and status["terminationTime"] == "2026-11-23T12:05:00Z"
    assert status["submissionAttempts"] == 1 and status["lastSubmissionAttemptTime"] == "2026-11-23T12:00:00Z"
    failed = {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}
    status = status_from_job({**job, "status": failed}, [], {}, NOW)
    assert status["applicationState"] == {"state": "FAILED", "errorMessage": "BackoffLimitExceeded"}
    assert status_from_job(None, [], {"applicationState": {"state": "RUNNING"}}, NOW)["applicationState"]["state"] == (
        "FAILED"
    )


def scheduled_app(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    app = export_app({"target": "file:///x", "schedule": "* * * * *"})
    app["metadata"]["uid"] = "s-1"
    app["spec"].update(spec)
    app["status"] = status or {}
    return app


def run(name: str, state: str, created: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"applicationState": {"state": state}}}


def test_schedule_first_sets_next_run_then_runs_when_due_and_forbid_skips() -> None:
    start, status = schedule_decision(scheduled_app(), [], NOW)
    assert not start and status["nextRun"] == "2026-11-23T12:01:00Z" and status["scheduleState"] == "Scheduled"
    due = {"nextRun": "2026-11-23T12:00:00Z"}
    start, status = schedule_decision(scheduled_app(due), [], NOW)
    assert start and status["nextRun"] == "2026-11-23T12:01:00Z"
    busy = [run("orders-export-1", "RUNNING", "2026-11-23T11:59:00Z")]
    start, status = schedule_decision(scheduled_app(due), busy, NOW)
    assert not start and "has not finished" in status["reason"]
    assert schedule_decision(scheduled_app(due, concurrencyPolicy="Allow"), busy, NOW)[0]
    assert not schedule_decision(scheduled_app(due, suspend=True), [], NOW)[0]
    new = build_run(scheduled_app(), NOW)
    assert new["metadata"]["name"] == f"orders-export-{int(NOW.timestamp())}"
    assert new["metadata"]["labels"]["sparkoperator.k8s.io/scheduled-app-name"] == "orders-export"
    assert new["metadata"]["ownerReferences"][0]["kind"] == "ScheduledSparkApplication"
    assert new["spec"]["arguments"][0] == "export"


def test_run_history_keeps_the_newest_finished_runs() -> None:
    runs = [run(f"r{i}", "COMPLETED", f"2026-11-23T12:0{i}:00Z") for i in range(5)]
    runs += [run("f1", "FAILED", "2026-11-23T12:01:30Z"), run("f2", "FAILED", "2026-11-23T12:02:30Z")]
    runs.append(run("live", "RUNNING", "2026-11-23T11:00:00Z"))
    assert runs_to_delete(runs, 3, 1) == ["r0", "r1", "f1"]


def test_driver_result_line_is_parsed() -> None:
    text = 'INFO starting\nMAGNETAR_RESULT {"job": "export", "rows": 10, "bytes": 99}\nINFO stopped\n'
    assert parse_result(text) == {"job": "export", "rows": 10, "bytes": 99}
    assert parse_result("no result here") is None and parse_result(None) is None


def test_owner_condition_follows_the_latest_run() -> None:
    sched = scheduled_app({"nextRun": "2026-11-23T13:00:00Z"})
    one = run("orders-export-1", "COMPLETED", "2026-11-23T11:00:00Z")
    one["metadata"] |= {
        "namespace": "shop",
        "ownerReferences": [{"kind": "ScheduledSparkApplication", "name": "orders-export", "controller": True}],
    }
    one["status"]["terminationTime"] = "2026-11-23T11:05:00Z"
    groups = group_by_owner([sched], [one])
    (owned,) = groups.values()
    assert owned.owner == ("Topic", "shop", "orders") and owned.apps == [one]
    cond, fields = desired(owned, {}, {"rows": 7, "bytes": 70, "applied": "x"})
    assert (cond.type, cond.status, cond.reason) == ("Exported", True, "Succeeded")
    assert fields["rows"] == 7 and fields["bytes"] == 70 and fields["lastSuccess"] == "2026-11-23T11:05:00Z"
    assert fields["nextRun"] == "2026-11-23T13:00:00Z" and "7 rows" in cond.message
    cond, fields = desired(Owned(owned.owner, "export", scheduled=sched), {}, None)
    assert cond.reason == "Scheduled" and cond.status is None
    failed = run("orders-export-2", "FAILED", "2026-11-23T12:00:00Z")
    failed["status"]["applicationState"]["errorMessage"] = "driver exited 1"
    cond, fields = desired(Owned(owned.owner, "export", sched, [one, failed]), {"lastSuccess": "x"}, None)
    assert (cond.status, cond.reason) == (False, "Failed") and "driver exited 1" in cond.message
    assert fields["lastSuccess"] == "x" or fields["lastSuccess"] == "2026-11-23T11:05:00Z"
