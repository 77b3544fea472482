"""Grants, stored where Pulsar keeps them: in the namespace policies (``/namespaces/{t}/{ns}``).

The namespace record gets Pulsar's two ``Policies`` fields: ``auth_policies`` with
``namespace_auth`` ({role: [actions]}), ``destination_auth`` ({full topic name: {role: [actions]}})
and ``subscription_auth_roles`` ({subscription: [roles]}), and ``subscription_auth_mode``
(``"None"`` | ``"Prefix"``). Keeping them in the namespace record means one read answers every
check for a topic, and deleting a namespace deletes its grants (as in Pulsar). Every change is
a compare-and-set on the record's version, retried on a concurrent update, so a grant never
overwrites a policy written at the same moment (or the other way round).

Reads go through a per-broker cache of the namespace's auth policies and of each tenant's
``adminRoles``, invalidated by a metadata watch on ``/namespaces`` and ``/tenants``: every
broker of a cluster drops its copy when any broker writes a change, and the writing broker
drops its own at once (before answering the REST call), so a revoke is seen by the next
producer or subscription it checks. ``listeners`` hear of each changed namespace record after its
cache entry is dropped: ``recheck.py`` re-checks the producers and consumers already open.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.cluster.resources import Resources
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import BadVersion, InvalidCommand

# Pulsar's AuthAction values. Only produce and consume grant anything here (there are no
# functions, IO connectors or packages); the others are stored as given, so that a grant
# copied from a Pulsar cluster is accepted and reads back the same.
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
MODES = ("None", "Prefix")  # Pulsar's SubscriptionAuthMode
_RETRIES = 20


@dataclass(frozen=True, slots=True)
class AuthPolicies:
    """One namespace's grants (Pulsar's ``AuthPolicies`` plus ``subscription_auth_mode``)."""

    namespace_auth: dict[str, list[str]] = field(default_factory=dict)
    destination_auth: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    subscription_auth_roles: dict[str, list[str]] = field(default_factory=dict)
    subscription_auth_mode: str = "None"

    @classmethod
    def of(cls, doc: dict[str, Any]) -> AuthPolicies:
        raw = doc.get("auth_policies") or {}
        return cls(
            dict(raw.get("namespace_auth") or {}),
            dict(raw.get("destination_auth") or {}),
            dict(raw.get("subscription_auth_roles") or {}),
            str(doc.get("subscription_auth_mode") or "None"),
        )

    def to_doc(self) -> dict[str, Any]:
        return {
            "namespace_auth": self.namespace_auth,
            "destination_auth": self.destination_auth,
            "subscription_auth_roles": self.subscription_auth_roles,
        }


def actions_of(raw: Any) -> list[str]:
    """A REST body of actions (a JSON list, Pulsar's ``Set<AuthAction>``), checked and sorted."""
    if not isinstance(raw, list) or not all(isinstance(a, str) for a in raw):
        raise InvalidCommand(f"the body must be a JSON list of actions ({', '.join(ACTIONS)}), got {raw!r}")
    unknown = sorted(set(raw) - set(ACTIONS))
    if unknown:
        raise InvalidCommand(f"unknown action(s) {', '.join(unknown)}; known: {', '.join(ACTIONS)}")
    return sorted(set(raw))


def roles_of(raw: Any) -> list[str]:
    """A REST body of roles (a JSON list of non-empty strings)."""
    if not isinstance(raw, list) or not raw or not all(isinstance(r, str) and r for r in raw):
        raise InvalidCommand(f"the body must be a non-empty JSON list of roles, got {raw!r}")
    return sorted(set(raw))


class PermissionStore:
    """Reads (cached) and changes (compare-and-set) the grants of every namespace."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.resources = Resources(store)
        self._namespaces: dict[tuple[str, str], AuthPolicies | None] = {}
        self._tenants: dict[str, list[str] | None] = {}
        self._unwatch: list[Callable[[], None]] = []
        # Called with (tenant, namespace) after a namespace record changed (recheck.py).
        self.listeners: list[Callable[[str, str], None]] = []

    def _watch(self) -> None:
        """Start the invalidating watches on first use (the broker's event loop is running then)."""
        if not self._unwatch:
            self._unwatch = [
                self.store.watch(paths.NAMESPACES, lambda note: self._dropped(note.path)),
                self.store.watch(paths.TENANTS, lambda note: self._dropped(note.path)),
            ]

    def close(self) -> None:
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch = []

    def _dropped(self, path: str) -> None:
        parts = path.strip("/").split("/")
        if parts[0] == paths.TENANTS.strip("/") and len(parts) >= 2:
            self._tenants.pop(parts[1], None)
        elif len(parts) >= 3:
            self._namespaces.pop((parts[1], parts[2]), None)
            for listener in self.listeners:
                listener(parts[1], parts[2])
        else:  # a whole folder: forget everything
            self._namespaces.clear()
            self._tenants.clear()

    # ------------------------------------------------------------------ reads
    async def policies(self, tenant: str, ns: str) -> AuthPolicies | None:
        """The namespace's grants, or None when the namespace does not exist."""
        self._watch()
        key = (tenant, ns)
        if key in self._namespaces:
            return self._namespaces[key]
        found = await self.store.get(paths.namespace(tenant, ns))
        value = AuthPolicies.of(json.loads(found.value)) if found is not None else None
        self._namespaces[key] = value
        return value

    async def admin_roles(self, tenant: str) -> list[str] | None:
        """The tenant's ``adminRoles``, or None when the tenant does not exist."""
        self._watch()
        if tenant in self._tenants:
            return self._tenants[tenant]
        found = await self.store.get(paths.tenant(tenant))
        value = list(json.loads(found.value).get("adminRoles") or []) if found is not None else None
        self._tenants[tenant] = value
        return value

    # ------------------------------------------------------------------ changes
    async def update(self, tenant: str, ns: str, change: Callable[[AuthPolicies], AuthPolicies]) -> None:
        """Apply ``change`` to the namespace's grants by compare-and-set (retried on races)."""
        for _ in range(_RETRIES):
            doc, version = await self.resources.get_namespace(tenant, ns)
            new = change(AuthPolicies.of(doc))
            doc["auth_policies"] = new.to_doc()
            doc["subscription_auth_mode"] = new.subscription_auth_mode
            try:
                await self.store.put(paths.namespace(tenant, ns), json.dumps(doc).encode(), version)
            except BadVersion:
                continue
            self._namespaces.pop((tenant, ns), None)
            return
        raise BadVersion(f"namespace {tenant}/{ns} kept changing: permissions not updated, try again")
