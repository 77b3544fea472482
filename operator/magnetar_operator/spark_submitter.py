"""The `job` submitter: the operator runs the SparkApplications it made, without the Go operator.

Why: the kubeflow spark-operator cannot be built on these machines, yet Spark itself can run on
Kubernetes: `spark-submit --master k8s://...` in client mode starts executor pods from the
driver. So for each SparkApplication labelled `magnetar.dev/submitter=job`, the operator creates
a batch/v1 Job `<app>-submit` (owned by the application; backoffLimit 0, as restartPolicy Never
asks) whose one pod is the driver, and mirrors the Job's state into the application's status the
way the Go operator does (applicationState.state SUBMITTED → RUNNING → COMPLETED | FAILED,
submissionAttempts, lastSubmissionAttemptTime, terminationTime, driverInfo.podName). Executor
pods are owned by the driver pod (spark.kubernetes.driver.pod.name), so they die with it.

ScheduledSparkApplications with that label get the Go operator's behaviour too: on the schedule
(croniter), a run `<name>-<unix seconds>` is made from the template, concurrencyPolicy Forbid
skips a tick while the previous run is not finished, and only the last successful/failed runs
(successfulRunHistoryLimit / failedRunHistoryLimit) are kept.

An application with `restartPolicy: {type: Always}` (a streaming export) runs until it is deleted:
its Job has an unlimited backoffLimit, so the Job controller replaces a failed or deleted driver
pod with a new one (after its own back-off, 10 s doubling up to 6 min; failed pods stay listed
under the Job until it goes); a Job that ends all the same (a driver that exited 0) is deleted
and made anew. Its state follows the Go operator's: RUNNING, PENDING_RERUN between drivers, and
executionAttempts counts the drivers started over all its Jobs.

Builders and state functions are pure; `submit_pass` does one pass over the cluster.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from croniter import croniter  # type: ignore[import-untyped]  # no stubs published

from .manifests import MANAGED_BY, owner_reference
from .spark_apps import API_VERSION, APP, LABEL_SUBMITTER, SCHEDULED, SCHEDULED_APP_LABEL
from .spark_config import SUBMITTER_JOB
from .spark_kube import SparkKube

log = logging.getLogger(__name__)

MASTER = "k8s://https://kubernetes.default.svc"
TERMINAL = {"COMPLETED", "FAILED", "SUBMISSION_FAILED"}
SUCCEEDED = "COMPLETED"
#: Label of the Job and its pod: which SparkApplication they run.
APP_LABEL = "magnetar.dev/spark-app"
SELECTOR = f"{LABEL_SUBMITTER}={SUBMITTER_JOB}"
#: The Job's backoffLimit for restartPolicy Always: as good as unlimited (a Job must have one).
ALWAYS_BACKOFF_LIMIT = 2147483647
#: The state of an Always application between the end of a driver and its replacement.
PENDING_RERUN = "PENDING_RERUN"
#: On the Job of an Always application: how many drivers the Jobs before it started.
EARLIER_ATTEMPTS = "magnetar.dev/earlier-attempts"


def stamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def always(app: Mapping[str, Any]) -> bool:
    """restartPolicy Always: the application runs until it is deleted (a streaming export)."""
    return bool(((app.get("spec") or {}).get("restartPolicy") or {}).get("type") == "Always")


def job_name(app: str) -> str:
    return f"{app}-submit"


def kube_memory(spark_memory: str) -> str:
    """Spark's 512m / 2g as a Kubernetes quantity (512Mi / 2Gi)."""
    text = spark_memory.strip().lower()
    units = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}
    for suffix in ("kb", "mb", "gb", "tb"):
        if text.endswith(suffix):
            text = text[:-1]
    if text and text[-1] in units:
        return text[:-1] + units[text[-1]]
    return text


