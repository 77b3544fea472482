"""BookieEnsemble handlers: keep the StatefulSet, headless Service, PodDisruptionBudget and
ConfigMap equal to the spec, and mirror the StatefulSet's replica counts into status.

Scale-down drains before it removes (DESIGN.md section 6): the highest-numbered bookie is
decommissioned through the broker (its ledgers re-replicated elsewhere), and only then does the
StatefulSet lose that pod, one bookie at a time (see decommissioning.py). While a drain runs the
ScaleDownAllowed condition says Decommissioning with its progress; a drain that can never finish
(fewer bookies left than an ensemble needs) is reported and not attempted. Every other change
(image, resources, config) still goes through. Deletion needs no finalizer: the children carry
owner references and the garbage collector removes them.

These handlers are synchronous: kopf runs them in its thread pool, where the blocking
Kubernetes client belongs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from . import conditions, decommissioning, runtime
from .bookies import CLAIM_NAME, CONFIG_FILE, build_bookie_children
from .conditions import READY, SCALING, Condition
from .config import GROUP, SETTINGS, VERSION
from .manifests import checksum
from .reconciling import event

RESOURCE = (GROUP, VERSION, "bookieensembles")
RECONCILED = "Reconciled"


NOT_REQUESTED = Condition(SCALING, True, "NotRequested", "no scale-down pending")


def plan_scale_down(name: str, namespace: str, want: int, current: int | None) -> tuple[int, Condition, str | None]:
    """(replicas to apply, ScaleDownAllowed condition, retry reason or None) for this reconcile."""
    if current is None or want >= current:
        return want, NOT_REQUESTED, None
    ordinal = current - 1
    bid = decommissioning.bookie_id(name, namespace, ordinal)
    result = decommissioning.drain(SETTINGS.admin_url, bid)
    if result.done:
        replicas = current - 1
        message = f"{result.message}; StatefulSet {current} -> {replicas} replicas (target {want})"
        return (
            replicas,
            Condition(SCALING, True, "Decommissioned", message),
            ("scaling down: next bookie" if replicas > want else None),
        )
    if result.impossible:
        return current, Condition(SCALING, False, "DecommissionImpossible", result.message), None
    return current, Condition(SCALING, False, "Decommissioning", result.message), result.message


def reconcile_bookies(body: Mapping[str, Any], spec: Mapping[str, Any], patch_status: Any, cause: str) -> None:
    kube = runtime.kube()
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    status = body.get("status") or {}
    live = kube.get("apps/v1", "StatefulSet", name, namespace)
    current = (live or {}).get("spec", {}).get("replicas")
    want = int(spec["replicas"])
    forget_pending = [
        bid for bid in status.get("forgetPending") or [] if not decommissioning.forget(SETTINGS.admin_url, bid)
    ]
    replicas, scaling, retry = plan_scale_down(name, namespace, want, current)
    previous = conditions.find(status.get("conditions"), SCALING) or {}
    if scaling is NOT_REQUESTED and previous.get("reason") == "Decommissioned":
        # Keep reporting the last completed scale-down until something else happens.
        scaling = Condition(SCALING, True, "Decommissioned", str(previous.get("message", "")))
    children = build_bookie_children(
        spec, name, namespace, pdb_api_version=kube.pdb_api_version(), owner=body, replicas=replicas
    )
    changes = []
    for child in children:
        outcome = kube.apply(child)
        if outcome != "unchanged":
            changes.append(f"{child['kind']} {child['metadata']['name']} {outcome}")
    created = live is None
    reason, kept = conditions.ready_reason_after(
        status, changed=bool(changes), created=created, cause=cause, type_=RECONCILED
    )
    extra: dict[str, Any] = {}
    if changes:
        message = "; ".join(changes)
        if reason == "DriftCorrected":
            stamp = conditions.now()
            message = f"drift corrected at {stamp}: {message}"
            count = int(status.get("driftCorrections", 0)) + 1
            extra = {"driftCorrections": count, "lastDriftCorrection": stamp}
            event(body, reason, message, warning=True)
        else:
            event(body, reason, message)
    else:
        message = kept or "StatefulSet, Service, PodDisruptionBudget and ConfigMap match the spec"
    if current is not None and replicas < current:  # this pass drained one bookie and removes it
        removed = current - 1
        # The claim outlives the pod otherwise; Kubernetes holds the volume until the pod is gone.
        kube.delete("v1", "PersistentVolumeClaim", f"{CLAIM_NAME}-{name}-{removed}", namespace)
        forget_pending.append(decommissioning.bookie_id(name, namespace, removed))
        event(body, "BookieDecommissioned", scaling.message)
    old_scaling = conditions.find(status.get("conditions"), SCALING) or {}
    if scaling.status is False and old_scaling.get("message") != scaling.message:
        event(body, scaling.reason, scaling.message, warning=True)

    sts = kube.get("apps/v1", "StatefulSet", name, namespace) or {}
    sts_status = sts.get("status") or {}
    ready = int(sts_status.get("readyReplicas") or 0)
    if scaling.status is False:
        readiness = Condition(READY, False, scaling.reason, scaling.message)
    elif ready >= want:
        readiness = Condition(READY, True, "BookiesReady", f"{ready}/{want} bookies ready")
    else:
        readiness = Condition(READY, False, "WaitingForBookies", f"{ready}/{want} bookies ready")
    conditions.write(
        patch_status,
        status,
        [readiness, Condition(RECONCILED, True, reason, message), scaling],
        generation=meta.get("generation"),
        replicas=int(sts_status.get("replicas") or 0),
        readyReplicas=ready,
        desiredReplicas=want,
        statefulSet=name,
        service=name,
        podDisruptionBudget=name,
        configChecksum=checksum(children[0]["data"][CONFIG_FILE]),
        forgetPending=forget_pending,
        **extra,
    )
    if retry is not None:
        raise kopf.TemporaryError(retry, delay=2)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
def apply_bookie_ensemble(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, reason: Any, **_: Any) -> None:
    reconcile_bookies(body, spec, patch.status, str(getattr(reason, "value", reason)))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
def correct_bookie_drift(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    reconcile_bookies(body, spec, patch.status, "timer")
