"""The continuous export of a Topic's or Namespace's `spec.streamingExport`: a long-running
SparkApplication (`restartPolicy: Always`) running `magnetar.jobs.main export --streaming`, its
checkpoint on a PersistentVolumeClaim, and the progress of its query mirrored into the owner.

Why a block of its own beside `spec.export` and not a `streaming: true` flag in it: the two write
different things to their target (the batch export renames Parquet files into `date=D/`; the
streaming file sink keeps a `_spark_metadata` log that Spark's readers of the folder then trust
alone), keep different progress subscriptions, and stop differently. With a flag, removing it would
turn a running stream into a one-off batch export into the same folder, whose files Spark's reader
of that folder would not see. As a block of its own, removing it only stops the stream, and a
batch export beside it must name another target (refused otherwise).

How progress reaches the operator (documented for users in the CRDs):

- the job's StreamingQueryListener writes the query's last progress (batchId, timestamp,
  inputRowsPerSecond, processedRowsPerSecond, numInputRows) as the JSON annotation
  `magnetar.dev/streaming-progress` of its own driver pod (the driver's service account may patch
  pods of its namespace: the chart's Spark Role), and the operator reads it from the pod that the
  application's `status.driverInfo.podName` names. An annotation rather than a log line: it is one
  small GET per pass, survives log rotation, and needs no kubelet to be read;
- the lag in entries is the broker's backlog of the query's progress subscription
  (`magnetar-streaming-<name>`, moved by the source's commit after each batch is in the sink), from
  the topic stats: what retention keeps for the query and it has not yet made durable.

The checkpoint claim: `checkpoint.claimName` names a claim of the user's (never created or
deleted by the operator); otherwise the operator creates `<application>-checkpoint` owned by the
Topic/Namespace, so it goes with its owner. Removing `spec.streamingExport` keeps that claim unless
`checkpoint.deleteClaim` is true: the checkpoint and the file sink's log in the target belong
together, and a query that starts over with a new checkpoint against a target already holding
batches would skip its first batches as already written. Adding the block again resumes exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .conditions import Condition
from .manifests import MANAGED_BY, owner_reference
from .spark_apps import InvalidSparkSpec, JobKind, app_name

STREAM = "streaming-export"
STREAM_KIND = JobKind(STREAM, "streamingExport", "Streaming")
#: The driver pod's annotation with the query's last progress (JSON), written by the job.
PROGRESS_ANNOTATION = "magnetar.dev/streaming-progress"
#: On an operator-made claim: "true" when removing spec.streamingExport deletes it too.
DELETE_CLAIM = "magnetar.dev/delete-with-streaming-export"
CHECKPOINT_VOLUME = "checkpoint"
CHECKPOINT_MOUNT = "/checkpoint"
SUBSCRIPTION_PREFIX = "magnetar-streaming-"
DEFAULT_NAME = "export"
DEFAULT_TRIGGER_SECONDS = 10
DEFAULT_CLAIM_SIZE = "1Gi"
#: Seconds between the restarts of a failed driver (restartPolicy Always).
RETRY_INTERVAL = 10
#: The progress fields copied from the annotation into status.streamingExport.
PROGRESS_FIELDS = {
    "batchId": "batchId",
    "timestamp": "batchTime",
    "inputRowsPerSecond": "inputRowsPerSecond",
    "processedRowsPerSecond": "processedRowsPerSecond",
    "numInputRows": "batchRows",
}


def subscription(section: Mapping[str, Any]) -> str:
    return SUBSCRIPTION_PREFIX + str(section.get("name") or DEFAULT_NAME)


def claim_name(owner_name: str, section: Mapping[str, Any]) -> str:
    """The user's claim, or `<application>-checkpoint` (at most 56 characters: a valid name)."""
    named = (section.get("checkpoint") or {}).get("claimName")
    return str(named) if named else f"{app_name(owner_name, STREAM)}-checkpoint"


