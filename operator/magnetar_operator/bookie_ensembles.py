"""BookieEnsemble handlers: keep the StatefulSet, headless Service, PodDisruptionBudget and
ConfigMap equal to the spec, and mirror the StatefulSet's replica counts into status.

Scale-down is refused, not performed: removing a bookie safely means re-replicating every ledger
fragment it holds before its pod and volume go (DESIGN.md section 6), and that decommission path
arrives with the replicated-cluster work. Until then a lower spec.replicas leaves the StatefulSet
at its current size, and the ScaleDownAllowed condition says why; every other change (image,
resources, config) still goes through. Deletion needs no finalizer: the children carry owner
references and the garbage collector removes them.

These handlers are synchronous: kopf runs them in its thread pool, where the blocking
Kubernetes client belongs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from . import conditions, runtime
from .bookies import CONFIG_FILE, build_bookie_children
from .conditions import READY, SCALING, Condition
from .config import GROUP, SETTINGS, VERSION
from .manifests import checksum
from .reconciling import event

RESOURCE = (GROUP, VERSION, "bookieensembles")
RECONCILED = "Reconciled"


def scale_down_refusal(want: int, current: int | None) -> Condition:
    if current is None or want >= current:
        return Condition(SCALING, True, "NotRequested", "no scale-down pending")
    return Condition(
        SCALING,
        False,
        "DecommissionNotAvailable",
        f"spec.replicas {want} is below the current {current} bookies: scaling down needs the "
        "bookie decommission path (re-replicate the removed bookies' ledgers first), which comes "
        f"with the replicated-cluster work; the StatefulSet stays at {current} replicas",
    )


def reconcile_bookies(body: Mapping[str, Any], spec: Mapping[str, Any], patch_status: Any, cause: str) -> None:
    kube = runtime.kube()
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    status = body.get("status") or {}
    live = kube.get("apps/v1", "StatefulSet", name, namespace)
    current = (live or {}).get("spec", {}).get("replicas")
    want = int(spec["replicas"])
    scaling = scale_down_refusal(want, current)
    replicas = current if scaling.status is False else want
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
    old_scaling = conditions.find(status.get("conditions"), SCALING) or {}
    if scaling.status is False and old_scaling.get("message") != scaling.message:
        event(body, "ScaleDownRefused", scaling.message, warning=True)

    sts = kube.get("apps/v1", "StatefulSet", name, namespace) or {}
    sts_status = sts.get("status") or {}
    ready = int(sts_status.get("readyReplicas") or 0)
    if scaling.status is False:
        readiness = Condition(READY, False, "ScaleDownRefused", scaling.message)
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
        **extra,
    )


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
def apply_bookie_ensemble(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, reason: Any, **_: Any) -> None:
    reconcile_bookies(body, spec, patch.status, str(getattr(reason, "value", reason)))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
def correct_bookie_drift(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    reconcile_bookies(body, spec, patch.status, "timer")
