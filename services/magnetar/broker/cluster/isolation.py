"""Namespace isolation policies (Pulsar's ``namespaceIsolationPolicies``): which brokers may own a bundle.

A policy binds namespaces to a broker group, so that one tenant's traffic never lands on another
tenant's brokers. Its fields are Pulsar's ``NamespaceIsolationData``:

- ``namespaces``: regexes over ``tenant/namespace``;
- ``primary``: regexes over broker names: the brokers that serve those namespaces;
- ``secondary``: regexes over broker names: used only while fewer than ``min_limit`` primaries
  are alive;
- ``auto_failover_policy``: ``{"policy_type": "min_available", "parameters": {"min_limit": "1",
  "usage_threshold": "100"}}``.

Placement follows ``LoadManagerShared.applyNamespacePolicies``:

- a namespace matched by a policy goes to that policy's live primaries; when fewer than
  ``min_limit`` of them are alive, its live secondaries join them; **never** to any other broker.
  With no candidate the lookup fails with ``ServiceNotReady`` naming the policy (retryable: the
  client keeps trying until a group broker is back), and the topics stay unowned.
- a namespace matched by no policy goes only to *shared* brokers: brokers that are no policy's
  primary (a policy's secondaries are still shared, as in Pulsar). With no shared broker alive the
  lookup fails the same way, as Pulsar's "no broker available" does.

When several policies match a namespace, the first by policy name wins (Pulsar iterates its map;
sorting makes every broker pick the same one).

Broker names: a regex must match a broker's whole name (``re.fullmatch``, as Java's
``Pattern.matches``). A broker's name is its id as registered under ``/brokers/available`` and
returned by lookups, ``host:port`` of its advertised address (``10.0.0.7:6650``,
``magnetar-broker-0.magnetar-broker-headless.ns.svc:6650``). Pulsar matches the host alone, so a
regex matches a broker when it matches either the whole ``host:port`` or the host: policies written
for Pulsar keep working, and brokers sharing one host (tests, ``local-cluster``) can still be told
apart by port.

The policies of a cluster are one JSON document at ``/clusters/{cluster}/namespaceIsolationPolicies``
(policy name -> data), updated by compare-and-set, so two admins writing different policies at once
both land. ``usage_threshold`` is kept and shown but not used: Magnetar brokers publish no load
reports to compare it with.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import BadVersion, ServiceNotReady
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

POLICY_TYPE = "min_available"


class InvalidIsolationPolicy(ValueError):
    """A policy that cannot be stored: the reason is the message (the admin API answers 400)."""


class NoBrokerAvailable(ServiceNotReady):
    """No live broker may own the namespace: retryable, the topics wait for their group."""


def policies_path(cluster: str) -> str:
    return paths.join("clusters", cluster, "namespaceIsolationPolicies")


def _compile(kind: str, patterns: Any, *, required: bool) -> tuple[re.Pattern[str], ...]:
    if patterns is None:
        patterns = []
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise InvalidIsolationPolicy(f"{kind} must be a list of regular expressions")
    patterns = [p for p in patterns if p.strip()]
    if required and not patterns:
        raise InvalidIsolationPolicy(f"{kind} must name at least one regular expression")
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise InvalidIsolationPolicy(f"{kind} regex {p!r} is invalid: {exc}") from None
    return tuple(out)


def _int_param(params: Mapping[str, Any], key: str, default: int | None) -> int:
    raw = params.get(key, default)
    if raw is None:
        raise InvalidIsolationPolicy(f"auto_failover_policy parameter {key} is required")
    try:
        value = int(str(raw))
    except ValueError:
        raise InvalidIsolationPolicy(f"auto_failover_policy parameter {key} must be an integer, got {raw!r}") from None
    if value < 0:
        raise InvalidIsolationPolicy(f"auto_failover_policy parameter {key} must not be negative, got {value}")
    return value


def broker_names(broker_id: str) -> tuple[str, str]:
    """The names a regex may match: the whole ``host:port`` id and its host (Pulsar's name)."""
    host = broker_id.rsplit(":", 1)[0] if ":" in broker_id else broker_id
    return broker_id, host.strip("[]")


def _any_match(patterns: Iterable[re.Pattern[str]], broker_id: str) -> bool:
    names = broker_names(broker_id)
    return any(p.fullmatch(n) for p in patterns for n in names)


@dataclass(frozen=True)
class IsolationPolicy:
    namespaces: tuple[re.Pattern[str], ...]
    primary: tuple[re.Pattern[str], ...]
    secondary: tuple[re.Pattern[str], ...] = ()
    min_limit: int = 1
    usage_threshold: int = 100

    @classmethod
    def from_json(cls, doc: Any) -> IsolationPolicy:
        """Parse and validate Pulsar's ``NamespaceIsolationData`` JSON; InvalidIsolationPolicy says why."""
        if not isinstance(doc, dict):
            raise InvalidIsolationPolicy("the policy must be a JSON object")
        failover = doc.get("auto_failover_policy")
        if not isinstance(failover, dict):
            raise InvalidIsolationPolicy("auto_failover_policy is required (policy_type min_available)")
        if str(failover.get("policy_type", "")).lower() != POLICY_TYPE:
            raise InvalidIsolationPolicy(
                f"auto_failover_policy.policy_type must be {POLICY_TYPE}, got {failover.get('policy_type')!r}"
            )
        params = failover.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidIsolationPolicy("auto_failover_policy.parameters must be an object")
        return cls(
            namespaces=_compile("namespaces", doc.get("namespaces"), required=True),
            primary=_compile("primary", doc.get("primary"), required=True),
            secondary=_compile("secondary", doc.get("secondary"), required=False),
            min_limit=_int_param(params, "min_limit", None),
            usage_threshold=_int_param(params, "usage_threshold", 100),
        )

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON shape (its parameters are strings)."""
        return {
            "namespaces": [p.pattern for p in self.namespaces],
            "primary": [p.pattern for p in self.primary],
            "secondary": [p.pattern for p in self.secondary],
            "auto_failover_policy": {
                "policy_type": POLICY_TYPE,
                "parameters": {"min_limit": str(self.min_limit), "usage_threshold": str(self.usage_threshold)},
            },
        }

    def matches_namespace(self, namespace: str) -> bool:
        return any(p.fullmatch(namespace) for p in self.namespaces)

    def is_primary(self, broker_id: str) -> bool:
        return _any_match(self.primary, broker_id)

    def is_secondary(self, broker_id: str) -> bool:
        return _any_match(self.secondary, broker_id)


@dataclass(frozen=True)
class Candidates:
    """The brokers that may own a namespace's bundles, and the policy that decided (None: shared)."""

    brokers: list[str]
    policy: str | None
    why_empty: str = ""


@dataclass(frozen=True)
class IsolationPolicies:
    """Every policy of one cluster, by name."""

    policies: Mapping[str, IsolationPolicy] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: bytes | None) -> IsolationPolicies:
        if not raw:
            return cls()
        doc = json.loads(raw)
        return cls({name: IsolationPolicy.from_json(data) for name, data in doc.items()})

    def to_json(self) -> bytes:
        return json.dumps({name: p.to_json() for name, p in sorted(self.policies.items())}).encode()

    def policy_for(self, namespace: str) -> tuple[str, IsolationPolicy] | None:
        for name in sorted(self.policies):
            if self.policies[name].matches_namespace(namespace):
                return name, self.policies[name]
        return None

    def is_shared(self, broker_id: str) -> bool:
        return not any(p.is_primary(broker_id) for p in self.policies.values())

    def candidates(self, namespace: str, broker_ids: Iterable[str]) -> Candidates:
        """``applyNamespacePolicies``: the live brokers (``broker_ids``) that may own ``namespace``."""
        live = sorted(set(broker_ids))
        found = self.policy_for(namespace)
        if found is None:
            shared = [b for b in live if self.is_shared(b)]
            why = (
                f"no broker is available for namespace {namespace}: it matches no namespace isolation "
                f"policy, and every live broker is the primary of one (no shared broker)"
            )
            return Candidates(shared, None, "" if shared else why)
        name, policy = found
        chosen = [b for b in live if policy.is_primary(b)]
        if len(chosen) < policy.min_limit:
            chosen += [b for b in live if not policy.is_primary(b) and policy.is_secondary(b)]
        why = (
            f"no broker of namespace isolation policy {name} is available for namespace {namespace} "
            f"(primary {[p.pattern for p in policy.primary]}, secondary {[p.pattern for p in policy.secondary]}); "
            f"its topics are not moved to other brokers"
        )
        return Candidates(chosen, name, "" if chosen else why)

    def broker_roles(self, broker_id: str) -> list[dict[str, Any]]:
        """Pulsar's ``BrokerNamespaceIsolationData`` of one broker: the policies naming it."""
        out = []
        for name in sorted(self.policies):
            p = self.policies[name]
            if p.is_primary(broker_id) or p.is_secondary(broker_id):
                out.append(
                    {
                        "brokerName": broker_id,
                        "policyName": name,
                        "isPrimary": p.is_primary(broker_id),
                        "namespaceRegex": [n.pattern for n in p.namespaces],
                    }
                )
        return out


