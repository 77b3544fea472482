"""Tenants, namespaces and topics as records in the metadata store (DESIGN.md §5).

``/tenants/{t}`` holds the tenant's admin roles and clusters, ``/namespaces/{t}/{ns}`` the
namespace policies, ``/topics/{t}/{ns}/{name}`` the topic's partition count and topic-level
policies. A partitioned topic is one record; its partitions ``name-partition-i`` exist through
it. Every write is a compare-and-set so that two admin calls racing do not lose an update.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from magnetar.broker.loadbalance.bundle_ranges import BundleRanges, InvalidBundle, equal
from magnetar.broker.policies.model import PolicyError, check_consistent, normalize_all, updated
from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import AlreadyExists, BadVersion, NamespaceNotFound, NotFound, TenantNotFound
from magnetar.protocol.topic_name import TopicName

# Policies whose values must agree with one another (a backlog quota below retention).
CONSISTENT_FIELDS = ("retention_policies", "backlog_quota_map")


def _effective(ns_doc: dict[str, Any], topic_policies: dict[str, Any]) -> dict[str, Any]:
    """The retention and quota a topic runs with: its own over its namespace's, field by field."""
    return {f: topic_policies.get(f) if topic_policies.get(f) is not None else ns_doc.get(f) for f in CONSISTENT_FIELDS}


