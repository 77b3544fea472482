"""Tenant handlers: the tenant on the brokers, and its isolated broker set when asked for.

The broker-side name is spec.name, defaulting to metadata.name. Admin roles and allowed clusters
are compared as sets, so reordering them in the spec causes no write. Isolation creates a broker
StatefulSet owned by the Tenant (so it goes when the Tenant goes) and binds the tenant to it with a
namespace isolation policy (``isolation_policy.py``), which the brokers enforce; PoliciesApplied
names the policy. Turning isolation off, or deleting the Tenant, removes both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kopf

from . import bundle_locations, reconciling, runtime
from .admin import Conflict, NotFound
from .brokers import BrokerSet, build_broker_children, isolated_set_name
from .conditions import POLICIES, Condition
from .config import GROUP, SETTINGS, VERSION
from .isolation_policy import apply_policy, policy_name, remove_policy
from .reconciling import Outcome

RESOURCE = (GROUP, VERSION, "tenants")


def tenant_name(spec: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    return str(spec.get("name") or meta["name"])


def tenant_info(spec: Mapping[str, Any]) -> dict[str, list[str]]:
    return {
        "adminRoles": list(spec.get("adminRoles") or []),
        "allowedClusters": list(spec.get("allowedClusters") or []),
    }


def same_info(want: Mapping[str, list[str]], have: Mapping[str, Any]) -> bool:
    return all(set(want[k]) == set(have.get(k) or []) for k in want)


def isolated_set(spec: Mapping[str, Any], meta: Mapping[str, Any]) -> BrokerSet | None:
    isolation = spec.get("isolation") or {}
    if not isolation.get("enabled"):
        return None
    brokers = isolation.get("brokers") or {}
    return BrokerSet(
        name=isolated_set_name(meta["name"]),
        namespace=meta["namespace"],
        replicas=int(brokers.get("replicas", 1)),
        image=brokers.get("image") or SETTINGS.broker_image,
        config=SETTINGS.broker_config,
        resources=brokers.get("resources") or {},
        image_pull_policy=SETTINGS.image_pull_policy,
        isolated_tenant=tenant_name(spec, meta),
        pod_security_context=SETTINGS.pod_security_context,
    )


def _apply_set(body: Mapping[str, Any], bs: BrokerSet) -> list[str]:
    kube = runtime.kube()
    changes = []
    for child in build_broker_children(bs, pdb_api_version=kube.pdb_api_version(), owner=body):
        outcome = kube.apply(child)
        if outcome != "unchanged":
            changes.append(f"{child['kind']} {child['metadata']['name']} {outcome}")
    return changes


def _remove_set(namespace: str, name: str) -> list[str]:
    kube = runtime.kube()
    gone = kube.delete("apps/v1", "StatefulSet", name, namespace)
    for svc in (name, f"{name}-headless"):
        kube.delete("v1", "Service", svc, namespace)
    kube.delete("v1", "ConfigMap", f"{name}-config", namespace)
    kube.delete(kube.pdb_api_version(), "PodDisruptionBudget", name, namespace)
    return [f"isolated broker set {name} removed"] if gone else []


async def reconcile_tenant(body: Mapping[str, Any], spec: Mapping[str, Any]) -> Outcome:
    meta = body["metadata"]
    name, want = tenant_name(spec, meta), tenant_info(spec)
    admin = runtime.admin()
    out = Outcome(broker_name=name, message=f"tenant {name} exists on the brokers")
    try:
        have: dict[str, Any] | None = await admin.get_tenant(name)
    except NotFound:
        have = None
    if have is None:
        try:
            await admin.create_tenant(name, want)
            out.created = True
            out.changes.append(f"created tenant {name}")
        except Conflict:
            have = await admin.get_tenant(name)
    if have is not None and not same_info(want, have):
        await admin.update_tenant(name, want)
        out.changes.append(f"updated roles/clusters of tenant {name}")

    bs = isolated_set(spec, meta)
    previous = (body.get("status") or {}).get("brokerSet")
    if bs is not None:
        out.changes += await asyncio.to_thread(_apply_set, body, bs)
        out.status["brokerSet"] = bs.name
        out.changes += await apply_policy(admin, name, bs)
        out.policy = Condition(
            POLICIES,
            True,
            "Applied",
            f"admin roles and allowed clusters applied; isolation: namespace isolation policy "
            f"{policy_name(name)} binds tenant {name}'s namespaces to broker set {bs.name} ({bs.replicas} brokers)",
        )
    else:
        out.changes += await remove_policy(admin, name)
        if previous:
            out.changes += await asyncio.to_thread(_remove_set, meta["namespace"], previous)
            out.status["brokerSet"] = None
        out.policy = Condition(POLICIES, True, "Applied", "admin roles and allowed clusters applied")
    counts = await bundle_locations.tenant_bundle_counts(admin, name)
    if counts is not None:
        out.status["bundlesPerBroker"] = counts
    return out


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def apply_tenant(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, reason: Any, **_: Any) -> None:
    ctx = reconciling.context(body, patch, reason)
    await reconciling.run(ctx, lambda: reconcile_tenant(body, spec))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
async def correct_tenant_drift(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    ctx = reconciling.context(body, patch, "timer")
    await reconciling.run(ctx, lambda: reconcile_tenant(body, spec))


async def _drop_policy(name: str) -> None:
    await remove_policy(runtime.admin(), name)


@kopf.on.delete(*RESOURCE)
async def delete_tenant(body: kopf.Body, spec: kopf.Spec, meta: kopf.Meta, **_: Any) -> None:
    name = tenant_name(spec, meta)
    if isolated_set(spec, meta) is not None:  # even when kept: the isolated set goes with the Tenant
        await reconciling.deleting(body, f"isolation policy of tenant {name}", lambda: _drop_policy(name))
    if reconciling.keep_after_deletion(spec):
        reconciling.event(body, "Kept", f"tenant {name} kept on the brokers (KeepAfterDeletion)")
        return
    await reconciling.deleting(body, f"tenant {name}", lambda: runtime.admin().delete_tenant(name, force=True))
    reconciling.event(body, "Deleted", f"tenant {name} deleted from the brokers")
