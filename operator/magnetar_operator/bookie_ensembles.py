"""BookieEnsemble handlers: keep the StatefulSet, headless Service, PodDisruptionBudget and
ConfigMap equal to the spec, and mirror the StatefulSet's replica counts into status.

Scale-down drains before it removes (DESIGN.md section 6): the highest-numbered bookie is
decommissioned through the broker (its ledgers re-replicated elsewhere), and only then does the
StatefulSet lose that pod, one bookie at a time (see decommissioning.py). While a drain runs the
ScaleDownAllowed condition says Decommissioning with its progress; a drain that can never finish
(fewer bookies left than an ensemble needs) is reported and not attempted. The drained bookie's
volume claim is deleted with it unless `spec.storage.deleteClaim` is false. Every other change
(image, resources, config) still goes through. Deletion needs no finalizer: the children carry
owner references and the garbage collector removes them.

Restarts are the operator's too (rolling.py): the StatefulSet is OnDelete, and after applying the
children each pass deletes at most one bookie pod — the highest-numbered one on an old revision,
only while every bookie is Ready and no ledger is under-replicated. The PodsUpToDate condition
says what the roll is doing or waiting for; it emits RollingUpdatePaused / RollingUpdateResumed
events when a failure stops it and when it goes on, and while a roll is under way the handler is
retried every few seconds instead of waiting for the drift timer. A scale-down drain goes first.
Passes over one ensemble are serialized (the drift timer and the spec handler may overlap), and
a pod is deleted with a uid precondition, so two passes can never take two bookies down.

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

from . import conditions, decommissioning, rolling, runtime
from .admin import AdminClient, AdminError, BrokerUnavailable
from .bookies import CLAIM_NAME, CONFIG_FILE, build_bookie_children, delete_claim, selector
from .conditions import READY, ROLLING, SCALING, Condition
from .config import GROUP, SETTINGS, VERSION
from .decommissioning import DrainResult
from .manifests import checksum
from .reconciling import event
from .rolling import PAUSED, Replication, RollStep

RESOURCE = (GROUP, VERSION, "bookieensembles")
API_VERSION, KIND = f"{GROUP}/{VERSION}", "BookieEnsemble"
RECONCILED = "Reconciled"
#: How soon a pass runs again while a roll is under way (a pod deleted, or one coming back).
ROLL_RETRY_SECONDS = 2.0


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


def _read_set(name: str, namespace: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The StatefulSet and its pods, as the roll sees them (blocking)."""
    kube = runtime.kube()
    sts = kube.get("apps/v1", "StatefulSet", name, namespace)
    pods = kube.select("v1", "Pod", namespace, selector(name)) if sts is not None else []
    return sts, pods


async def _replication(admin: AdminClient) -> Replication:
    """How many ledgers the broker reports under-replicated, or why it could not say."""
    try:
        return Replication(len(await admin.underreplicated_ledgers()))
    except BrokerUnavailable as exc:
        return Replication(error=f"broker unreachable: {exc.reason}")
    except AdminError as exc:
        return Replication(error=f"under-replicated ledgers unknown (HTTP {exc.status}): {exc.reason}")


async def roll_bookies(
    body: Mapping[str, Any],
    admin: AdminClient,
    sts: Mapping[str, Any] | None,
    pods: list[dict[str, Any]],
    *,
    scale_down: str | None,
) -> RollStep:
    """Plan this pass's restart step, delete the pod it names, and post the events it calls for."""
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    if sts is None:
        return RollStep(rolling.RESTARTING, f"StatefulSet {name} not found; the next pass recreates it")
    replication = await _replication(admin) if rolling.roll_pending(sts, pods) else Replication()
    step = rolling.plan_roll(sts, pods, replication, scale_down=scale_down)
    if step.delete is not None:
        pod = step.delete
        if await asyncio.to_thread(runtime.kube().delete_pod, pod.name, namespace, pod.uid):
            event(body, "RestartingBookie", step.message)
    previous = conditions.find((body.get("status") or {}).get("conditions"), ROLLING) or {}
    if step.paused and previous.get("reason") != PAUSED:
        event(body, "RollingUpdatePaused", step.message, warning=True)
    elif not step.paused and previous.get("reason") == PAUSED:
        event(body, "RollingUpdateResumed", step.message)
    return step


_locks: dict[tuple[str, str], asyncio.Lock] = {}


def _lock(namespace: str, name: str) -> asyncio.Lock:
    """One pass at a time per ensemble: the spec handler and the drift timer may overlap."""
    return _locks.setdefault((namespace, name), asyncio.Lock())