def validate(section: Mapping[str, Any], owner_spec: Mapping[str, Any]) -> None:
    """What the CRD schema cannot say (no CEL rules on the API servers we support)."""
    checkpoint = section.get("checkpoint") or {}
    made_only = [k for k in ("size", "storageClassName", "deleteClaim") if k in checkpoint]
    if checkpoint.get("claimName") and made_only:
        raise InvalidSparkSpec(
            f"spec.streamingExport.checkpoint: claimName names an existing claim; {', '.join(made_only)} "
            "only apply to the claim the operator creates when claimName is absent"
        )
    batch = owner_spec.get("export") or {}
    if batch.get("target") and str(batch["target"]).rstrip("/") == str(section["target"]).rstrip("/"):
        raise InvalidSparkSpec(
            "spec.streamingExport.target is spec.export.target too: the streaming file sink keeps a "
            "_spark_metadata log in its folder and Spark's readers of it would ignore the batch export's "
            "files; give each its own target"
        )


def streaming_arguments(admin_url: str, scope: str, value: str, section: Mapping[str, Any]) -> list[str]:
    """`scope` is --topic or --namespace; the checkpoint is a folder of the mounted claim."""
    name = str(section.get("name") or DEFAULT_NAME)
    args = [
        "export",
        "--streaming",
        "--admin-url",
        admin_url,
        scope,
        value,
        "--target",
        str(section["target"]),
        "--name",
        name,
        "--checkpoint",
        f"{CHECKPOINT_MOUNT}/{name}",
        "--trigger-seconds",
        str(int(section.get("triggerSeconds") or DEFAULT_TRIGGER_SECONDS)),
    ]
    if section.get("maxEntriesPerTrigger"):
        args += ["--max-entries-per-trigger", str(int(section["maxEntriesPerTrigger"]))]
    if section.get("startingOffsets"):
        args += ["--starting-offsets", str(section["startingOffsets"])]
    if section.get("failOnDataLoss") is False:
        args.append("--no-fail-on-data-loss")
    return args


def scope_of(arguments: Sequence[str]) -> tuple[str, str, str] | None:
    """(--topic | --namespace, its value, the progress subscription) from an application's arguments."""
    args = list(arguments)
    found: dict[str, str] = {}
    for flag in ("--topic", "--namespace", "--name"):
        if flag in args and args.index(flag) + 1 < len(args):
            found[flag] = args[args.index(flag) + 1]
    scope = "--topic" if "--topic" in found else "--namespace" if "--namespace" in found else None
    if scope is None:
        return None
    return scope, found[scope], SUBSCRIPTION_PREFIX + found.get("--name", DEFAULT_NAME)


def make_long_running(app: dict[str, Any], owner_name: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """Turn a SparkApplication made by build_application into the streaming one: restarted
    whatever the driver's end (the Go operator's `Always`; the `job` submitter does the same), with
    the checkpoint claim mounted at CHECKPOINT_MOUNT in the driver and in every executor."""
    spec = app["spec"]
    spec["restartPolicy"] = {
        "type": "Always",
        "onFailureRetryInterval": RETRY_INTERVAL,
        "onSubmissionFailureRetryInterval": RETRY_INTERVAL,
    }
    claim = claim_name(owner_name, section)
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}},
    ]
    for part in ("driver", "executor"):
        mounts = list(spec[part].get("volumeMounts") or [])
        spec[part]["volumeMounts"] = [*mounts, {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT}]
    return app


def build_claim(owner: Mapping[str, Any], section: Mapping[str, Any]) -> dict[str, Any] | None:
    """The checkpoint claim the operator makes (None when the spec names the user's own)."""
    checkpoint = section.get("checkpoint") or {}
    if checkpoint.get("claimName"):
        return None
    meta = owner["metadata"]
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(checkpoint.get("size") or DEFAULT_CLAIM_SIZE)}},
    }
    if checkpoint.get("storageClassName"):
        spec["storageClassName"] = str(checkpoint["storageClassName"])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(meta["name"], section),
            "namespace": meta["namespace"],
            "labels": {
                "app.kubernetes.io/name": "magnetar",
                "app.kubernetes.io/component": f"spark-{STREAM}",
                "app.kubernetes.io/managed-by": MANAGED_BY,
            },
            "annotations": {DELETE_CLAIM: "true" if checkpoint.get("deleteClaim") is True else "false"},
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": spec,
    }


