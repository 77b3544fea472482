"""Bookie scale-down: drain the highest ordinal, then shrink the StatefulSet by one, then forget it.

A bookie is removed only after every ledger fragment it holds has been re-replicated elsewhere
(the broker's ``POST /admin/v2/bookies/{id}/decommission``, DESIGN.md section 6). Each reconcile
waits a bounded time for the drain; if it is not done the ensemble reports ``Decommissioning``
and the handler is retried, while the bookies' replication workers go on copying. Once drained,
the StatefulSet loses that one pod, its volume claim is deleted (Kubernetes keeps the volume
until the pod is gone), and when the bookie process has stopped its identity cookie is removed so
that a later scale-up can start a new bookie of the same name on a fresh disk.

The calls go through the operator's one admin client (admin.py); its exception classes become
the drain's three outcomes here, so the handler only ever sees a DrainResult.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .admin import AdminClient, AdminError, BrokerUnavailable, NotFound, PreconditionFailed, TimedOut
from .bookies import BOOKIE_PORT

#: How long one reconcile waits for a drain before it reports progress and retries.
DRAIN_STEP_SECONDS = 5.0


def bookie_id(name: str, namespace: str, ordinal: int) -> str:
    """The id a bookie pod registers under: its advertised address (the headless Service DNS name)."""
    return f"{name}-{ordinal}.{name}.{namespace}.svc:{BOOKIE_PORT}"


@dataclass(frozen=True)
class DrainResult:
    done: bool
    impossible: bool
    message: str


async def drain(admin: AdminClient, bid: str, *, step: float = DRAIN_STEP_SECONDS) -> DrainResult:
    """Ask the broker to drain `bid`, waiting at most `step` seconds; never raises AdminError."""
    try:
        report = await admin.decommission_bookie(bid, wait=step)
    except PreconditionFailed as exc:
        return DrainResult(False, True, f"bookie {bid} cannot be drained: {exc.reason}")
    except TimedOut as exc:
        return DrainResult(False, False, f"draining bookie {bid}: {exc.reason}")
    except BrokerUnavailable as exc:
        return DrainResult(False, False, exc.reason)
    except AdminError as exc:
        return DrainResult(False, False, f"draining bookie {bid} failed (HTTP {exc.status}): {exc.reason}")
    return DrainResult(True, False, f"bookie {bid} drained: {json.dumps(report.to_json())}")


async def forget(admin: AdminClient, bid: str) -> bool:
    """Remove a stopped bookie's identity; False while it is still running (try again later)."""
    try:
        await admin.forget_bookie(bid)
    except NotFound:
        return True
    except AdminError:
        return False
    return True