def _apply_children(
    spec: Mapping[str, Any],
    name: str,
    namespace: str,
    owner: Mapping[str, Any],
    replicas: int,
    default_security_context: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Build and apply every child (blocking); return them and what changed."""
    kube = runtime.kube()
    children = build_bookie_children(
        spec,
        name,
        namespace,
        pdb_api_version=kube.pdb_api_version(),
        owner=owner,
        replicas=replicas,
        default_security_context=default_security_context,
    )
    changes = []
    for child in children:
        outcome = kube.apply(child)
        if outcome != "unchanged":
            changes.append(f"{child['kind']} {child['metadata']['name']} {outcome}")
    return children, changes


def _delete_claim(name: str, namespace: str, ordinal: int) -> None:
    runtime.kube().delete("v1", "PersistentVolumeClaim", f"{CLAIM_NAME}-{name}-{ordinal}", namespace)


async def reconcile_bookies(body: Mapping[str, Any], spec: Mapping[str, Any], cause: str) -> None:
    """One pass, serialised with the ensemble's other passes and working on its current status.

    kopf runs the drift timer beside the spec handlers, and a pass that waited for the lock holds
    the body kopf gave it before the previous pass wrote its status. Writing conditions computed
    from that stale status (kopf's patch replaces the ``conditions`` list whole) undid what the
    previous pass reported: a finished drain's condition went back to the bookie before. So under
    the lock each pass re-reads the object, skips a timer pass whose spec is already superseded
    (the spec handler for the newer generation follows), and writes its status itself before
    letting the next pass in, instead of through kopf's patch, which lands after the lock is gone.
    """
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    kube = runtime.kube()
    async with _lock(namespace, name):
        fresh = await asyncio.to_thread(kube.get, API_VERSION, KIND, name, namespace)
        if fresh is None:
            return  # deleted meanwhile: its children go with it (owner references)
        if cause == "timer" and (fresh.get("metadata") or {}).get("generation") != meta.get("generation"):
            return
        status: dict[str, Any] = {}
        try:
            await _reconcile_bookies({**body, "status": fresh.get("status") or {}}, spec, status, cause)
        finally:
            if status:
                await asyncio.to_thread(kube.patch_status, API_VERSION, KIND, name, namespace, status)


async def _reconcile_bookies(body: Mapping[str, Any], spec: Mapping[str, Any], patch_status: Any, cause: str) -> None:
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
    children, changes = await asyncio.to_thread(
        _apply_children, spec, name, namespace, body, replicas, SETTINGS.pod_security_context
    )
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
        if delete_claim(spec):
            # The claim outlives the pod otherwise; Kubernetes holds the volume until the pod is gone.
            await asyncio.to_thread(_delete_claim, name, namespace, removed)
            event(body, "BookieDecommissioned", scaling.message)
        else:
            claim = f"{CLAIM_NAME}-{name}-{removed}"
            event(body, "BookieDecommissioned", f"{scaling.message}; claim {claim} kept (storage.deleteClaim: false)")
        forget_pending.append(decommissioning.bookie_id(name, namespace, removed))
    old_scaling = conditions.find(status.get("conditions"), SCALING) or {}
    if scaling.status is False and old_scaling.get("message") != scaling.message:
        event(body, scaling.reason, scaling.message, warning=True)

    live_sts, pods = await asyncio.to_thread(_read_set, name, namespace)
    draining = step is not None and scaling.reason != "DecommissionImpossible"
    roll = await roll_bookies(body, admin, live_sts, pods, scale_down=scaling.message if draining else None)
    sts = live_sts or {}
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
        [readiness, Condition(RECONCILED, True, reason, message), scaling, roll.condition()],
        generation=meta.get("generation"),
        replicas=int(sts_status.get("replicas") or 0),
        readyReplicas=ready,
        desiredReplicas=want,
        statefulSet=name,
        service=name,
        podDisruptionBudget=name,
        configChecksum=checksum(children[0]["data"][CONFIG_FILE]),
        forgetPending=forget_pending,
        **roll.status_fields(),
        **extra,
    )
    if retry is not None:
        raise kopf.TemporaryError(retry, delay=2)
    if not roll.done:
        # Paused waits on something outside the operator (a crashing pod, the broker): ask less often.
        raise kopf.TemporaryError(roll.message, delay=SETTINGS.retry_delay if roll.paused else ROLL_RETRY_SECONDS)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def apply_bookie_ensemble(body: kopf.Body, spec: kopf.Spec, reason: Any, **_: Any) -> None:
    await reconcile_bookies(body, spec, str(getattr(reason, "value", reason)))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
async def correct_bookie_drift(body: kopf.Body, spec: kopf.Spec, **_: Any) -> None:
    await reconcile_bookies(body, spec, "timer")
