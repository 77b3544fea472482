"""What every broker-side reconciliation shares: outcomes, the error-to-retry policy, status.

Why one place: Tenant, Namespace and Topic all end the same way — a Ready condition, a policy
condition, observedGeneration, an event when something changed — and all fail the same way. The
exception type is the retry policy (STYLE.md): a spec no broker can honour raises
kopf.PermanentError (kopf stops retrying until the spec changes), anything that may resolve by
itself — a missing tenant, a broker that is down — raises kopf.TemporaryError. The conditions
are written into kopf's status patch before raising; kopf applies the patch either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from . import conditions
from .admin import AdminError, Conflict, InvalidRequest, NotFound, PreconditionFailed
from .conditions import POLICIES, READY, Condition
from .config import SETTINGS
from .policies import InvalidSpec


class Waiting(Exception):
    """Something this resource depends on is not there yet; retry later with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Outcome:
    """What one reconciliation pass found and did."""

    broker_name: str
    #: Human-readable descriptions of the writes made to the broker (empty: nothing to do).
    changes: list[str] = field(default_factory=list)
    created: bool = False
    policy: Condition | None = None
    message: str = ""
    status: dict[str, Any] = field(default_factory=dict)
    #: Further conditions this pass decided (a Topic's SchemaApplied), written beside Ready.
    conditions: list[Condition] = field(default_factory=list)


class Refused(Exception):
    """The broker refused one part of a spec whose other parts are applied (a schema the live
    versions forbid). Ready turns False with `reason`; `condition` carries the broker's words;
    `outcome` is what the pass did before, so its status and conditions are not lost."""

    def __init__(self, reason: str, condition: Condition, outcome: Outcome) -> None:
        super().__init__(condition.message)
        self.reason = reason
        self.condition = condition
        self.outcome = outcome


@dataclass(frozen=True)
class Context:
    """The parts of a kopf handler call a reconciliation needs (kept small for tests)."""

    body: Mapping[str, Any]
    status: Mapping[str, Any]
    patch_status: MutableMapping[str, Any]
    generation: int | None
    cause: str  # create | update | resume | timer

    @property
    def in_timer(self) -> bool:
        return self.cause == "timer"


def context(body: Any, patch: Any, cause: Any) -> Context:
    status = body.get("status") or {}
    return Context(
        body=body,
        status=status,
        patch_status=patch.status,
        generation=body.get("metadata", {}).get("generation"),
        cause=str(getattr(cause, "value", cause)),
    )