async def load(store: MetadataStore, cluster: str) -> IsolationPolicies:
    found = await store.get(policies_path(cluster))
    return IsolationPolicies.from_json(found.value if found is not None else None)


async def update(
    store: MetadataStore, cluster: str, change: Callable[[dict[str, IsolationPolicy]], None]
) -> IsolationPolicies:
    """Read, change and write back the cluster's policies by compare-and-set, retrying on a race."""
    path = policies_path(cluster)
    while True:
        found = await store.get(path)
        current = IsolationPolicies.from_json(found.value if found is not None else None)
        policies = dict(current.policies)
        change(policies)
        after = IsolationPolicies(policies)
        try:
            await store.put(path, after.to_json(), found.version if found is not None else MUST_NOT_EXIST)
        except BadVersion:
            continue
        return after


class NamespaceIsolation:
    """The placement hook of ``Ownership``: the cluster's policies read fresh from the store, so a
    change made through any broker holds at the next placement on every broker."""

    def __init__(self, store: MetadataStore, cluster: str) -> None:
        self.store = store
        self.cluster = cluster

    async def candidates(self, namespace: str, broker_ids: Iterable[str]) -> Candidates:
        return (await load(self.store, self.cluster)).candidates(namespace, broker_ids)

    async def allowed(self, namespace: str, broker_ids: Iterable[str]) -> list[str]:
        """The brokers that may own ``namespace``; NoBrokerAvailable (naming the policy) if none."""
        found = await self.candidates(namespace, broker_ids)
        if not found.brokers:
            raise NoBrokerAvailable(found.why_empty)
        return found.brokers

    async def check_may_own(self, namespace: str, broker_id: str, live: Callable[[], Awaitable[Iterable[str]]]) -> None:
        """Refuse (NoBrokerAvailable / ServiceNotReady) when ``broker_id`` may not own ``namespace``.

        ``live`` lists the live brokers; it is called only when the cluster has policies, so a
        cluster without any pays one read here."""
        policies = await load(self.store, self.cluster)
        if not policies.policies:
            return
        found = policies.candidates(namespace, {*await live(), broker_id})
        if broker_id in found.brokers:
            return
        if not found.brokers:
            raise NoBrokerAvailable(found.why_empty)
        by = f"namespace isolation policy {found.policy}" if found.policy else "the shared-broker rule"
        raise ServiceNotReady(
            f"broker {broker_id} may not own namespace {namespace}: {by} gives it to {', '.join(found.brokers)}"
        )