def volume_confs(volumes: list[Mapping[str, Any]], mounts: list[Mapping[str, Any]]) -> list[str]:
    """spark.kubernetes.executor.volumes.* for each mount: hostPath, persistentVolumeClaim, emptyDir
    and nfs, the volume types Spark on Kubernetes can mount."""
    by_name = {str(v["name"]): v for v in volumes}
    confs: list[str] = []
    for mount in mounts:
        volume = by_name.get(str(mount["name"]))
        if volume is None:
            continue
        options: dict[str, Any]
        if "hostPath" in volume:
            kind, options = "hostPath", {"path": volume["hostPath"]["path"]}
        elif "persistentVolumeClaim" in volume:
            kind, options = "persistentVolumeClaim", {"claimName": volume["persistentVolumeClaim"]["claimName"]}
        elif "emptyDir" in volume:
            kind, options = "emptyDir", dict(volume["emptyDir"] or {})
        elif "nfs" in volume:
            kind, options = "nfs", {"server": volume["nfs"]["server"], "path": volume["nfs"]["path"]}
        else:
            continue
        prefix = f"spark.kubernetes.executor.volumes.{kind}.{mount['name']}"
        confs.append(f"{prefix}.mount.path={mount['mountPath']}")
        if mount.get("readOnly"):
            confs.append(f"{prefix}.mount.readOnly=true")
        if mount.get("subPath"):
            confs.append(f"{prefix}.mount.subPath={mount['subPath']}")
        confs += [f"{prefix}.options.{k}={v}" for k, v in options.items()]
    return confs


def _executor_secret_env(env: list[Mapping[str, Any]], secrets: list[Mapping[str, Any]]) -> list[str]:
    """Executor env vars (from Secrets: the jobs token, identity.py; or values: the TLS CA's path,
    transport_tls.py) and Secret mounts (the CA copy) as Spark's own confs."""
    confs = []
    for var in env:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            confs.append(f"spark.kubernetes.executor.secretKeyRef.{var['name']}={ref['name']}:{ref['key']}")
        elif "value" in var:
            confs.append(f"spark.executorEnv.{var['name']}={var['value']}")
    confs += [f"spark.kubernetes.executor.secrets.{s['name']}={s['path']}" for s in secrets]
    return confs


def submit_command(app: Mapping[str, Any]) -> list[str]:
    """spark-submit in client mode, the Job's pod being the driver."""
    meta, spec = app["metadata"], app["spec"]
    driver, executor = spec.get("driver") or {}, spec.get("executor") or {}
    confs = [
        f"spark.kubernetes.namespace={meta['namespace']}",
        f"spark.kubernetes.container.image={spec['image']}",
        f"spark.kubernetes.container.image.pullPolicy={spec.get('imagePullPolicy', 'IfNotPresent')}",
        f"spark.kubernetes.authenticate.driver.serviceAccountName={driver.get('serviceAccount', 'default')}",
        # bound to the pod IP too (Spark's default bind address is the host), so the executors reach
        # the driver whether Spark tells them spark.driver.host or the bind address
        # (spark.kubernetes.executor.useDriverPodIP, on by default in Spark 4.3)
        "spark.driver.host=$(POD_IP)",
        "spark.kubernetes.driver.pod.name=$(POD_NAME)",
        f"spark.driver.memory={driver.get('memory', '512m')}",
        f"spark.executor.instances={executor.get('instances', 1)}",
        f"spark.executor.cores={executor.get('cores', 1)}",
        f"spark.executor.memory={executor.get('memory', '512m')}",
    ]
    if executor.get("coreRequest"):
        confs.append(f"spark.kubernetes.executor.request.cores={executor['coreRequest']}")
    confs += [f"spark.kubernetes.executor.label.{k}={v}" for k, v in sorted((executor.get("labels") or {}).items())]
    confs += volume_confs(spec.get("volumes") or [], executor.get("volumeMounts") or [])
    confs += _executor_secret_env(executor.get("env") or [], executor.get("secrets") or [])
    confs += [f"{k}={v}" for k, v in sorted((spec.get("sparkConf") or {}).items())]
    command = ["/opt/spark/bin/spark-submit", "--master", MASTER, "--deploy-mode", "client", "--name", meta["name"]]
    for conf in confs:
        command += ["--conf", conf]
    main = str(spec["mainApplicationFile"]).removeprefix("local://")
    return [*command, main, *[str(a) for a in spec.get("arguments") or []]]