def parse_progress(text: str | None) -> dict[str, Any]:
    """The status fields of a progress annotation; {} when absent or not a JSON object."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, Any] = {}
    for key, field in PROGRESS_FIELDS.items():
        item = value.get(key)
        if key == "timestamp" and isinstance(item, str):
            out[field] = item
        elif key in ("batchId", "numInputRows") and isinstance(item, int) and not isinstance(item, bool):
            out[field] = item
        elif key.endswith("PerSecond") and isinstance(item, int | float) and not isinstance(item, bool):
            out[field] = round(float(item), 3)
    return out


def entries_behind(stats: Sequence[Mapping[str, Any]], name: str) -> int | None:
    """The entries the subscription ``name`` has yet to pass, over internal stats documents (one
    per partition or topic): those after its mark-delete position, counted from each ledger's
    ``entries``. Entries, not messages, because the query's offsets and ``maxEntriesPerTrigger``
    count entries (a batch of many messages is one). None when no topic has the subscription yet."""
    total, seen = 0, False
    for doc in stats:
        cursor = (doc.get("cursors") or {}).get(name)
        if not isinstance(cursor, Mapping):
            continue
        seen = True
        ledger_text, _, entry_text = str(cursor.get("markDeletePosition") or "-1:-1").partition(":")
        ledger, entry = int(ledger_text), int(entry_text or -1)
        for info in doc.get("ledgers") or []:
            lid, entries = int(info.get("ledgerId", -1)), int(info.get("entries") or 0)
            if lid > ledger:
                total += entries
            elif lid == ledger:
                total += max(entries - (entry + 1), 0)
    return total if seen else None


def _state(app: Mapping[str, Any]) -> str:
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def desired_streaming(
    app: Mapping[str, Any] | None,
    current: Mapping[str, Any],
    progress: Mapping[str, Any],
    lag: int | None,
) -> tuple[Condition, dict[str, Any]]:
    """The owner's `Streaming` condition and status.streamingExport, from its application, the
    driver's last progress (status fields, parse_progress) and the subscription's backlog.

    A restarted driver has written no progress yet: the last batch known stays in the status."""
    kind = STREAM_KIND
    if app is None:
        return Condition(kind.condition, None, "Submitted", ""), {}
    name, status = app["metadata"]["name"], app.get("status") or {}
    state = _state(app)
    fields: dict[str, Any] = {"application": name, "state": state or "NEW"}
    claim = next(
        (
            v["persistentVolumeClaim"]["claimName"]
            for v in (app.get("spec") or {}).get("volumes") or []
            if v.get("name") == CHECKPOINT_VOLUME and v.get("persistentVolumeClaim")
        ),
        None,
    )
    if claim:
        fields["checkpointClaim"] = claim
    attempts = status.get("executionAttempts")
    if isinstance(attempts, int) and attempts > 0:
        fields["restarts"] = attempts - 1
    for field in PROGRESS_FIELDS.values():
        value = progress.get(field, current.get(field))
        if value is not None:
            fields[field] = value
    if lag is not None:
        fields["lagEntries"] = lag
    message = f"{name}: {state or 'not submitted yet'}"
    if "batchId" in fields:
        message += (
            f"; batch {fields['batchId']} at {fields.get('batchTime', '?')}: "
            f"{fields.get('inputRowsPerSecond', 0)} rows/s in, "
            f"{fields.get('processedRowsPerSecond', 0)} rows/s processed"
        )
    if lag is not None:
        message += f"; lag {lag} entries"
    error = (status.get("applicationState") or {}).get("errorMessage")
    if state == "RUNNING":
        return Condition(kind.condition, True, "Running", message), fields
    if state in ("PENDING_RERUN", "FAILING", "COMPLETED", "SUCCEEDING"):
        reason, ok = "Restarting", None
    elif state in ("FAILED", "SUBMISSION_FAILED"):
        reason, ok = "Failed", False
    else:
        reason, ok = "Submitted", None
    if error:
        message += f": {error}"
    return Condition(kind.condition, ok, reason, message), fields
