"""Mirroring the Spark applications' state into their owners: the `Exported` condition of a Topic,
`RetentionSwept` of a Namespace or Tenant, and status.export / status.retentionSweep (application,
state, lastRun, lastSuccess, nextRun, and the job's figures: rows and bytes of an export; ledgers,
bytes, messages of a sweep); and the `Streaming` condition and status.streamingExport of a
continuous export (its query's progress and lag, spark_streaming.py).

Why from the applications and not from a kopf handler of the owner: the state changes on the
application (written by the Go operator, or by the `job` submitter), and the figures are only in
the driver's log, in the `MAGNETAR_RESULT {json}` line every job prints last. The pass works the
same in both submitter modes. Writes are read-modify-write guarded by resourceVersion, so a
concurrent status patch by the owner's own handlers is never overwritten with stale conditions;
a pass that loses the race simply repeats next time. A missing or unreadable log (a control plane
without kubelets) leaves the figures out and is not retried for that run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import conditions
from .conditions import Condition
from .config import API_VERSION as OWNER_API_VERSION
from .spark_apps import (
    API_VERSION,
    APP,
    EXPORT,
    EXPORT_KIND,
    LABEL_JOB,
    SCHEDULED,
    SCHEDULED_APP_LABEL,
    SWEEP_KIND,
    JobKind,
)
from .spark_kube import SparkKube
from .spark_streaming import PROGRESS_ANNOTATION, STREAM, STREAM_KIND, desired_streaming, parse_progress
from .spark_submitter import SUCCEEDED, TERMINAL, app_state

log = logging.getLogger(__name__)

RESULT_PREFIX = "MAGNETAR_RESULT "
OWNER_KINDS = {"Topic", "Namespace", "Tenant"}
#: The figures of each job's MAGNETAR_RESULT line that go into the owner's status.
FIGURES = {"export": ("rows", "bytes"), "retention-sweep": ("ledgers", "bytes", "messages", "applied")}
#: Condition reasons that belong to the owner's handler (a refused spec), not to an application.
HANDLER_REASONS = {"InvalidSpec"}


def parse_result(log_text: str | None) -> dict[str, Any] | None:
    """The last `MAGNETAR_RESULT {json}` line of a driver log, or None."""
    for line in reversed((log_text or "").splitlines()):
        _, found, rest = line.partition(RESULT_PREFIX)
        if found:
            try:
                value = json.loads(rest)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def reason_of(state: str) -> tuple[str, bool | None]:
    """The condition reason and status of an application state (Go operator state names)."""
    if state == SUCCEEDED:
        return "Succeeded", True
    if state in TERMINAL:
        return "Failed", False
    if state in ("RUNNING", "SUCCEEDING", "FAILING"):
        return "Running", None
    return "Submitted", None


@dataclass
class Owned:
    """One owner's applications: its ScheduledSparkApplication (if any) and its (run) apps."""

    owner: tuple[str, str, str]  # kind, namespace, name
    job: str
    scheduled: dict[str, Any] | None = None
    apps: list[dict[str, Any]] = field(default_factory=list)


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def group_by_owner(scheduled: list[dict[str, Any]], apps: list[dict[str, Any]]) -> dict[tuple[str, ...], Owned]:
    """Applications by owner (kind, namespace, name) and job (a Namespace may have a retention
    sweep and a streaming export); runs reach their owner through their ScheduledSparkApplication."""
    groups: dict[tuple[str, ...], Owned] = {}
    schedules: dict[tuple[str, str], Owned] = {}

    def entry(ref: Mapping[str, Any], obj: Mapping[str, Any]) -> Owned | None:
        if ref.get("kind") not in OWNER_KINDS or ref.get("apiVersion") != OWNER_API_VERSION:
            return None
        owner = (str(ref["kind"]), str(obj["metadata"]["namespace"]), str(ref["name"]))
        job = str(obj["metadata"].get("labels", {}).get(LABEL_JOB, EXPORT))
        return groups.setdefault((*owner, job), Owned(owner, job))

    for sched in scheduled:
        ref = _controller(sched)
        owned = entry(ref, sched) if ref else None
        if owned is not None:
            owned.scheduled = sched
            schedules[(sched["metadata"]["namespace"], sched["metadata"]["name"])] = owned
    for app in apps:
        ref = _controller(app)
        if ref is None:
            continue
        if ref.get("kind") == SCHEDULED:
            parent = schedules.get((app["metadata"]["namespace"], str(ref["name"])))
            if parent is not None:
                parent.apps.append(app)
            continue
        owned = entry(ref, app)
        if owned is not None:
            owned.apps.append(app)
    return groups