def build_submit_job(app: Mapping[str, Any], pod_security_context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The batch/v1 Job that runs `app` (owned by it, so it goes when the application goes)."""
    meta, spec = app["metadata"], app["spec"]
    driver = spec.get("driver") or {}
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, APP_LABEL: meta["name"]}
    pod_labels = {**(driver.get("labels") or {}), **labels, "spark-role": "driver"}
    field = [("POD_IP", "status.podIP"), ("POD_NAME", "metadata.name")]
    requests = {"memory": kube_memory(str(driver.get("memory", "512m")))}
    if driver.get("coreRequest"):
        requests["cpu"] = str(driver["coreRequest"])
    container: dict[str, Any] = {
        "name": "spark-driver",
        "image": spec["image"],
        "imagePullPolicy": spec.get("imagePullPolicy", "IfNotPresent"),
        "args": submit_command(app),
        "env": [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in field]
        + [dict(e) for e in driver.get("env") or []],
        "resources": {"requests": requests},
    }
    mounts = [dict(m) for m in driver.get("volumeMounts") or []]
    secrets = driver.get("secrets") or []  # the driver is this pod: Secret volumes of its own
    secret_volumes = [{"name": f"secret-{i}", "secret": {"secretName": sec["name"]}} for i, sec in enumerate(secrets)]
    mounts += [
        {"name": v["name"], "mountPath": sec["path"], "readOnly": True}
        for v, sec in zip(secret_volumes, secrets, strict=True)
    ]
    if mounts:
        container["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": driver.get("serviceAccount", "default"),
        "containers": [container],
    }
    if pod_security_context:
        pod["securityContext"] = dict(pod_security_context)
    if spec.get("volumes") or secret_volumes:
        pod["volumes"] = [dict(v) for v in spec.get("volumes") or []] + secret_volumes
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(app)],
        },
        # restartPolicy Always (a streaming export): every failed driver is replaced by a new pod
        # (the Job controller's own back-off between them); Never: one attempt, as before
        "spec": {
            "backoffLimit": ALWAYS_BACKOFF_LIMIT if always(app) else 0,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }


def _job_condition(job: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def status_from_job(
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The SparkApplication status that the Job's state means (as the Go operator writes it)."""
    if job is None:
        return {
            **previous,
            "applicationState": {"state": "FAILED", "errorMessage": "the submission Job disappeared"},
            "terminationTime": previous.get("terminationTime") or stamp(now),
        }
    jstatus = job.get("status") or {}
    created = (job.get("metadata") or {}).get("creationTimestamp")
    status: dict[str, Any] = {
        "submissionID": str((job.get("metadata") or {}).get("uid", "")),
        "submissionAttempts": 1,
        "lastSubmissionAttemptTime": previous.get("lastSubmissionAttemptTime") or created or stamp(now),
    }
    newest = _newest_pod(pods)
    if newest:
        status["driverInfo"] = {"podName": newest}
    elif previous.get("driverInfo"):
        status["driverInfo"] = previous["driverInfo"]
    failed = _job_condition(job, "Failed")
    if _job_condition(job, "Complete") is not None or int(jstatus.get("succeeded") or 0) > 0:
        state: dict[str, Any] = {"state": "COMPLETED"}
        status["terminationTime"] = jstatus.get("completionTime") or previous.get("terminationTime") or stamp(now)
    elif failed is not None or int(jstatus.get("failed") or 0) > 0:
        message = (failed or {}).get("message") or "the driver failed (see the driver pod's log)"
        state = {"state": "FAILED", "errorMessage": str(message)}
        status["terminationTime"] = (
            (failed or {}).get("lastTransitionTime") or previous.get("terminationTime") or stamp(now)
        )
    elif int(jstatus.get("active") or 0) > 0 and any((p.get("status") or {}).get("phase") == "Running" for p in pods):
        state = {"state": "RUNNING"}
    else:
        state = {"state": "SUBMITTED"}
    status["applicationState"] = state
    if state["state"] != "SUBMITTED":
        status["executionAttempts"] = 1
    return status


def _live_pods(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Pods that have not ended (a pod being deleted still runs until its grace period ends)."""
    ended = ("Succeeded", "Failed")
    return [str(p["metadata"]["name"]) for p in pods if (p.get("status") or {}).get("phase") not in ended]


def _newest_pod(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The driver pod made last (a Job that replaces failed pods has several)."""
    ordered = sorted(
        pods, key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), str(p["metadata"]["name"]))
    )
    return str(ordered[-1]["metadata"]["name"]) if ordered else None


