"""Ordered, health-gated restarts of bookies: which bookie pod, if any, to delete next.

Why the operator rolls bookies and not the StatefulSet controller (DESIGN.md section 6): the
controller's RollingUpdate waits for the restarted pod to be Ready and then takes the next one
down. For a bookie, Ready says only that this process serves; whether the next restart is safe
is a cluster-wide fact — no ledger may be under-replicated, or taking one more bookie away can
leave a fragment with fewer copies than its ack quorum. So the bookie StatefulSet is `OnDelete`
and the operator deletes one pod at a time, as Strimzi's KafkaRoller does for Kafka brokers: the
highest ordinal first, and only when every bookie is Ready and the broker reports no
under-replicated ledger (`GET /admin/v2/bookies/underreplicated`).

One decision per reconcile, in this order (`plan_roll`):

1. a new StatefulSet (no revision yet) or no pod on an old revision: nothing to do (UpToDate);
2. the StatefulSet controller has not yet seen the latest template: wait for it (Restarting);
3. a pod is being deleted, or one is missing: wait for the controller to bring it back (Restarting);
4. a pod on an old revision is itself not Ready: delete it first — restarting a bookie that is
   unavailable anyway costs nothing, and it is how a roll recovers once a bad config is fixed
   (the crash-looping pod runs the bad revision, which is now old);
5. a pod is not Ready: wait — Paused when it reports a failure (CrashLoopBackOff, an image that
   cannot be pulled, an unschedulable pod, a crashed container), Restarting while it just starts;
6. the broker cannot say how many ledgers are under-replicated, or some are: wait (Paused);
7. otherwise delete the highest-numbered pod on an old revision (Restarting).

Pods are told apart from their successors by uid: the handler deletes with a uid precondition,
so a decision made on a stale listing can never take down the pod that replaced it.

`status.currentRevision` of an OnDelete StatefulSet is never moved forward by the controller
(kubernetes/kubernetes#73492), so the revision the ensemble still runs is read from the pods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .conditions import ROLLING, Condition

REVISION_LABEL = "controller-revision-hash"

UP_TO_DATE = "UpToDate"
RESTARTING = "Restarting"
PAUSED = "Paused"
#: A scale-down drain runs first; restarts wait for it (not a problem, so no Paused event).
WAITING_FOR_SCALE_DOWN = "WaitingForScaleDown"

#: Container waiting reasons that are part of a normal start, not a failure.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})


@dataclass(frozen=True)
class PodState:
    """What the roll needs to know about one pod of the StatefulSet."""

    name: str
    ordinal: int
    uid: str
    revision: str
    ready: bool
    terminating: bool
    phase: str
    #: Why the pod is not Ready when it says so (CrashLoopBackOff, Unschedulable, ...), else None.
    problem: str | None = None

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodState:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        name = str(meta.get("name", ""))
        conds = {str(c.get("type")): c for c in status.get("conditions") or []}
        return cls(
            name=name,
            ordinal=ordinal_of(name),
            uid=str(meta.get("uid", "")),
            revision=str((meta.get("labels") or {}).get(REVISION_LABEL, "")),
            ready=(conds.get("Ready") or {}).get("status") == "True",
            terminating=meta.get("deletionTimestamp") is not None,
            phase=str(status.get("phase") or "Pending"),
            problem=_problem(status, conds),
        )

    def describe(self) -> str:
        """Why it is not Ready, for a message: its failure, else its phase."""
        return self.problem or f"phase {self.phase}"


def ordinal_of(pod_name: str) -> int:
    """A StatefulSet pod's ordinal: `bk-2` -> 2 (-1 when the name has none)."""
    _, _, tail = pod_name.rpartition("-")
    return int(tail) if tail.isdigit() else -1


