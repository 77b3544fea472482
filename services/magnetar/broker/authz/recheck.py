"""Re-checking open producers and consumers when a namespace's grants change (R73).

Pulsar re-authorizes every producer and consumer of a topic when its namespace policies change
(``PersistentTopic.onPoliciesUpdate`` calls ``Producer.checkPermissionsAsync`` and
``Consumer.checkPermissionsAsync``) and disconnects the ones no longer allowed, so a revoke takes
effect on running clients, not only on the next one. The same happens here: the metadata watch
of ``store.PermissionStore`` reports a changed namespace record on every broker, and each broker
re-checks the producers and consumers its own connections hold on that namespace's topics. A
refused one is closed with the ``close_producer`` / ``close_consumer`` push the broker also
sends on unload; the client reconnects, and its new ``producer`` / ``subscribe`` is refused
with R71/R72's error.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Collection
from typing import Any, Protocol

from magnetar.broker.authz.checks import Authorizer
from magnetar.broker.config import BrokerConfig
from magnetar.metadata.store import MetadataStore
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthorizationError
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

_RUNNING: set[asyncio.Task[None]] = set()


class AuthorizingBroker(Protocol):
    """The broker as authorization sees it (``BrokerService``, which sits above this package):
    its settings, its metadata store and the client connections it serves (``ServerConnection``;
    a re-check reads their role, producers and consumers and closes the refused ones)."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def store(self) -> MetadataStore: ...
    @property
    def connections(self) -> Collection[Any]: ...


def _in_namespace(topic_name: str, tenant: str, ns: str) -> TopicName | None:
    try:
        name = TopicName.parse(topic_name)
    except ValueError:
        return None
    return name if (name.tenant, name.namespace) == (tenant, ns) else None


async def _allowed(check: Any) -> bool:
    """The answer of one check; a refusal with its own reason (Prefix mode) is a "no"."""
    try:
        return bool(await check)
    except AuthorizationError:
        return False


async def recheck_namespace(service: AuthorizingBroker, authz: Authorizer, tenant: str, ns: str) -> None:
    """Close every producer and consumer of this broker on ``tenant/ns`` that may no longer run."""
    for conn in list(service.connections):
        role = conn.auth_role
        if authz.is_superuser(role):
            continue
        for pid, (producer, topic) in list(conn.producers.items()):
            name = _in_namespace(topic.name, tenant, ns)
            if name is None or await _allowed(authz.can_produce(name, role)):
                continue
            if conn.producers.get(pid, (None, None))[0] is producer:
                del conn.producers[pid]
                topic.remove_producer(producer)
                conn.write(c.close_producer_pushed(pid))
                log.info("%s is not allowed to produce on topic %s anymore: producer %d closed", role, name, pid)
        for cid, (consumer, sub, topic) in list(conn.consumers.items()):
            name = _in_namespace(topic.name, tenant, ns)
            if name is None or await _allowed(authz.can_consume(name, role, sub.name)):
                continue
            if conn.consumers.get(cid, (None, None, None))[0] is consumer:
                del conn.consumers[cid]
                sub.remove_consumer(consumer)
                conn.write(c.close_consumer_pushed(cid))
                log.info("%s is not allowed to consume from topic %s anymore: consumer %d closed", role, name, cid)


def watch_revocations(service: AuthorizingBroker, authz: Authorizer) -> None:
    """Re-check this broker's producers and consumers on each change of a namespace's record
    (once per authorizer; the service is held weakly, so a stopped broker is not kept alive)."""
    if authz.grants.listeners:
        return
    owner = weakref.ref(service)

    def changed(tenant: str, ns: str) -> None:
        svc = owner()
        if svc is None:
            return
        task = asyncio.get_running_loop().create_task(recheck_namespace(svc, authz, tenant, ns))
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)

    authz.grants.listeners.append(changed)
