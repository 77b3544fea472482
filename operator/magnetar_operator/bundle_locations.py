"""Where bundles live, for the Namespace status (``bundles``) and the Tenant status
(``bundlesPerBroker``).

Why in the status: the load manager moves bundles on its own (shedding, splits, a broker joining or
draining), and "which broker serves this namespace now" is the first question after a move. The
answer is read over the brokers' admin API with Pulsar's paths: the namespace's boundaries
(``GET namespaces/{t}/{ns}/bundles``) and, for each live broker, what it owns
(``GET brokers/{cluster}/{broker}/ownedNamespaces``). A bundle that no broker owns (nothing has
been looked up in it since it was unloaded or split) is listed without a broker.

Cost: one sweep asks every live broker once, and serves every Namespace and Tenant reconciled
within ``SWEEP_SECONDS``; a resync of N namespaces over B brokers makes about B + 2N calls, not
N x B. Brokers that do not answer these paths leave the status without bundles rather than
failing the reconciliation: where bundles live is information, not the resource's health.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from .admin import AdminClient, AdminError

#: How long one sweep of the brokers' ownership serves further Namespaces and Tenants.
SWEEP_SECONDS = 5.0

_lock = asyncio.Lock()
_sweep: tuple[float, dict[str, str]] | None = None


def ranges(boundaries: list[str]) -> list[str]:
    """Bundle names from boundaries: ``[a, b, c]`` -> ``["a_b", "b_c"]`` (Pulsar's names)."""
    return [f"{lo}_{hi}" for lo, hi in itertools.pairwise(boundaries)]


async def owners(admin: AdminClient) -> dict[str, str]:
    """``tenant/namespace/range`` -> the id of the live broker owning it, from a recent sweep.

    A bundle caught by two brokers in the middle of a move goes to the lowest id; the next sweep
    sees where it settled."""
    global _sweep
    async with _lock:
        if _sweep is not None and time.monotonic() - _sweep[0] < SWEEP_SECONDS:
            return _sweep[1]
        cluster = await admin.cluster_name()
        found: dict[str, str] = {}
        for broker in sorted(await admin.list_brokers()):
            for bundle in await admin.owned_namespaces(cluster, broker):
                found.setdefault(bundle, broker)
        _sweep = (time.monotonic(), found)
        return found


def forget() -> None:
    """Drop the last sweep (tests, and a caller that has just moved a bundle itself)."""
    global _sweep
    _sweep = None


async def namespace_bundles(admin: AdminClient, tenant: str, namespace: str) -> list[dict[str, str]] | None:
    """The namespace's bundles, lowest range first, each ``{"range", "broker"}`` (no ``broker``
    while unowned); None when the brokers do not say."""
    try:
        names = ranges(await admin.namespace_bundles(tenant, namespace))
        owned = await owners(admin)
    except AdminError:
        return None
    prefix = f"{tenant}/{namespace}/"
    out: list[dict[str, str]] = []
    for name in names:
        entry = {"range": name}
        broker = owned.get(prefix + name)
        if broker is not None:
            entry["broker"] = broker
        out.append(entry)
    return out


async def tenant_bundle_counts(admin: AdminClient, tenant: str) -> list[dict[str, Any]] | None:
    """How many of the tenant's bundles each broker owns, ``[{"broker", "bundles"}]`` by broker id
    (a list, so that a broker that owns none any more drops out of a merge-patched status); None
    when the brokers do not say."""
    try:
        owned = await owners(admin)
    except AdminError:
        return None
    counts: dict[str, int] = {}
    for bundle, broker in owned.items():
        if bundle.startswith(f"{tenant}/"):
            counts[broker] = counts.get(broker, 0) + 1
    return [{"broker": b, "bundles": n} for b, n in sorted(counts.items())]
