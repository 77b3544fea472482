"""What a role may do: Pulsar's PulsarAuthorizationProvider, over the grants of ``store``.

- A superuser (``superUserRoles``) may do everything.
- A tenant admin (the tenant's ``adminRoles``) may do everything on the tenant's namespaces and
  topics, including producing and consuming (Pulsar's ``allowTopicOperationAsync`` asks
  ``validateTenantAdminAccess`` first), but nothing on other tenants and nothing cluster-wide.
- Anyone else needs a grant: ``produce`` or ``consume`` on the namespace or on the topic (a grant
  on a partitioned topic covers its partitions). A lookup (and partition metadata, stats)
  needs either. With ``authorizationAllowWildcardsMatching`` a granted role ending in ``*``
  matches roles by prefix and one starting with ``*`` by suffix, nothing in the middle (Pulsar's
  ``checkWildcardPermission``).
- Consuming also obeys the subscription rules of the namespace: when a subscription has a role
  list (``grant-subscription-permission``) only those roles may use it, and in ``Prefix`` mode the
  subscription name must start with ``<role>-``.

The answers are booleans; ``Refused`` carries the message of a refusal that is not a plain "no"
(the Prefix rule), as Pulsar's provider completes its future exceptionally for it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from magnetar.broker.authz.store import AuthPolicies, PermissionStore
from magnetar.broker.config import BrokerConfig
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import AuthorizationError
from magnetar.protocol.topic_name import TopicName

PRODUCE = "produce"
CONSUME = "consume"


class Refused(AuthorizationError):
    """A refusal with its own reason (e.g. the Prefix rule), not the caller's generic message."""


def check_authorization_settings(config: BrokerConfig) -> None:
    """Refuse settings that would not do what they say (ValueError, ends the process)."""
    if config.authorization_enabled and not config.authentication_enabled:
        raise ValueError(
            "authorizationEnabled needs authenticationEnabled: without authentication every client "
            "has no role, so authorization could only refuse everyone"
        )


def _matches(granted: str, role: str, wildcards: bool) -> bool:
    if granted == role:
        return True
    if not wildcards or not granted:
        return False
    if granted.endswith("*") and role.startswith(granted[:-1]):
        return True
    return granted.startswith("*") and role.endswith(granted[1:])


class Authorizer:
    def __init__(self, store: MetadataStore, super_users: Iterable[str], wildcards: bool) -> None:
        self.grants = PermissionStore(store)
        self.super_users = frozenset(super_users)
        self.wildcards = wildcards

    def close(self) -> None:
        self.grants.close()

    # ------------------------------------------------------------------ roles
    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.super_users

    async def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        """Superuser, or one of the tenant's ``adminRoles`` (False for a tenant that does not exist)."""
        if role is None:
            return False
        if self.is_superuser(role):
            return True
        try:
            admins = await self.grants.admin_roles(tenant)
        except ValueError:  # not a name a tenant can have
            return False
        return admins is not None and role in admins

    # ------------------------------------------------------------------ grants
    def _has(self, granted: dict[str, list[str]], role: str, action: str) -> bool:
        return any(action in actions and _matches(who, role, self.wildcards) for who, actions in granted.items())

    async def _policies(self, topic: TopicName) -> AuthPolicies | None:
        try:
            return await self.grants.policies(topic.tenant, topic.namespace)
        except ValueError:
            return None

    async def granted(self, topic: TopicName, role: str, action: str) -> bool:
        """A namespace or topic grant of ``action`` to ``role`` (Pulsar's checkPermission)."""
        policies = await self._policies(topic)
        if policies is None:
            return False
        if self._has(policies.namespace_auth, role, action):
            return True
        for name in {str(topic), str(topic.partitioned_base)}:
            if self._has(policies.destination_auth.get(name) or {}, role, action):
                return True
        return False

    async def namespace_granted(self, tenant: str, ns: str, actions: Iterable[str], role: str) -> bool:
        """A namespace-level grant of any of ``actions`` (listing a namespace's topics)."""
        try:
            policies = await self.grants.policies(tenant, ns)
        except ValueError:
            return False
        return policies is not None and any(self._has(policies.namespace_auth, role, a) for a in actions)

    # ------------------------------------------------------------------ operations
    async def can_produce(self, topic: TopicName, role: str | None) -> bool:
        if role is None:
            return False
        return await self.is_tenant_admin(topic.tenant, role) or await self.granted(topic, role, PRODUCE)

    async def can_lookup(self, topic: TopicName, role: str | None) -> bool:
        if role is None:
            return False
        if await self.is_tenant_admin(topic.tenant, role):
            return True
        return await self.granted(topic, role, PRODUCE) or await self.granted(topic, role, CONSUME)

    async def can_consume(self, topic: TopicName, role: str | None, subscription: str | None = None) -> bool:
        """``consume`` plus the namespace's subscription rules for ``subscription`` (when given);
        ``Refused`` for a name outside the role's prefix in Prefix mode."""
        if role is None:
            return False
        if await self.is_tenant_admin(topic.tenant, role):
            return True
        policies = await self._policies(topic)
        if policies is None:
            return False
        if subscription:
            roles = policies.subscription_auth_roles.get(subscription)
            if roles and role not in roles:
                return False
            if policies.subscription_auth_mode == "Prefix" and not subscription.startswith(f"{role}-"):
                raise Refused(
                    "Failed to create consumer - The subscription name needs to be prefixed by the "
                    f"authentication role, like {role}-xxxx for topic: {topic}"
                )
        return await self.granted(topic, role, CONSUME)


_BUILT: weakref.WeakKeyDictionary[object, Authorizer | None] = weakref.WeakKeyDictionary()


def authorizer_for(owner: object, config: BrokerConfig, store: MetadataStore) -> Authorizer | None:
    """The broker's authorizer (None with authorization off), built on first use and kept as
    long as ``owner`` (the broker service)."""
    try:
        return _BUILT[owner]
    except KeyError:
        check_authorization_settings(config)
        built = None
        if config.authorization_enabled:
            built = Authorizer(store, config.super_user_roles, config.authorization_allow_wildcards_matching)
        _BUILT[owner] = built
        return built
