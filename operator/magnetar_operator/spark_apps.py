"""SparkApplication and ScheduledSparkApplication documents made from a Topic's `spec.export` or a
Namespace's / Tenant's `spec.retentionSweep`.

Why pure functions over plain dicts: the documents follow the kubeflow spark-operator's
`sparkoperator.k8s.io/v1beta2` API field for field, and the unit tests check them without a
cluster; the real CRD schema checks them in the k8s tests. Nothing here talks to an API server.

Names: `<resource>-export` / `<resource>-retention-sweep`, made DNS-label safe and kept to
`MAX_NAME` (45) characters, so that a scheduled run `<name>-<unix seconds>` (56) and the job
submitter's `<run>-submit` Job (63) are valid label values too; a longer name is cut and given a
hash suffix so that two long names never collide.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from croniter import croniter  # type: ignore[import-untyped]  # no stubs published

from .manifests import MANAGED_BY, owner_reference
from .spark_config import SparkSettings

API_VERSION = "sparkoperator.k8s.io/v1beta2"
APP = "SparkApplication"
SCHEDULED = "ScheduledSparkApplication"

EXPORT = "export"
SWEEP = "retention-sweep"

MAX_NAME = 45
#: Which job an application runs (export | retention-sweep): how the status loop finds ours.
LABEL_JOB = "magnetar.dev/spark-job"
#: job: the operator's `job` submitter runs it; operator: the kubeflow spark-operator does.
LABEL_SUBMITTER = "magnetar.dev/submitter"
#: Hash of what the application was made from: a one-off export re-runs only when it changes.
SPEC_HASH = "magnetar.dev/spec-hash"
#: The spark-operator's label on the runs of a ScheduledSparkApplication (its name).
SCHEDULED_APP_LABEL = "sparkoperator.k8s.io/scheduled-app-name"

_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


class InvalidSparkSpec(ValueError):
    """spec.export / spec.retentionSweep cannot be turned into an application (says why)."""


@dataclass(frozen=True)
class JobKind:
    """What differs between the export of a Topic and the retention sweep of a Namespace/Tenant."""

    job: str  # export | retention-sweep
    section: str  # the spec and status key: export | retentionSweep
    condition: str  # Exported | RetentionSwept


EXPORT_KIND = JobKind(EXPORT, "export", "Exported")
SWEEP_KIND = JobKind(SWEEP, "retentionSweep", "RetentionSwept")


def app_name(resource: str, job: str) -> str:
    """`<resource>-<job>` as a DNS label of at most MAX_NAME characters."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{resource}-{job}".lower()).strip("-")
    if len(base) <= MAX_NAME:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[: MAX_NAME - 9].rstrip('-')}-{digest}"


def validate_schedule(schedule: str) -> None:
    """Five cron fields or an @hourly-style descriptor: what both submitters understand.

    The Go spark-operator also takes `@every 1h`; croniter, which the `job` submitter uses,
    does not, so it is refused here rather than accepted and never run.
    """
    text = schedule.strip()
    if text in _DESCRIPTORS:
        return
    if len(text.split()) != 5 or not croniter.is_valid(text):
        raise InvalidSparkSpec(
            f"schedule {schedule!r} is not a cron expression: use five fields "
            "(minute hour day-of-month month day-of-week, e.g. '0 * * * *') or one of "
            + ", ".join(sorted(_DESCRIPTORS))
        )


def spec_hash(section: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(section, sort_keys=True).encode()).hexdigest()[:16]


def export_arguments(admin_url: str, topic: str, export: Mapping[str, Any]) -> list[str]:
    return [
        EXPORT,
        "--admin-url",
        admin_url,
        "--topic",
        topic,
        "--target",
        str(export["target"]),
        "--name",
        str(export.get("name") or "export"),
    ]


def sweep_arguments(admin_url: str, scope: str, value: str, sweep: Mapping[str, Any]) -> list[str]:
    """`scope` is --tenant or --namespace; `--apply` only when dryRun is explicitly false."""
    args = [SWEEP, "--admin-url", admin_url, scope, value, "--report", str(sweep["report"])]
    if sweep.get("dryRun", True) is False:
        args.append("--apply")
    return args


