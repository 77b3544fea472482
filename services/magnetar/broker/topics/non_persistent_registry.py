"""The non-persistent topics this broker serves, kept apart from the persistent ones.

A non-persistent topic has no metadata of its own, as in Pulsar: no managed ledger, no topic
record. It exists while a broker has it loaded — created on first use (a producer, a consumer, an
admin ``PUT``) when the namespace exists and auto-creation is on, and gone with an unload, a
delete or a broker restart, which also loses the messages in flight, by design. Its namespace's
policies still apply (producer and consumer limits); topic-level policies do not, because topic
records are keyed without the domain and belong to the persistent topic of the same name.

They live in their own map rather than in ``BrokerService.topics`` because everything that walks
that map (ledger trimming, expiry, quotas, metrics) is about managed ledgers. Ownership is the
same as for any topic: the bundle of the topic's name, so in a cluster a non-persistent topic is
served by the broker that owns its bundle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection
from typing import Any, Protocol

from prometheus_client import Counter

from magnetar.broker.cluster.resources import Conflict, Resources
from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.model import EffectivePolicies
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.rate_sampler import RateSampler
from magnetar.protocol.errors import InvalidTopicName, NotFound, ServiceNotReady, TopicNotFound
from magnetar.protocol.topic_name import NON_PERSISTENT, TopicName

log = logging.getLogger(__name__)


class DropCounter(Protocol):
    """The broker's metrics, as far as non-persistent topics count into them."""

    @property
    def msgs_dropped(self) -> Counter: ...


class HostingBroker(Protocol):
    """The broker as its non-persistent topics see it (``BrokerService``, which holds this
    registry and sits above the topics package): whether it is stopping, whether it owns a topic,
    its settings, metadata, rate sampler and metrics, and the connections an unload tells."""

    @property
    def closing(self) -> bool: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def resources(self) -> Resources: ...
    @property
    def rate_sampler(self) -> RateSampler: ...
    @property
    def metrics(self) -> DropCounter: ...
    @property
    def connections(self) -> Collection[Any]: ...
    async def ensure_owned(self, name: TopicName) -> None:
        """ServiceNotReady unless this broker owns (or could just take) the topic's bundle."""
        ...


class NonPersistentTopics:
    def __init__(self, service: HostingBroker) -> None:
        self.service = service
        self.topics: dict[str, NonPersistentTopic] = {}
        self._refreshing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self.topics)

    async def get(self, name: TopicName, *, create: bool = True, explicit: bool = False) -> NonPersistentTopic:
        """The loaded topic ``name``, loading it when ``create`` allows: by auto-creation (when
        the broker allows it) or ``explicit``ly (an admin's create, allowed either way)."""
        if name.domain != NON_PERSISTENT:
            raise InvalidTopicName(f"{name} is not a non-persistent topic")
        service = self.service
        if service.closing:
            raise ServiceNotReady("broker is shutting down")
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        await service.ensure_owned(name)
        ns_policies, _ = await service.resources.get_namespace(name.tenant, name.namespace)
        topic = self.topics.get(key)  # loaded by someone else while we awaited
        if topic is not None:
            return topic
        if not (create and (explicit or service.config.allow_auto_topic_creation)):
            raise TopicNotFound(f"topic {name} does not exist")
        eff = self._resolve(ns_policies)
        topic = NonPersistentTopic(key, max_producers=eff.max_producers, max_consumers=eff.max_consumers, policies=eff)
        topic.on_traffic = service.rate_sampler.join
        topic.on_drop = service.metrics.msgs_dropped.inc
        self.topics[key] = topic
        log.info("loaded non-persistent topic %s", name)
        return topic

    def _resolve(self, ns_policies: dict[str, Any]) -> EffectivePolicies:
        """Namespace policies over broker defaults (no topic level: see the module docstring)."""
        c = self.service.config
        defaults = (c.default_ensemble_size, c.default_write_quorum, c.default_ack_quorum)
        return EffectivePolicies.resolve(defaults, ns_policies, {})

    def namespace_policies_changed(self, tenant: str, ns: str) -> None:
        """The namespace record changed: re-apply its policies to our topics in it."""
        if not self.in_namespace(tenant, ns):
            return
        task = asyncio.get_running_loop().create_task(self._refresh(tenant, ns))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _refresh(self, tenant: str, ns: str) -> None:
        try:
            ns_policies, _ = await self.service.resources.get_namespace(tenant, ns)
        except Exception as exc:  # deleted, or the store is away: keep the old ones
            log.info("policies of non-persistent topics in %s/%s not refreshed: %s", tenant, ns, exc)
            return
        eff = self._resolve(ns_policies)
        for key in self.in_namespace(tenant, ns):
            topic = self.topics.get(key)
            if topic is not None:
                topic.apply_policies(eff)

    def loaded(self, name: TopicName) -> NonPersistentTopic:
        """The topic if this broker has it loaded, else TopicNotFound (admin reads)."""
        topic = self.topics.get(str(name))
        if topic is None:
            raise TopicNotFound(f"Topic {name} not found")
        return topic

    def in_namespace(self, tenant: str, ns: str) -> list[str]:
        """The loaded topics of ``tenant/ns`` (Pulsar lists a namespace's non-persistent topics
        from the brokers that own its bundles)."""
        out = []
        for key in self.topics:
            name = TopicName.parse(key)
            if name.tenant == tenant and name.namespace == ns:
                out.append(key)
        return sorted(out)

    async def unload(self, key: str) -> bool:
        """Close the topic and its clients' producers and consumers; False when not loaded here."""
        topic = self.topics.pop(key, None)
        if topic is None:
            return False
        for conn in list(self.service.connections):
            conn.topic_unloaded(key)
        with contextlib.suppress(Exception):
            await topic.close()
        return True

    async def unload_all(self) -> None:
        for key in list(self.topics):
            await self.unload(key)

    async def delete(self, name: TopicName, *, force: bool = False) -> None:
        """Delete (unload) the topic: refused while it has clients unless ``force``."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is None:
            raise NotFound(f"Topic {name} not found")
        if topic.has_clients and not force:
            raise Conflict(f"topic {name} has active producers or consumers (use force)")
        await self.unload(key)

    def drop_all(self) -> None:
        """The metadata session is gone: forget everything at once (connections are aborted)."""
        self.topics.clear()
