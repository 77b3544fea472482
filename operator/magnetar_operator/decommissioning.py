"""Bookie scale-down: drain the highest ordinal, then shrink the StatefulSet by one, then forget it.

A bookie is removed only after every ledger fragment it holds has been re-replicated elsewhere
(the broker's ``POST /admin/v2/bookies/{id}/decommission``, DESIGN.md section 6). Each reconcile
waits a bounded time for the drain; if it is not done the ensemble reports ``Decommissioning``
and the handler is retried, while the bookies' replication workers go on copying. Once drained,
the StatefulSet loses that one pod, its volume claim is deleted (Kubernetes keeps the volume
until the pod is gone), and when the bookie process has stopped its identity cookie is removed so
that a later scale-up can start a new bookie of the same name on a fresh disk.

The admin calls are plain blocking HTTP: these handlers run in kopf's thread pool.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

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


def _call(admin_url: str, method: str, path: str, timeout: float) -> tuple[int, str]:
    req = urllib.request.Request(admin_url.rstrip("/") + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        try:
            body = str(json.loads(body).get("reason", body))
        except (ValueError, AttributeError):
            pass
        return exc.code, body


def drain(admin_url: str, bid: str, *, step: float = DRAIN_STEP_SECONDS) -> DrainResult:
    path = f"/admin/v2/bookies/{urllib.parse.quote(bid, safe='')}/decommission?timeout={step}"
    try:
        status, body = _call(admin_url, "POST", path, timeout=step + 30)
    except (urllib.error.URLError, OSError) as exc:
        return DrainResult(False, False, f"broker admin API unreachable: {exc}")
    if status == 200:
        return DrainResult(True, False, f"bookie {bid} drained: {body}")
    if status == 412:
        return DrainResult(False, True, f"bookie {bid} cannot be drained: {body}")
    if status == 504:
        return DrainResult(False, False, f"draining bookie {bid}: {body}")
    return DrainResult(False, False, f"draining bookie {bid} failed (HTTP {status}): {body}")


def forget(admin_url: str, bid: str) -> bool:
    """Remove a stopped bookie's identity; False while it is still running (try again later)."""
    try:
        status, _ = _call(admin_url, "DELETE", f"/admin/v2/bookies/{urllib.parse.quote(bid, safe='')}", timeout=30)
    except (urllib.error.URLError, OSError):
        return False
    return status in (204, 404)