def event(body: Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
    """Post a Kubernetes event about `body` (Normal, or Warning when something is wrong)."""
    post = kopf.warn if warning else kopf.info
    post(cast(kopf.Body, body), reason=reason, message=message)


def _event(ctx: Context, reason: str, message: str, *, warning: bool) -> None:
    """One Kubernetes event, but only when the Ready condition is about to say something new."""
    old = conditions.find(ctx.status.get("conditions"), READY)
    if old is not None and old.get("reason") == reason and old.get("message") == message:
        return
    event(ctx.body, reason, message, warning=warning)


def _fail(ctx: Context, reason: str, message: str, *, policy: Condition | None = None) -> None:
    updates = [Condition(READY, False, reason, message)]
    if policy is not None:
        updates.append(policy)
    _event(ctx, reason, message, warning=True)
    conditions.write(ctx.patch_status, ctx.status, updates, generation=ctx.generation)


async def run(ctx: Context, reconcile: Callable[[], Awaitable[Outcome]]) -> None:
    """Run one pass; translate its result or failure into status, events and kopf's retry policy.

    In the drift timer nothing is raised: the timer fires again anyway, and raising there would
    only make kopf log a traceback for what the conditions already say.
    """
    delay = SETTINGS.retry_delay
    try:
        outcome = await reconcile()
    except InvalidSpec as exc:
        _fail(ctx, "InvalidSpec", str(exc), policy=Condition(exc.condition_type, False, "InvalidSpec", str(exc)))
        if not ctx.in_timer:
            raise kopf.PermanentError(str(exc)) from exc
        return
    except Refused as exc:
        _refused(ctx, exc)
        if not ctx.in_timer:
            raise kopf.PermanentError(exc.condition.message) from exc
        return
    except Waiting as exc:
        _fail(ctx, exc.reason, exc.message)
        if not ctx.in_timer:
            raise kopf.TemporaryError(exc.message, delay=delay) from exc
        return
    except (InvalidRequest, PreconditionFailed) as exc:
        message = f"the broker refused the change: {exc.reason}"
        _fail(ctx, "BrokerRejected", message, policy=Condition(POLICIES, False, "Rejected", exc.reason))
        if not ctx.in_timer:
            raise kopf.PermanentError(message) from exc
        return
    except AdminError as exc:
        # 5xx, unreachable, or an unexpected 404/409 (raced with someone else): all retryable.
        kind = "BrokerUnavailable" if exc.retryable else "BrokerError"
        message = f"broker admin API: {exc.reason} (HTTP {exc.status or 'no answer'}); retrying"
        _fail(ctx, kind, message)
        if not ctx.in_timer:
            raise kopf.TemporaryError(message, delay=delay) from exc
        return
    succeed(ctx, outcome)


def _refused(ctx: Context, exc: Refused) -> None:
    out = exc.outcome
    updates = [Condition(READY, False, exc.reason, exc.condition.message), exc.condition]
    updates += [c for c in (out.policy, *out.conditions) if c is not None and c.type != exc.condition.type]
    _event(ctx, exc.reason, exc.condition.message, warning=True)
    extra = dict(out.status, brokerName=out.broker_name)
    conditions.write(ctx.patch_status, ctx.status, updates, generation=ctx.generation, **extra)


def succeed(ctx: Context, outcome: Outcome) -> None:
    changed = bool(outcome.changes)
    reason, kept_message = conditions.ready_reason_after(
        ctx.status, changed=changed, created=outcome.created, cause=ctx.cause
    )
    extra = dict(outcome.status)
    extra["brokerName"] = outcome.broker_name
    message = kept_message if kept_message is not None else outcome.message
    if changed:
        what = "; ".join(outcome.changes)
        if reason == "DriftCorrected":
            stamp = conditions.now()
            message = f"drift corrected at {stamp}: {what}"
            extra["driftCorrections"] = int(ctx.status.get("driftCorrections", 0)) + 1
            extra["lastDriftCorrection"] = stamp
            event(ctx.body, "DriftCorrected", message, warning=True)
        else:
            message = f"{outcome.message} ({what})" if outcome.message else what
            event(ctx.body, reason, message)
    updates = [Condition(READY, True, reason, message)]
    if outcome.policy is not None:
        updates.append(outcome.policy)
    updates += outcome.conditions
    conditions.write(ctx.patch_status, ctx.status, updates, generation=ctx.generation, **extra)


async def deleting(body: Mapping[str, Any], what: str, call: Callable[[], Awaitable[None]]) -> None:
    """Run a broker-side deletion; keep the finalizer (TemporaryError) until it has happened.

    Losing the finalizer while the broker is down would leave the broker object behind forever,
    with nothing left in Kubernetes to say so; retrying keeps the resource visible as Terminating.
    """
    try:
        await call()
    except NotFound:
        return  # already gone: nothing left to clean up
    except AdminError as exc:
        if isinstance(exc, Conflict):
            message = f"cannot delete {what} yet: {exc.reason}"
        else:
            message = f"deleting {what} failed, keeping the finalizer and retrying: {exc.reason}"
        event(body, "DeleteRetrying", message, warning=True)
        raise kopf.TemporaryError(message, delay=SETTINGS.retry_delay) from exc


def keep_after_deletion(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("lifecyclePolicy", "CleanUpAfterDeletion") == "KeepAfterDeletion")
