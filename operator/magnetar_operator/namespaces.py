"""Namespace handlers: a Magnetar namespace "tenant/name" and its policies.

A Namespace whose Tenant does not exist on the brokers waits (kopf.TemporaryError, reason
WaitingForTenant) rather than failing: resources are usually applied together, in any order, and
the namespace must appear as soon as its tenant does. Impossible policies (E >= Qw >= Qa broken,
retention below the backlog quota) are refused before any broker call (kopf.PermanentError,
reason InvalidSpec) and recover on the next spec change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from . import bundle_locations, policies, policy_sync, reconciling, runtime
from .admin import Conflict, NotFound
from .config import GROUP, SETTINGS, VERSION
from .policies import Policy
from .reconciling import Outcome, Waiting

RESOURCE = (GROUP, VERSION, "namespaces")


def broker_name(spec: Mapping[str, Any]) -> str:
    return f"{spec['tenant']}/{spec['name']}"


async def _ensure_namespace(tenant: str, namespace: str, out: Outcome) -> dict[str, Any]:
    """The namespace's policies document, creating the namespace first when it is missing."""
    admin = runtime.admin()
    try:
        return await admin.get_namespace_policies(tenant, namespace)
    except NotFound:
        pass
    waiting = Waiting(
        "WaitingForTenant",
        f"tenant {tenant} does not exist on the brokers; namespace {tenant}/{namespace} will be "
        "created as soon as it does",
    )
    if tenant not in await admin.list_tenants():
        raise waiting
    try:
        await admin.create_namespace(tenant, namespace)
        out.created = True
        out.changes.append(f"created namespace {tenant}/{namespace}")
    except NotFound as exc:  # the tenant went away in between
        raise waiting from exc
    except Conflict:
        pass
    return await admin.get_namespace_policies(tenant, namespace)


async def reconcile_namespace(body: Mapping[str, Any], spec: Mapping[str, Any]) -> Outcome:
    policies.validate(spec)
    tenant, namespace = spec["tenant"], spec["name"]
    out = Outcome(broker_name=broker_name(spec), message=f"namespace {tenant}/{namespace} exists on the brokers")
    document = await _ensure_namespace(tenant, namespace, out)
    admin = runtime.admin()
    quota_type = policies.backlog_type(spec)
    status = body.get("status") or {}

    fresh = True  # the first read reuses the document fetched above; later ones read back

    async def read(fields: list[str]) -> dict[str, Any]:
        nonlocal document, fresh
        if not fresh:
            document = await admin.get_namespace_policies(tenant, namespace)
        fresh = False
        return {f: policies.from_namespace_document(f, document, quota_type=quota_type) for f in fields}

    async def set_policy(policy: Policy) -> None:
        params = dict(policy.params) if policy.params else None
        await admin.set_namespace_policy(
            tenant, namespace, policy.endpoint, policy.body, params=params, method=policy.method
        )

    async def remove(field: str) -> None:
        if field in policies.SCHEMA_POLICY_UNSET:
            # Pulsar has no DELETE for the two schema flags: "unset" is setting the default back.
            unset = policies.desired({field: policies.SCHEMA_POLICY_UNSET[field]}, level="namespace")[field]
            await set_policy(unset)
            return
        await admin.remove_namespace_policy(tenant, namespace, policies.endpoint_of(field, level="namespace"))

    result = await policy_sync.sync(
        policies.desired(spec, level="namespace"),
        status.get("appliedPolicies") or [],
        read=read,
        set_policy=set_policy,
        remove=remove,
        unenforced=lambda: document.get("unenforced"),
        previously_not_stored=status.get("notApplied") or [],
    )
    out.changes += result.changes
    out.policy = result.condition()
    out.status.update(result.status())
    placed = await bundle_locations.namespace_bundles(admin, tenant, namespace)
    if placed is not None:
        out.status["bundles"] = placed
    return out


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def apply_namespace(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, reason: Any, **_: Any) -> None:
    ctx = reconciling.context(body, patch, reason)
    await reconciling.run(ctx, lambda: reconcile_namespace(body, spec))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
async def correct_namespace_drift(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    ctx = reconciling.context(body, patch, "timer")
    await reconciling.run(ctx, lambda: reconcile_namespace(body, spec))


@kopf.on.delete(*RESOURCE)
async def delete_namespace(body: kopf.Body, spec: kopf.Spec, **_: Any) -> None:
    name = broker_name(spec)
    if reconciling.keep_after_deletion(spec):
        reconciling.event(body, "Kept", f"namespace {name} kept on the brokers (KeepAfterDeletion)")
        return
    tenant, namespace = spec["tenant"], spec["name"]
    await reconciling.deleting(
        body, f"namespace {name}", lambda: runtime.admin().delete_namespace(tenant, namespace, force=True)
    )
    reconciling.event(body, "Deleted", f"namespace {name} and its topics deleted from the brokers")
