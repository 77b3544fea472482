"""BookieEnsemble handlers: keep the StatefulSet, headless Service, PodDisruptionBudget and
ConfigMap equal to the spec, and mirror the StatefulSet's replica counts into status.

Scale-down drains before it removes (DESIGN.md section 6): the highest-numbered bookie is
decommissioned through the broker (its ledgers re-replicated elsewhere), and only then does the
StatefulSet lose that pod, one bookie at a time (see decommissioning.py). While a drain runs the
ScaleDownAllowed condition says Decommissioning with its progress; a drain that can never finish
(fewer bookies left than an ensemble needs) is reported and not attempted. Every other change
(image, resources, config) still goes through. Deletion needs no finalizer: the children carry
owner references and the garbage collector removes them.

The handlers are async like the Tenant, Namespace and Topic ones: the drain and the forget go
through the shared admin client, and the blocking Kubernetes client runs in a thread
(asyncio.to_thread), a few calls grouped per thread hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from . import conditions, decommissioning, runtime
from .bookies import CLAIM_NAME, CONFIG_FILE, build_bookie_children
from .conditions import READY, SCALING, Condition
from .config import GROUP, SETTINGS, VERSION
from .decommissioning import DrainResult
from .manifests import checksum
from .reconciling import event

RESOURCE = (GROUP, VERSION, "bookieensembles")
RECONCILED = "Reconciled"


NOT_REQUESTED = Condition(SCALING, True, "NotRequested", "no scale-down pending")


@dataclass(frozen=True)
class ScaleDown:
    """One scale-down step: drain `bookie` (the highest ordinal), then shrink the StatefulSet by one."""

    bookie: str
    current: int
    want: int

    def after(self, result: DrainResult) -> tuple[int, Condition, str | None]:
        """(replicas to apply, ScaleDownAllowed condition, retry reason or None) once drained or not."""
        if result.done:
            replicas = self.current - 1
            message = f"{result.message}; StatefulSet {self.current} -> {replicas} replicas (target {self.want})"
            return (
                replicas,
                Condition(SCALING, True, "Decommissioned", message),
                ("scaling down: next bookie" if replicas > self.want else None),
            )
        if result.impossible:
            return self.current, Condition(SCALING, False, "DecommissionImpossible", result.message), None
        return self.current, Condition(SCALING, False, "Decommissioning", result.message), result.message


def plan_scale_down(name: str, namespace: str, want: int, current: int | None) -> ScaleDown | None:
    """The drain this pass must run before the StatefulSet may shrink, or None (no scale-down).

    Pure: the handler sends the decommission request and hands its result to `ScaleDown.after`.
    """
    if current is None or want >= current:
        return None
    return ScaleDown(decommissioning.bookie_id(name, namespace, current - 1), current, want)


def _get_statefulset(name: str, namespace: str) -> dict[str, Any] | None:
    return runtime.kube().get("apps/v1", "StatefulSet", name, namespace)


def _apply_children(
    spec: Mapping[str, Any], name: str, namespace: str, owner: Mapping[str, Any], replicas: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Build and apply every child (blocking); return them and what changed."""
    kube = runtime.kube()
    children = build_bookie_children(
        spec, name, namespace, pdb_api_version=kube.pdb_api_version(), owner=owner, replicas=replicas
    )
    changes = []
    for child in children:
        outcome = kube.apply(child)
        if outcome != "unchanged":
            changes.append(f"{child['kind']} {child['metadata']['name']} {outcome}")
    return children, changes


def _delete_claim(name: str, namespace: str, ordinal: int) -> None:
    runtime.kube().delete("v1", "PersistentVolumeClaim", f"{CLAIM_NAME}-{name}-{ordinal}", namespace)


async def reconcile_bookies(body: Mapping[str, Any], spec: Mapping[str, Any], patch_status: Any, cause: str) -> None:
    admin = runtime.admin()
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    status = body.get("status") or {}
    live = await asyncio.to_thread(_get_statefulset, name, namespace)
    current = (live or {}).get("spec", {}).get("replicas")
    want = int(spec["replicas"])
    forget_pending = [bid for bid in status.get("forgetPending") or [] if not await decommissioning.forget(admin, bid)]
    step = plan_scale_down(name, namespace, want, current)
    if step is None:
        replicas, scaling, retry = want, NOT_REQUESTED, None
    else:
        replicas, scaling, retry = step.after(await decommissioning.drain(admin, step.bookie))
    previous = conditions.find(status.get("conditions"), SCALING) or {}
    if scaling is NOT_REQUESTED and previous.get("reason") == "Decommissioned":
        # Keep reporting the last completed scale-down until something else happens.
        scaling = Condition(SCALING, True, "Decommissioned", str(previous.get("message", "")))
    children, changes = await asyncio.to_thread(_apply_children, spec, name, namespace, body, replicas)
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
        await asyncio.to_thread(_delete_claim, name, namespace, removed)
        forget_pending.append(decommissioning.bookie_id(name, namespace, removed))
        event(body, "BookieDecommissioned", scaling.message)
    old_scaling = conditions.find(status.get("conditions"), SCALING) or {}
    if scaling.status is False and old_scaling.get("message") != scaling.message:
        event(body, scaling.reason, scaling.message, warning=True)

    sts = await asyncio.to_thread(_get_statefulset, name, namespace) or {}
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
async def apply_bookie_ensemble(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, reason: Any, **_: Any) -> None:
    await reconcile_bookies(body, spec, patch.status, str(getattr(reason, "value", reason)))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
async def correct_bookie_drift(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    await reconcile_bookies(body, spec, patch.status, "timer")
