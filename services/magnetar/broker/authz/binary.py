"""The checks of the binary protocol (WIRE.md R70-R72), one call per command in connection.py.

Each runs before the command does anything (no topic is loaded or auto-created, no
subscription made for a refused client) and raises ``AuthorizationError`` with the message
Pulsar's ServerCnx sends. With authorization off they return at once. Checks run when a
producer or consumer is created; producers and consumers already open are checked again when
their namespace's grants change, and closed if refused (``recheck.py``, as Pulsar's
``onPoliciesUpdate``).
"""

from __future__ import annotations

from magnetar.broker.authz.checks import CONSUME, PRODUCE, Authorizer, authorizer_for
from magnetar.broker.authz.recheck import AuthorizingBroker, watch_revocations
from magnetar.protocol.errors import AuthorizationError
from magnetar.protocol.topic_name import TopicName


def _authorizer(service: AuthorizingBroker) -> Authorizer | None:
    authz = authorizer_for(service, service.config, service.store)
    if authz is not None:
        watch_revocations(service, authz)  # a revoke closes the producers and consumers it refuses
    return authz


async def check_lookup(service: AuthorizingBroker, topic: TopicName, role: str | None) -> None:
    authz = _authorizer(service)
    if authz is not None and not await authz.can_lookup(topic, role):
        raise AuthorizationError("Client is not authorized to Lookup")


async def check_partitioned_metadata(service: AuthorizingBroker, topic: TopicName, role: str | None) -> None:
    authz = _authorizer(service)
    if authz is not None and not await authz.can_lookup(topic, role):
        raise AuthorizationError("Client is not authorized to Get Partition Metadata")


async def check_produce(service: AuthorizingBroker, topic: TopicName, role: str | None) -> None:
    authz = _authorizer(service)
    if authz is not None and not await authz.can_produce(topic, role):
        raise AuthorizationError("Client is not authorized to Produce")


async def check_subscribe(service: AuthorizingBroker, topic: TopicName, role: str | None, subscription: str) -> None:
    authz = _authorizer(service)
    if authz is not None and not await authz.can_consume(topic, role, subscription):
        raise AuthorizationError("Client is not authorized to subscribe")


async def check_topics_of_namespace(service: AuthorizingBroker, tenant: str, ns: str, role: str | None) -> None:
    """Pulsar's NamespaceOperation.GET_TOPICS: tenant admin, or a namespace-level grant."""
    authz = _authorizer(service)
    if authz is None:
        return
    if role is not None and (
        await authz.is_tenant_admin(tenant, role) or await authz.namespace_granted(tenant, ns, (PRODUCE, CONSUME), role)
    ):
        return
    raise AuthorizationError("Client is not authorized to GetTopicsOfNamespace")