def namespace_of_bundle(bundle_path: str) -> str:
    """``tenant/namespace`` of an ownership path ``/ownership/{tenant}/{ns}/{bundle}``."""
    parts = bundle_path.strip("/").split("/")
    return f"{parts[1]}/{parts[2]}"


def watch_policy_changes(service: Any, cluster: str) -> Callable[[], None]:
    """``service`` is the ``BrokerService`` (untyped here: the service imports this module).

    On a policy change, give up the bundles this broker may no longer own (Pulsar does so with
    ``enableNamespaceIsolationUpdateOnTime``; here always): their topics are unloaded, then the
    bundle released, and the next lookup places them within the new group."""
    pending: set[asyncio.Task[list[str]]] = set()

    def changed(_note: Any) -> None:
        task = asyncio.get_running_loop().create_task(evict_disallowed(service))
        pending.add(task)
        task.add_done_callback(pending.discard)

    unwatch: Callable[[], None] = service.store.watch(policies_path(cluster), changed)
    return unwatch


async def evict_disallowed(service: Any) -> list[str]:
    """Unload and release every owned bundle that the current policies no longer give this broker."""
    own = service.ownership
    if own is None or service.closing or own.isolation is None:
        return []
    policies = await load(service.store, own.isolation.cluster)
    live = [b.broker_id for b in await own.live_brokers()]
    released: list[str] = []
    for path in sorted(own.owned):
        ns = namespace_of_bundle(path)
        if own.me.broker_id in policies.candidates(ns, {*live, own.me.broker_id}).brokers:
            continue
        log.warning("namespace isolation: broker %s gives up bundle %s", own.me.broker_id, path)
        own.owned.discard(path)
        for key in [k for k in [*service.topics, *service.non_persistent.topics] if _bundle_of(service, k) == path]:
            await service.unload_topic(key)
        await own.release(path)
        released.append(path)
    return released


def _bundle_of(service: Any, topic_key: str) -> str:
    return str(service.ownership.bundle_path(TopicName.parse(topic_key)))