def status_of_long_running(
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The status of a restartPolicy Always application (the Go operator's states): RUNNING while
    a driver pod runs, SUBMITTED while a new one starts, PENDING_RERUN between a driver's end and
    its replacement (the Job controller's back-off, or a finished Job the submitter replaces).
    executionAttempts counts the drivers started, so restarts = executionAttempts - 1."""
    status: dict[str, Any] = {k: v for k, v in previous.items() if k != "terminationTime"}
    if job is None:
        status["applicationState"] = {"state": PENDING_RERUN, "errorMessage": "the submission Job is being replaced"}
        return status
    meta, jstatus = job.get("metadata") or {}, job.get("status") or {}
    uid = str(meta.get("uid", ""))
    if previous.get("submissionID") != uid:  # a new Job
        status["submissionAttempts"] = int(previous.get("submissionAttempts") or 0) + 1
        status["lastSubmissionAttemptTime"] = meta.get("creationTimestamp") or stamp(now)
    status["submissionID"] = uid
    newest = _newest_pod(pods)
    if newest:
        status["driverInfo"] = {"podName": newest}
    done = int(jstatus.get("failed") or 0) + int(jstatus.get("succeeded") or 0)
    started = done + int(jstatus.get("active") or 0)
    # drivers of the Jobs before this one (written on the Job when it was made)
    base = int((meta.get("annotations") or {}).get(EARLIER_ATTEMPTS) or 0)
    running = any((p.get("status") or {}).get("phase") == "Running" and p["metadata"]["name"] == newest for p in pods)
    finished = _job_condition(job, "Complete") or _job_condition(job, "Failed")
    if finished is not None:
        state: dict[str, Any] = {"state": PENDING_RERUN, "errorMessage": "the driver ended; starting a new one"}
    elif running:
        state = {"state": "RUNNING"}
    elif int(jstatus.get("active") or 0) == 0 and done > 0:
        state = {"state": PENDING_RERUN, "errorMessage": "the driver failed (see its pod's log); restarting"}
    else:
        state = {"state": "SUBMITTED"}
    status["applicationState"] = state
    attempts = max(int(previous.get("executionAttempts") or 0), base + started)
    earlier = (previous.get("driverInfo") or {}).get("podName")
    if newest and earlier and newest != earlier:
        # a deleted driver pod is replaced without being counted as failed by the Job controller
        attempts = max(attempts, int(previous.get("executionAttempts") or 1) + 1)
    if attempts:
        status["executionAttempts"] = attempts
    return status


# ----------------------------------------------------------------------------- scheduling
def next_run(schedule: str, after: datetime.datetime) -> datetime.datetime:
    value = croniter(schedule, after).get_next(datetime.datetime)
    assert isinstance(value, datetime.datetime)
    return value


def build_run(scheduled: Mapping[str, Any], moment: datetime.datetime) -> dict[str, Any]:
    """A SparkApplication from the template, named `<name>-<unix seconds>`, owned by `scheduled`."""
    meta = scheduled["metadata"]
    labels = {**(meta.get("labels") or {}), SCHEDULED_APP_LABEL: meta["name"]}
    return {
        "apiVersion": API_VERSION,
        "kind": APP,
        "metadata": {
            "name": f"{meta['name']}-{int(moment.timestamp())}",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(scheduled)],
        },
        "spec": dict(scheduled["spec"]["template"]),
    }


def app_state(app: Mapping[str, Any]) -> str:
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def runs_to_delete(runs: Sequence[Mapping[str, Any]], successful_limit: int, failed_limit: int) -> list[str]:
    """Finished runs beyond the history limits, oldest first (unfinished runs are never deleted)."""
    ordered = sorted(runs, key=lambda r: str(r["metadata"].get("creationTimestamp", "")), reverse=True)
    succeeded = [r["metadata"]["name"] for r in ordered if app_state(r) == SUCCEEDED]
    failed = [r["metadata"]["name"] for r in ordered if app_state(r) in TERMINAL - {SUCCEEDED}]
    doomed = {*succeeded[successful_limit:], *failed[failed_limit:]}
    return [r["metadata"]["name"] for r in reversed(ordered) if r["metadata"]["name"] in doomed]


def schedule_decision(
    scheduled: Mapping[str, Any], runs: Sequence[Mapping[str, Any]], now: datetime.datetime
) -> tuple[bool, dict[str, Any]]:
    """Whether to start a run now, and the status to write (without lastRun/lastRunName of a new run)."""
    spec, status = scheduled["spec"], dict(scheduled.get("status") or {})
    schedule = str(spec["schedule"])
    if not croniter.is_valid(schedule):
        return False, {**status, "scheduleState": "FailedValidation", "reason": f"invalid schedule {schedule!r}"}
    due = parse_time(status.get("nextRun"))
    out = {**{k: v for k, v in status.items() if k != "reason"}, "scheduleState": "Scheduled"}
    if due is None:
        out["nextRun"] = stamp(next_run(schedule, now))
        return False, out
    if now < due or spec.get("suspend"):
        return False, out
    out["nextRun"] = stamp(next_run(schedule, now))
    unfinished = [r for r in runs if app_state(r) not in TERMINAL]
    policy = spec.get("concurrencyPolicy", "Allow")
    if unfinished and policy == "Forbid":
        out["reason"] = f"skipped a run at {stamp(now)}: {unfinished[0]['metadata']['name']} has not finished"
        return False, out
    return True, out


def _schedule_pass(kube: SparkKube, scheduled: dict[str, Any], now: datetime.datetime) -> None:
    meta = scheduled["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    runs = [
        r
        for r in kube.list_objects(API_VERSION, APP, f"{SCHEDULED_APP_LABEL}={name}")
        if r["metadata"]["namespace"] == namespace
    ]
    start, status = schedule_decision(scheduled, runs, now)
    if start:
        if scheduled["spec"].get("concurrencyPolicy") == "Replace":
            for run in runs:
                if app_state(run) not in TERMINAL:
                    kube.delete_object(API_VERSION, APP, run["metadata"]["name"], namespace)
        run = build_run(scheduled, now)
        kube.create_object(run)
        runs.append(run)
        status.update(lastRun=stamp(now), lastRunName=run["metadata"]["name"])
    spec = scheduled["spec"]
    limit_ok = spec.get("successfulRunHistoryLimit", 1)
    limit_failed = spec.get("failedRunHistoryLimit", 1)
    for old in runs_to_delete(runs, int(limit_ok), int(limit_failed)):
        kube.delete_object(API_VERSION, APP, old, namespace)
    kept = [r for r in runs if r["metadata"]["name"] not in set(runs_to_delete(runs, int(limit_ok), int(limit_failed)))]
    status["pastSuccessfulRunNames"] = [r["metadata"]["name"] for r in kept if app_state(r) == SUCCEEDED]
    status["pastFailedRunNames"] = [r["metadata"]["name"] for r in kept if app_state(r) in TERMINAL - {SUCCEEDED}]
    previous = scheduled.get("status") or {}
    if status != previous:
        removed = {k: None for k in previous if k not in status}  # merge patch: null deletes
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": {**status, **removed}}
        kube.patch_object(API_VERSION, SCHEDULED, name, namespace, patch, status=True)


def _app_pass(
    kube: SparkKube, app: dict[str, Any], now: datetime.datetime, pod_security_context: Mapping[str, Any]
) -> None:
    meta = app["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    previous = dict(app.get("status") or {})
    if app_state(app) in TERMINAL:
        return
    job = kube.get_job(job_name(name), namespace)
    keep_running = always(app)
    if keep_running and job is not None and (_job_condition(job, "Complete") or _job_condition(job, "Failed")):
        kube.delete_job(job_name(name), namespace)  # the next pass makes a new one
        log.info("SparkApplication %s/%s: driver ended, replacing Job %s", namespace, name, job_name(name))
        job = None
    elif keep_running and job is None and _live_pods(kube.job_pods(job_name(name), namespace)):
        # a replaced application's old driver is still stopping: two drivers must never share
        # the checkpoint, so the new Job waits for the next pass
        log.info("SparkApplication %s/%s: waiting for the previous driver to stop", namespace, name)
    elif job is None and (not app_state(app) or keep_running):
        body = build_submit_job(app, pod_security_context)
        if keep_running:
            body["metadata"]["annotations"] = {EARLIER_ATTEMPTS: str(int(previous.get("executionAttempts") or 0))}
        if kube.create_job(body):
            log.info("SparkApplication %s/%s: submitted as Job %s", namespace, name, job_name(name))
        job = kube.get_job(job_name(name), namespace)
    pods = kube.job_pods(job_name(name), namespace) if job is not None else []
    if keep_running:
        status = status_of_long_running(job, pods, previous, now)
    else:
        status = status_from_job(job, pods, previous, now)
    if status != previous:
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        kube.patch_object(API_VERSION, APP, name, namespace, patch, status=True)


def submit_pass(kube: SparkKube, now: datetime.datetime, pod_security_context: Mapping[str, Any]) -> None:
    """One pass of the `job` submitter over every namespace: schedules first, then applications.

    A failure on one object is logged and the others go on; the next pass retries it (a 409 from
    a resourceVersion that moved meanwhile is the usual one, and harmless).
    """
    for scheduled in kube.list_objects(API_VERSION, SCHEDULED, SELECTOR):
        try:
            _schedule_pass(kube, scheduled, now)
        except Exception as exc:  # one broken object must not stop the others
            log.warning("ScheduledSparkApplication %s: %s", scheduled["metadata"].get("name"), exc)
    for app in kube.list_objects(API_VERSION, APP, SELECTOR):
        try:
            _app_pass(kube, app, now, pod_security_context)
        except Exception as exc:
            log.warning("SparkApplication %s: %s", app["metadata"].get("name"), exc)