def _load(raw: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(raw)
    return doc


class Conflict(AlreadyExists):
    """A delete or change refused because something still depends on the target (HTTP 409)."""


class Resources:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # ------------------------------------------------------------------ tenants
    async def list_tenants(self) -> list[str]:
        return await self.store.children(paths.TENANTS)

    async def get_tenant(self, tenant: str) -> dict[str, Any]:
        found = await self.store.get(paths.tenant(tenant))
        if found is None:
            raise TenantNotFound(f"tenant {tenant} does not exist")
        return _load(found.value)

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        doc = {
            "adminRoles": list(info.get("adminRoles") or []),
            "allowedClusters": list(info.get("allowedClusters") or []),
        }
        try:
            await self.store.put(paths.tenant(tenant), json.dumps(doc).encode(), MUST_NOT_EXIST)
        except BadVersion as exc:
            raise AlreadyExists(f"tenant {tenant} already exists") from exc

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        found = await self.store.get(paths.tenant(tenant))
        if found is None:
            raise TenantNotFound(f"tenant {tenant} does not exist")
        doc = {
            "adminRoles": list(info.get("adminRoles") or []),
            "allowedClusters": list(info.get("allowedClusters") or []),
        }
        await self.store.put(paths.tenant(tenant), json.dumps(doc).encode(), found.version)

    async def delete_tenant(self, tenant: str, *, force: bool = False) -> list[str]:
        """Delete a tenant; returns namespaces that must be deleted first when ``force``."""
        await self.get_tenant(tenant)
        namespaces = await self.list_namespaces(tenant)
        if namespaces and not force:
            raise Conflict(f"tenant {tenant} still has namespaces: {', '.join(namespaces)}")
        return namespaces

    async def remove_tenant_record(self, tenant: str) -> None:
        await self.store.delete(paths.tenant(tenant))

    # ------------------------------------------------------------------ namespaces
    async def list_namespaces(self, tenant: str) -> list[str]:
        await self.get_tenant(tenant)
        return [f"{tenant}/{ns}" for ns in await self.store.children(paths.namespaces_of(tenant))]

    async def get_namespace(self, tenant: str, ns: str) -> tuple[dict[str, Any], int]:
        found = await self.store.get(paths.namespace(tenant, ns))
        if found is None:
            raise NamespaceNotFound(f"namespace {tenant}/{ns} does not exist")
        return _load(found.value), found.version

    async def create_namespace(
        self, tenant: str, ns: str, policies: dict[str, Any] | None, default_bundles: int | None = None
    ) -> None:
        """Create a namespace. Its bundle ranges are stored with it, as Pulsar does: the ``bundles``
        of the body, else ``default_bundles`` equal ranges (the broker's
        defaultNumberOfNamespaceBundles), so a later change of that setting, or brokers started
        with different values, never move the topics of an existing namespace between bundles."""
        await self.get_tenant(tenant)
        doc = normalize_all(policies or {})
        if (policies or {}).get("bundles") is not None:  # Pulsar's BundlesData: {numBundles} or {boundaries}
            try:
                doc["bundles"] = BundleRanges.from_json((policies or {})["bundles"]).to_json()
            except InvalidBundle as exc:
                raise PolicyError(str(exc), status=412) from None
        elif default_bundles is not None:
            doc["bundles"] = equal(default_bundles).to_json()
        try:
            await self.store.put(paths.namespace(tenant, ns), json.dumps(doc).encode(), MUST_NOT_EXIST)
        except BadVersion as exc:
            raise AlreadyExists(f"namespace {tenant}/{ns} already exists") from exc

    async def set_namespace_policy(
        self, tenant: str, ns: str, field: str, value: Any, params: Mapping[str, str] | None = None
    ) -> None:
        """Set (or, with None, remove) one namespace policy; ``params`` is the REST query
        (``backlogQuotaType``). Retention and backlog quotas must stay consistent here and on
        every topic of the namespace whose own policies combine with these."""
        doc, version = await self.get_namespace(tenant, ns)
        doc[field] = updated(field, doc.get(field), value, params)
        check_consistent(doc, field, "namespace")
        if field in CONSISTENT_FIELDS:
            for local in await self.namespace_topics(tenant, ns):
                name = TopicName("persistent", tenant, ns, local)
                record = await self.get_topic(name)
                own = (record[0].get("policies") if record else None) or {}
                if any(own.get(f) is not None for f in CONSISTENT_FIELDS):
                    check_consistent(_effective(doc, own), field, f"topic {name}")
        await self.store.put(paths.namespace(tenant, ns), json.dumps(doc).encode(), version)

    async def namespace_topics(self, tenant: str, ns: str) -> list[str]:
        return await self.store.children(paths.topics_of(tenant, ns))

    async def persistent_topics(self, tenant: str, ns: str) -> list[str]:
        """Every persistent topic of a namespace (WIRE.md R20g), full names, sorted.

        A topic exists through its record (created by an admin, or by the broker when a
        producer or consumer auto-created it) or, for data written without a record, through
        its managed ledger. A partitioned topic is listed once by its own name: the managed
        ledgers of its partitions are folded into it."""
        await self.get_namespace(tenant, ns)
        names = set(await self.namespace_topics(tenant, ns))
        partitioned: dict[str, bool] = {}

        async def is_partitioned(local: str) -> bool:
            if local not in partitioned:
                partitioned[local] = (
                    local in names and await self.partitions(TopicName("persistent", tenant, ns, local)) > 0
                )
            return partitioned[local]

        ml_folder = paths.join(paths.MANAGED_LEDGERS.lstrip("/"), tenant, ns, "persistent")
        for local in await self.store.children(ml_folder):
            if local in names:
                continue
            base = TopicName("persistent", tenant, ns, local).partitioned_base
            if base.local_name != local and await is_partitioned(base.local_name):
                continue
            names.add(local)
        return sorted(str(TopicName("persistent", tenant, ns, local)) for local in names)

    async def delete_namespace_record(self, tenant: str, ns: str) -> None:
        await self.store.delete(paths.namespace(tenant, ns))

    # ------------------------------------------------------------------ topics
    def _topic_path(self, topic: TopicName) -> str:
        return paths.topic(topic.tenant, topic.namespace, topic.local_name)

    async def get_topic(self, topic: TopicName) -> tuple[dict[str, Any], int] | None:
        found = await self.store.get(self._topic_path(topic))
        if found is None:
            return None
        return _load(found.value), found.version

    async def partitions(self, topic: TopicName) -> int:
        """The partition count of ``topic``: 0 when it is not partitioned or has no record."""
        record = await self.get_topic(topic)
        return int(record[0].get("partitions", 0)) if record else 0

    async def topic_exists(self, topic: TopicName) -> bool:
        """A topic exists if it has a record, or is a partition of a partitioned topic."""
        if await self.store.exists(self._topic_path(topic)):
            return True
        idx = topic.partition_index
        if idx >= 0:
            return idx < await self.partitions(topic.partitioned_base)
        return False

    async def create_topic(self, topic: TopicName, partitions: int) -> None:
        await self.get_namespace(topic.tenant, topic.namespace)
        if partitions < 0:
            raise PolicyError("partitions must be >= 0")
        doc = {"partitions": partitions, "policies": {}}
        try:
            await self.store.put(self._topic_path(topic), json.dumps(doc).encode(), MUST_NOT_EXIST)
        except BadVersion as exc:
            raise AlreadyExists(f"topic {topic} already exists") from exc

    async def update_partitions(self, topic: TopicName, partitions: int) -> None:
        found = await self.get_topic(topic)
        if found is None or int(found[0].get("partitions", 0)) == 0:
            raise NotFound(f"partitioned topic {topic} does not exist")
        doc, version = found
        current = int(doc.get("partitions", 0))
        if partitions < current:
            raise PolicyError(
                f"the number of partitions can only be increased (from {current} to {partitions} requested)",
                status=412,
            )
        doc["partitions"] = partitions
        await self.store.put(self._topic_path(topic), json.dumps(doc).encode(), version)

    async def set_topic_policy(
        self, topic: TopicName, field: str, value: Any, params: Mapping[str, str] | None = None
    ) -> None:
        """Set (or remove) one topic-level policy; retention and backlog quotas are checked as
        they take effect: the topic's own over its namespace's."""
        found = await self.get_topic(topic)
        if found is None:
            raise NotFound(f"topic {topic} does not exist")
        doc, version = found
        policies = dict(doc.get("policies") or {})
        policies[field] = updated(field, policies.get(field), value, params)
        check_consistent(policies, field, "topic")
        if field in CONSISTENT_FIELDS:
            ns_doc, _ = await self.get_namespace(topic.tenant, topic.namespace)
            check_consistent(_effective(ns_doc, policies), field, "topic")
        doc["policies"] = policies
        await self.store.put(self._topic_path(topic), json.dumps(doc).encode(), version)

    async def delete_topic_record(self, topic: TopicName) -> None:
        try:
            await self.store.delete(self._topic_path(topic))
        except NotFound:
            pass


async def ensure_default_namespace(res: Resources, cluster: str, bundles: int | None = None) -> None:
    """Create tenant ``public`` and namespace ``public/default`` if missing, as Pulsar's
    standalone and cluster initialisation do; racing brokers are fine (create-only writes)."""
    try:
        await res.create_tenant("public", {"adminRoles": [], "allowedClusters": [cluster]})
    except AlreadyExists:
        pass
    try:
        await res.create_namespace("public", "default", None, bundles)
    except AlreadyExists:
        pass