def desired(
    owned: Owned, current: Mapping[str, Any], result: Mapping[str, Any] | None
) -> tuple[Condition, dict[str, Any]]:
    """The owner's condition and status section, from its applications and the latest result."""
    kind = kind_of(owned.job)
    fields: dict[str, Any] = {}
    sched = owned.scheduled
    if sched is not None:
        fields["nextRun"] = (sched.get("status") or {}).get("nextRun")
    runs = sorted(owned.apps, key=lambda a: str(a["metadata"].get("creationTimestamp", "")))
    if not runs:
        if sched is None:
            return Condition(kind.condition, None, "Submitted", ""), fields
        schedule = sched["spec"]["schedule"]
        message = f"{SCHEDULED} {sched['metadata']['name']} runs on schedule {schedule!r}"
        if fields["nextRun"]:
            message += f"; next run {fields['nextRun']}"
        fields["application"] = sched["metadata"]["name"]
        return Condition(kind.condition, None, "Scheduled", message), fields
    latest = runs[-1]
    name, status = latest["metadata"]["name"], latest.get("status") or {}
    state = app_state(latest)
    reason, ok = reason_of(state)
    fields.update(application=name, state=state or "NEW")
    fields["lastRun"] = status.get("lastSubmissionAttemptTime") or latest["metadata"].get("creationTimestamp")
    successes = [str((a.get("status") or {}).get("terminationTime") or "") for a in runs if app_state(a) == SUCCEEDED]
    last_success = max([s for s in successes if s] + [str(current.get("lastSuccess") or "")])
    if last_success:
        fields["lastSuccess"] = last_success
    message = f"{APP} {name}: {state or 'not submitted yet'}"
    if state in TERMINAL - {SUCCEEDED}:
        error = (status.get("applicationState") or {}).get("errorMessage")
        if error:
            message += f": {error}"
    if state == SUCCEEDED:
        fields["resultOf"] = name
        figures = result if result is not None else (current if current.get("resultOf") == name else {})
        for key in FIGURES[owned.job]:
            value = figures.get(key)
            # The status schema types them: counts are integers, `applied` a boolean.
            if isinstance(value, bool) if key == "applied" else isinstance(value, int) and not isinstance(value, bool):
                fields[key] = value
        shown = ", ".join(f"{fields[k]} {k}" for k in FIGURES[owned.job] if k in fields and k != "applied")
        if shown:
            message += f" ({shown})"
    return Condition(kind.condition, ok, reason, message), fields


def _section_of(kind: JobKind, owner: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return (owner.get("spec") or {}).get(kind.section)


def _driver_result(kube: SparkKube, app: Mapping[str, Any]) -> dict[str, Any] | None:
    pod = ((app.get("status") or {}).get("driverInfo") or {}).get("podName")
    if not pod:
        return None
    try:
        return parse_result(kube.pod_log(str(pod), app["metadata"]["namespace"]))
    except Exception as exc:  # a log that cannot be read only costs the figures
        log.info("no driver log of %s: %s", app["metadata"]["name"], exc)
        return None


def kind_of(job: str) -> JobKind:
    return {EXPORT: EXPORT_KIND, STREAM: STREAM_KIND}.get(job, SWEEP_KIND)


def _driver_progress(kube: SparkKube, app: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields of the streaming driver's progress annotation ({} without one)."""
    pod = ((app.get("status") or {}).get("driverInfo") or {}).get("podName")
    if not pod:
        return {}
    found = kube.get_pod(str(pod), app["metadata"]["namespace"])
    annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
    return parse_progress(annotations.get(PROGRESS_ANNOTATION))


def mirror_owner(kube: SparkKube, owned: Owned, lags: Mapping[tuple[str, str], int | None] | None = None) -> bool:
    """Bring one owner's condition and status section up to date; True when it wrote.

    ``lags``: the backlog of each streaming application's progress subscription, by (namespace,
    application), which the caller asked the broker for (the admin client is asynchronous)."""
    kind_name, namespace, name = owned.owner
    owner = kube.get_object(OWNER_API_VERSION, kind_name, name, namespace)
    if owner is None:
        return False
    kind = kind_of(owned.job)
    if _section_of(kind, owner) is None:
        return False  # spec section removed: the owner's handler removes the applications
    status = owner.get("status") or {}
    old = conditions.find(status.get("conditions"), kind.condition)
    if old is not None and old.get("reason") in HANDLER_REASONS:
        return False
    current = dict(status.get(kind.section) or {})
    runs = sorted(owned.apps, key=lambda a: str(a["metadata"].get("creationTimestamp", "")))
    if owned.job == STREAM:
        latest = runs[-1] if runs else None
        progress = _driver_progress(kube, latest) if latest is not None else {}
        lag = (lags or {}).get((namespace, latest["metadata"]["name"])) if latest is not None else None
        cond, fields = desired_streaming(latest, current, progress, lag)
    else:
        result = None
        if runs and app_state(runs[-1]) == SUCCEEDED and current.get("resultOf") != runs[-1]["metadata"]["name"]:
            result = _driver_result(kube, runs[-1])
        cond, fields = desired(owned, current, result)
    fields = {k: v for k, v in fields.items() if v is not None}
    same_condition = old is not None and all(
        old.get(k) == v for k, v in (("status", cond.status_text), ("reason", cond.reason), ("message", cond.message))
    )
    if same_condition and all(current.get(k) == v for k, v in fields.items()):
        return False
    merged = conditions.merge(status.get("conditions"), [cond], generation=None)
    patch = {
        "metadata": {"resourceVersion": owner["metadata"]["resourceVersion"]},
        "status": {"conditions": merged, kind.section: fields},
    }
    kube.patch_object(OWNER_API_VERSION, kind_name, name, namespace, patch, status=True)
    return True


def mirror_pass(kube: SparkKube, lags: Mapping[tuple[str, str], int | None] | None = None) -> None:
    """One pass over every application the operator made, in both submitter modes (``lags``: see
    mirror_owner)."""
    scheduled = kube.list_objects(API_VERSION, SCHEDULED, LABEL_JOB)
    apps = {
        (a["metadata"]["namespace"], a["metadata"]["name"]): a
        for selector in (LABEL_JOB, SCHEDULED_APP_LABEL)
        for a in kube.list_objects(API_VERSION, APP, selector)
    }
    for owned in group_by_owner(scheduled, list(apps.values())).values():
        try:
            mirror_owner(kube, owned, lags)
        except Exception as exc:  # e.g. 409: the owner changed meanwhile; the next pass repeats
            log.info("status of %s %s/%s not mirrored yet: %s", *owned.owner, exc)
