"""Status conditions, computed purely and written as one status patch.

Why: `kubectl get` and `kubectl wait --for=condition=Ready` read conditions, so their rules must
be the Kubernetes ones — `lastTransitionTime` moves only when `status` flips, `reason` is a
CamelCase word, `message` carries the broker's own error text. The functions here never touch the
API; handlers hand the result to kopf's `patch.status`, which kopf applies even when the handler
then raises, so a refused spec still gets its explanation.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

READY = "Ready"
POLICIES = "PoliciesApplied"
SCALING = "ScaleDownAllowed"
#: True when every bookie pod runs the StatefulSet's latest template (rolling.py).
ROLLING = "PodsUpToDate"
#: True when the broker's newest live schema of a Topic is its spec.schemaInfo (topic_schema.py).
SCHEMA = "SchemaApplied"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None is "Unknown"
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else ("True" if self.status else "False")


def merge(
    existing: Iterable[Mapping[str, Any]] | None,
    updates: Iterable[Condition],
    *,
    generation: int | None,
    timestamp: str | None = None,
) -> list[dict[str, Any]]:
    """Apply `updates` to `existing`, keeping lastTransitionTime when a condition's status holds."""
    stamp = timestamp or now()
    by_type: dict[str, dict[str, Any]] = {str(c["type"]): dict(c) for c in existing or []}
    order = [str(c["type"]) for c in existing or []]
    for cond in updates:
        old = by_type.get(cond.type)
        new: dict[str, Any] = {
            "type": cond.type,
            "status": cond.status_text,
            "reason": cond.reason,
            "message": cond.message[:4000],
            "lastTransitionTime": stamp,
        }
        if generation is not None:
            new["observedGeneration"] = generation
        if old is not None and old.get("status") == new["status"]:
            new["lastTransitionTime"] = old.get("lastTransitionTime", stamp)
        if cond.type not in by_type:
            order.append(cond.type)
        by_type[cond.type] = new
    return [by_type[t] for t in order]


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for cond in conditions or []:
        if cond.get("type") == type_:
            return cond
    return None


def is_true(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> bool:
    cond = find(conditions, type_)
    return cond is not None and cond.get("status") == "True"


def write(
    patch_status: MutableMapping[str, Any],
    status: Mapping[str, Any],
    updates: Iterable[Condition],
    *,
    generation: int | None,
    **fields: Any,
) -> None:
    """Put conditions, observedGeneration and extra status fields into kopf's status patch.

    Conditions another handler of the same pass already put into the patch are kept: kopf
    applies one patch per pass, and its `conditions` list replaces the stored one as a whole.
    """
    base = patch_status.get("conditions") or status.get("conditions")
    patch_status["conditions"] = merge(base, updates, generation=generation)
    if generation is not None:
        patch_status["observedGeneration"] = generation
    for key, value in fields.items():
        patch_status[key] = value


def ready_reason_after(
    status: Mapping[str, Any], *, changed: bool, created: bool, cause: str, type_: str = READY
) -> tuple[str, str | None]:
    """The Ready reason of a successful pass: what it did, or what was last recorded.

    A pass that changed nothing keeps a previous True reason and message (so "DriftCorrected"
    stays visible until something else happens), otherwise says "Synced". Changes made by the
    drift timer, or found when the operator resumes an object that was already Ready, are drift;
    otherwise the pass "Created" the broker object or "Updated" it. `cause` is one of create,
    update, resume, timer; `type_` is the condition that records it (Ready for broker objects).
    """
    was_ready = is_true(status.get("conditions"), type_)
    if not changed:
        old = find(status.get("conditions"), type_)
        if was_ready and old is not None:
            return str(old.get("reason", "Synced")), str(old.get("message", ""))
        return "Synced", None
    if cause == "timer" or (cause == "resume" and was_ready):
        return "DriftCorrected", None
    return ("Created" if created else "Updated"), None