def _pod_spec(part: Mapping[str, Any], labels: Mapping[str, str], settings: SparkSettings) -> dict[str, Any]:
    spec: dict[str, Any] = {"cores": int(part.get("cores", 1)), "memory": str(part.get("memory", "512m"))}
    if part.get("coreRequest"):
        spec["coreRequest"] = str(part["coreRequest"])
    spec["labels"] = dict(labels)
    if settings.volume_mounts:
        spec["volumeMounts"] = [dict(m) for m in settings.volume_mounts]
    return spec


def application_spec(
    arguments: list[str],
    executors: int,
    settings: SparkSettings,
    job: str,
    env: Sequence[Mapping[str, Any]] = (),
    secrets: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The SparkApplicationSpec (also the template of a ScheduledSparkApplication); ``env`` and
    ``secrets`` go to the driver and the executors (the jobs token with auth on,
    identity.spark_env; the TLS CA with tls on, transport_tls.spark_env/spark_secrets)."""
    pod_labels = {"app.kubernetes.io/name": "magnetar", "app.kubernetes.io/component": f"spark-{job}"}
    driver = _pod_spec(settings.driver, pod_labels, settings)
    driver["serviceAccount"] = settings.service_account
    executor = _pod_spec(settings.executor, pod_labels, settings)
    executor["instances"] = int(executors)
    if env:
        driver["env"] = [dict(e) for e in env]
        executor["env"] = [dict(e) for e in env]
    if secrets:
        driver["secrets"] = [dict(e) for e in secrets]
        executor["secrets"] = [dict(e) for e in secrets]
    spec: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "mainApplicationFile": settings.main_application_file,
        "arguments": list(arguments),
        "sparkVersion": settings.spark_version,
        "restartPolicy": {"type": "Never"},
        "driver": driver,
        "executor": executor,
    }
    if settings.volumes:
        spec["volumes"] = [dict(v) for v in settings.volumes]
    return spec


def _hashed(
    section: Mapping[str, Any],
    arguments: list[str],
    env: Sequence[Mapping[str, Any]],
    secrets: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """What a one-off application's hash covers: env and secrets only when there are (see below)."""
    hashed: dict[str, Any] = {"section": dict(section), "arguments": arguments}
    if env:
        hashed["env"] = [dict(e) for e in env]
    if secrets:
        hashed["secrets"] = [dict(e) for e in secrets]
    return hashed


def build_application(
    owner: Mapping[str, Any],
    kind: JobKind,
    arguments: list[str],
    section: Mapping[str, Any],
    settings: SparkSettings,
    env: Sequence[Mapping[str, Any]] = (),
    secrets: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ScheduledSparkApplication when `section` has a schedule, else a SparkApplication.

    Owned by `owner` (a controller reference), so deleting the resource deletes the application,
    its runs, and (job submitter) their Jobs and pods, through the garbage collector. ``env`` and
    ``secrets`` (the driver's and executors') are part of the spec hash when given, so an
    application made before authentication or TLS was turned on is replaced by one with the token
    or the CA; with none the hash is what it always was, so turning nothing on replaces nothing.
    """
    schedule = section.get("schedule")
    if schedule:
        validate_schedule(str(schedule))
    meta = owner["metadata"]
    name = app_name(meta["name"], kind.job)
    spec = application_spec(arguments, int(section.get("executors", 2)), settings, kind.job, env, secrets)
    labels = {
        "app.kubernetes.io/name": "magnetar",
        "app.kubernetes.io/component": f"spark-{kind.job}",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_JOB: kind.job,
        LABEL_SUBMITTER: settings.submitter,
    }
    metadata = {
        "name": name,
        "namespace": meta["namespace"],
        "labels": labels,
        "annotations": {SPEC_HASH: spec_hash(_hashed(section, arguments, env, secrets))},
        "ownerReferences": [owner_reference(owner)],
    }
    if not schedule:
        return {"apiVersion": API_VERSION, "kind": APP, "metadata": metadata, "spec": spec}
    scheduled = {
        "schedule": str(schedule).strip(),
        "concurrencyPolicy": "Forbid",
        "successfulRunHistoryLimit": 3,
        "failedRunHistoryLimit": 3,
        "template": spec,
    }
    # A scheduled application follows the chart's settings too (image, resources): its hash
    # covers the whole document, so a changed template is patched in.
    metadata["annotations"] = {SPEC_HASH: spec_hash({"section": dict(section), "template": scheduled})}
    return {"apiVersion": API_VERSION, "kind": SCHEDULED, "metadata": metadata, "spec": scheduled}
