"""Topic handlers: a persistent topic, partitioned (partitions >= 1) or not (0), and its
topic-level policy overrides.

The broker's partition count is the truth the spec is compared with: more partitions in the spec
are added (POST), fewer are refused (partitions can only grow, as in Pulsar), and a topic that has
vanished from the broker is re-created by the drift timer. Turning a partitioned topic into a
non-partitioned one, or back, is refused too: it would mean deleting its data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from . import policies, policy_sync, reconciling, runtime, topic_schema
from .admin import Conflict, NotFound
from .config import GROUP, SETTINGS, VERSION
from .policies import InvalidSpec, Policy
from .reconciling import Outcome, Waiting

RESOURCE = (GROUP, VERSION, "topics")


def topic_parts(spec: Mapping[str, Any]) -> tuple[str, str, str]:
    tenant, namespace = str(spec["namespace"]).split("/", 1)
    return tenant, namespace, str(spec["name"])


def full_name(spec: Mapping[str, Any]) -> str:
    tenant, namespace, topic = topic_parts(spec)
    return f"persistent://{tenant}/{namespace}/{topic}"


def check_partitions(want: int, have: int, exists_unpartitioned: bool) -> None:
    """Refuse the partition changes no broker can make without losing data."""
    if want > 0 and 0 < want < have:
        raise InvalidSpec(
            f"spec.partitions ({want}) is smaller than the topic's current {have} partitions: "
            "partitions can only be increased"
        )
    if want > 0 and exists_unpartitioned:
        raise InvalidSpec(
            f"the topic exists as a non-partitioned topic; spec.partitions {want} would need "
            "deleting it (set partitions: 0, or delete and re-create the topic)"
        )
    if want == 0 and have > 0:
        raise InvalidSpec(
            f"the topic is partitioned ({have} partitions); spec.partitions 0 (non-partitioned) would need deleting it"
        )


async def _ensure_topic(spec: Mapping[str, Any], out: Outcome) -> int:
    """Create or grow the topic; return its partition count (0: non-partitioned)."""
    admin = runtime.admin()
    tenant, namespace, topic = topic_parts(spec)
    want = int(spec.get("partitions", 0))
    waiting = Waiting(
        "WaitingForNamespace",
        f"namespace {tenant}/{namespace} does not exist on the brokers; the topic will be created as soon as it does",
    )
    try:
        have = await admin.get_partitions(tenant, namespace, topic)
        unpartitioned = have == 0 and full_name(spec) in await admin.list_topics(tenant, namespace)
    except NotFound as exc:
        raise waiting from exc
    check_partitions(want, have, unpartitioned)
    try:
        if want > 0 and have == 0:
            await admin.create_partitioned_topic(tenant, namespace, topic, want)
            out.created = True
            out.changes.append(f"created {full_name(spec)} with {want} partitions")
        elif want > have:
            await admin.update_partitions(tenant, namespace, topic, want)
            out.changes.append(f"partitions increased from {have} to {want}")
        elif want == 0 and not unpartitioned:
            await admin.create_topic(tenant, namespace, topic)
            out.created = True
            out.changes.append(f"created non-partitioned {full_name(spec)}")
    except NotFound as exc:
        raise waiting from exc
    except Conflict:
        pass  # created concurrently by the drift timer or by someone else: compare again next pass
    return max(want, have)


async def reconcile_topic(body: Mapping[str, Any], spec: Mapping[str, Any]) -> Outcome:
    policies.validate(spec)
    topic_schema.validate(spec)
    out = Outcome(broker_name=full_name(spec))
    partitions = await _ensure_topic(spec, out)
    out.status["partitions"] = partitions
    kind = f"{partitions} partitions" if partitions else "non-partitioned"
    out.message = f"topic {full_name(spec)} exists on the brokers ({kind})"

    admin = runtime.admin()
    tenant, namespace, topic = topic_parts(spec)
    quota_type = policies.backlog_type(spec)
    status = body.get("status") or {}
    wanted = policies.desired(spec, level="topic")
    previously = status.get("appliedPolicies") or []
    if not wanted and not previously:
        result = policy_sync.PolicyResult()
    else:

        async def read(fields: list[str]) -> dict[str, Any]:
            values = {}
            for field in fields:
                endpoint = policies.endpoint_of(field, level="topic")
                try:
                    answer = await admin.get_topic_policy(tenant, namespace, topic, endpoint)
                except NotFound:
                    answer = None
                values[field] = policies.from_topic_answer(field, answer, quota_type=quota_type)
            return values

        async def set_policy(policy: Policy) -> None:
            params = dict(policy.params) if policy.params else None
            await admin.set_topic_policy(tenant, namespace, topic, policy.endpoint, policy.body, params=params)

        async def remove(field: str) -> None:
            await admin.remove_topic_policy(tenant, namespace, topic, policies.endpoint_of(field, level="topic"))

        document = await admin.get_namespace_policies(tenant, namespace)
        result = await policy_sync.sync(
            wanted,
            previously,
            read=read,
            set_policy=set_policy,
            remove=remove,
            unenforced=lambda: document.get("unenforced"),
            previously_not_stored=status.get("notApplied") or [],
        )
    out.changes += result.changes
    out.policy = result.condition()
    out.status.update(result.status())
    await topic_schema.apply(admin, tenant, namespace, topic, spec, status, out)
    return out


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def apply_topic(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, reason: Any, **_: Any) -> None:
    ctx = reconciling.context(body, patch, reason)
    await reconciling.run(ctx, lambda: reconcile_topic(body, spec))


@kopf.timer(*RESOURCE, interval=SETTINGS.reconcile_interval, initial_delay=SETTINGS.reconcile_interval)
async def correct_topic_drift(body: kopf.Body, spec: kopf.Spec, patch: kopf.Patch, **_: Any) -> None:
    ctx = reconciling.context(body, patch, "timer")
    await reconciling.run(ctx, lambda: reconcile_topic(body, spec))


async def _delete_from_broker(spec: Mapping[str, Any]) -> None:
    admin = runtime.admin()
    tenant, namespace, topic = topic_parts(spec)
    if await admin.get_partitions(tenant, namespace, topic) > 0:
        await admin.delete_partitioned_topic(tenant, namespace, topic, force=True)
    else:
        await admin.delete_topic(tenant, namespace, topic, force=True)


@kopf.on.delete(*RESOURCE)
async def delete_topic(body: kopf.Body, spec: kopf.Spec, **_: Any) -> None:
    name = full_name(spec)
    if reconciling.keep_after_deletion(spec):
        reconciling.event(body, "Kept", f"topic {name} kept on the brokers (KeepAfterDeletion)")
        return
    await reconciling.deleting(body, f"topic {name}", lambda: _delete_from_broker(spec))
    reconciling.event(body, "Deleted", f"topic {name} deleted from the brokers")