def _problem(status: Mapping[str, Any], conds: Mapping[str, Mapping[str, Any]]) -> str | None:
    phase = status.get("phase")
    if phase in ("Failed", "Unknown"):
        detail = ": ".join(str(x) for x in (status.get("reason"), status.get("message")) if x)
        return f"pod phase {phase}" + (f" ({detail})" if detail else "")
    scheduled = conds.get("PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return _reason_text("Unschedulable", scheduled.get("message"))
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for cs in containers:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting and waiting.get("reason") not in _STARTING:
            return _reason_text(str(waiting.get("reason") or "Waiting"), waiting.get("message"))
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            return _reason_text(str(terminated.get("reason") or "Error"), f"exit code {terminated.get('exitCode')}")
    for cs in containers:
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if not cs.get("ready") and int(cs.get("restartCount") or 0) > 0 and last:
            return (
                f"container {cs.get('name')} restarted {cs.get('restartCount')} times, "
                f"last exit code {last.get('exitCode')} ({last.get('reason') or 'Error'})"
            )
    return None


def _reason_text(reason: str, message: Any) -> str:
    return f"{reason}: {message}" if message else reason


@dataclass(frozen=True)
class Replication:
    """The broker's answer on under-replication: a count, or why it could not be had."""

    under_replicated: int = 0
    error: str | None = None


@dataclass(frozen=True)
class RollStep:
    """One reconcile's decision, with what the status should show about the roll."""

    reason: str  # UpToDate | Restarting | Paused | WaitingForScaleDown
    message: str
    #: The pod to delete now (its uid is the deletion's precondition), or None.
    delete: PodState | None = None
    updated: int = 0
    replicas: int = 0
    current_revision: str = ""
    update_revision: str = ""

    @property
    def done(self) -> bool:
        return self.reason == UP_TO_DATE

    @property
    def paused(self) -> bool:
        return self.reason == PAUSED

    def condition(self) -> Condition:
        return Condition(ROLLING, self.done, self.reason, self.message)

    def status_fields(self) -> dict[str, Any]:
        """The roll's status fields. A StatefulSet too new to have revisions gives none: an empty
        revision reaches the API server as null, which the CRD's string schema refuses, and the
        whole status patch of that pass would be lost with it."""
        fields: dict[str, Any] = {"updatedReplicas": self.updated}
        if self.current_revision:
            fields["currentRevision"] = self.current_revision
        if self.update_revision:
            fields["updateRevision"] = self.update_revision
        return fields


def pods_of(statefulset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[PodState]:
    """The StatefulSet's own pods (named `<set>-N`), lowest ordinal first."""
    name = str(statefulset["metadata"]["name"])
    states = [PodState.from_pod(p) for p in pods]
    return sorted(
        (p for p in states if p.ordinal >= 0 and p.name == f"{name}-{p.ordinal}"),
        key=lambda p: p.ordinal,
    )


def roll_pending(statefulset: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether some pod runs an old revision (the handler then asks the broker about replication)."""
    if statefulset is None:
        return False
    update = str((statefulset.get("status") or {}).get("updateRevision") or "")
    return bool(update) and any(p.revision != update for p in pods_of(statefulset, pods))


def plan_roll(
    statefulset: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    replication: Replication,
    *,
    scale_down: str | None = None,
) -> RollStep:
    """Decide this reconcile's step (see the module docstring for the rules and their order).

    `scale_down` says what drain is in progress, if any: restarts wait for it.
    """
    meta = statefulset.get("metadata") or {}
    spec = statefulset.get("spec") or {}
    status = statefulset.get("status") or {}
    name = str(meta.get("name", ""))
    replicas = int(spec.get("replicas") or 0)
    update = str(status.get("updateRevision") or "")
    all_pods = pods_of(statefulset, pods)
    members = [p for p in all_pods if p.ordinal < replicas]
    stale = [p for p in members if p.revision != update]
    updated = len(members) - len(stale)
    revisions = Counter(p.revision for p in stale)
    current = revisions.most_common(1)[0][0] if stale else update

    def step(reason: str, message: str, delete: PodState | None = None) -> RollStep:
        return RollStep(reason, message, delete, updated, replicas, current, update)

    if not update:  # a new StatefulSet: whatever pods it has were made from its only template
        message = f"{name} is new: its pods start from its current template"
        return RollStep(UP_TO_DATE, message, updated=len(members), replicas=replicas)
    generation = meta.get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and (observed is None or observed < generation):
        return step(RESTARTING, f"waiting for the StatefulSet controller to observe {name} generation {generation}")
    if not stale:
        return step(UP_TO_DATE, f"all {len(members)} bookies run revision {update}")
    progress = f"{updated}/{replicas} bookies on revision {update}"
    if scale_down:
        return step(WAITING_FOR_SCALE_DOWN, f"{progress}; restarts wait for the scale-down: {scale_down}")
    going = [p for p in all_pods if p.terminating]
    if going:
        return step(RESTARTING, f"{going[-1].name}: pod being deleted; {progress}")
    present = {p.ordinal for p in members}
    missing = [f"{name}-{i}" for i in range(replicas) if i not in present]
    if missing:
        return step(RESTARTING, f"{missing[-1]}: waiting for the StatefulSet controller to create it; {progress}")
    broken = [p for p in stale if not p.ready]
    if broken:
        pod = broken[-1]
        return step(
            RESTARTING,
            f"restarting {pod.name} first: not ready ({pod.describe()}) on old revision {pod.revision}; {progress}",
            pod,
        )
    not_ready = [p for p in members if not p.ready]
    if not_ready:
        pod = not_ready[-1]
        failing = [p for p in not_ready if p.problem]
        if failing:
            pod = failing[-1]
            return step(PAUSED, f"{pod.name} not ready: {pod.problem}; {progress}")
        return step(RESTARTING, f"waiting for {pod.name} to become ready ({pod.describe()}); {progress}")
    if replication.error is not None:
        return step(PAUSED, f"{replication.error}; {progress}")
    if replication.under_replicated > 0:
        count = replication.under_replicated
        return step(PAUSED, f"{count} ledger{'s' if count != 1 else ''} under-replicated; {progress}")
    pod = stale[-1]
    return step(
        RESTARTING,
        f"restarting {pod.name} (revision {pod.revision} -> {update}): all {replicas} bookies ready, "
        f"no ledger under-replicated; {progress}",
        pod,
    )
