"""A topic of a namespace (or tenant) that does not exist is a topic that does not exist.

Pulsar's broker answers a producer, consumer or partition-metadata request for a topic whose
namespace is missing with ``TopicNotFound``, and pulsar-client programs catch that
(``pulsar.TopicNotFound``). Magnetar's metadata layer says ``NamespaceNotFound`` /
``TenantNotFound``, which the admin API keeps (its 404 names what is missing); requests about a
topic on the binary protocol translate it here.
"""

from __future__ import annotations

from magnetar.broker.cluster.resources import Resources
from magnetar.protocol.errors import NamespaceNotFound, TenantNotFound, TopicNotFound
from magnetar.protocol.topic_name import TopicName

__all__ = ["require_namespace_of"]


async def require_namespace_of(resources: Resources, name: TopicName) -> None:
    """Return if ``name``'s namespace exists; ``TopicNotFound`` (Pulsar's answer) if it or its tenant does not."""
    try:
        await resources.get_namespace(name.tenant, name.namespace)
    except (NamespaceNotFound, TenantNotFound) as exc:
        raise TopicNotFound(f"topic {name} does not exist: {exc}") from exc
