"""BrokerService: owns the topics this broker serves.

The servers in front of it (the client TCP listener and the admin HTTP server) belong to the
process that runs it (``magnetar.node``): the node binds them, tells the service its bound ports
(``listening``, in ``cluster/addresses.py`` with the URLs that follow) and only then calls
``start``, because a cluster broker registers its URLs.

Topics are loaded on first use (a producer, a consumer or an admin call) and stay loaded until
unloaded or the broker stops; concurrent first uses share one load. A topic is auto-created as a
non-partitioned topic when its namespace exists, as Pulsar does with allowAutoTopicCreation.

In a cluster (``ownership`` given) a topic is served only by the broker that owns its bundle. Stop
is a graceful unload: the broker leaves the live set, tells its clients to look their topics up
again, closes every managed ledger (so the next owner needs no recovery) and only then releases
its bundles. Losing the metadata session (lease expired, e.g. after a long pause) is fatal, as
with Pulsar's default ``shutdown`` policy: another broker may already own the bundles, so this
one drops every connection at once and exits without writing anything more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

from magnetar.broker.cluster.addresses import BrokerAddresses
from magnetar.broker.cluster.advertised_listeners import internal_listener
from magnetar.broker.cluster.isolation import NamespaceIsolation, watch_policy_changes
from magnetar.broker.cluster.load_manager import LoadManager
from magnetar.broker.cluster.ownership import BrokerInfo, Ownership
from magnetar.broker.cluster.resources import Conflict, Resources
from magnetar.broker.compaction.controller import TopicCompaction, delete_compaction_state
from magnetar.broker.compaction.monitor import run_monitor
from magnetar.broker.config import BrokerConfig
from magnetar.broker.loop.closing import ClosingQueue
from magnetar.broker.metrics.load_balancer import LoadBalancerCollector
from magnetar.broker.metrics.registry import BrokerMetrics
from magnetar.broker.policies.expiry import PolicyChecks
from magnetar.broker.policies.model import EffectivePolicies
from magnetar.broker.subscriptions import cursor_ops
from magnetar.broker.topics.loaded import LoadedTopics
from magnetar.broker.topics.loads import TopicLoadSlots
from magnetar.broker.topics.missing_namespace import require_namespace_of
from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.non_persistent_registry import NonPersistentTopics
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.rate_sampler import RateSampler
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger import ManagedLedger
from magnetar.managed_ledger.clock import policy_time
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.entry import decode_entry
from magnetar.protocol.errors import (
    AlreadyExists,
    InvalidTopicName,
    NotFound,
    ServiceNotReady,
    TopicNotFound,
)
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)


def entry_messages(data: bytes) -> int:
    """How many messages a stored entry holds (``meta.n``), for the managed ledger to count the
    entries of a ledger recovered after a crash (backlogs count messages)."""
    meta, _ = decode_entry(data)
    return int(meta.get("n", 1))


class BrokerService(BrokerAddresses):
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        ledgers: LedgerManager,
        metrics: BrokerMetrics | None = None,
        *,
        clustered: bool = False,
        bundles: int = 4,
    ) -> None:
        super().__init__(config)
        self.store = store
        self.ledgers = ledgers
        self.resources = Resources(store)
        self.metrics = metrics or BrokerMetrics()
        self.topics = LoadedTopics()  # str(name) -> topic, indexed by namespace and name
        self.rate_sampler = RateSampler()  # the loaded topics with traffic, sampled each second
        self.load_slots = TopicLoadSlots(
            config.max_concurrent_topic_load_request, config.max_concurrent_topic_loads_per_tenant
        )
        # Non-persistent topics: no managed ledger, so not in ``topics`` (non_persistent_registry).
        self.non_persistent = NonPersistentTopics(self)
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        # Topics being closed by ``unload_topic``: loading one again waits until its managed ledger
        # is closed (opened meanwhile, the two raced on its ledger list and its last ledger).
        self._closing_topics: dict[str, asyncio.Future[None]] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._compaction_monitor: asyncio.Task[None] | None = None  # compaction/monitor.py
        # Epoch seconds for aging data (TTL, retention, backlog-quota age): the guarded clock, which
        # does not follow a step of the wall clock (managed_ledger/clock.py); tests replace it.
        self.clock: Callable[[], float] = policy_time
        self._policy_checks = PolicyChecks(self, cursor_ops.expire)
        self.connections: set[Any] = set()
        self.closing_connections = ClosingQueue()  # of clients that left (loop/closing.py)
        self.ready = False
        self.closing = False
        self.clustered = clustered
        self.bundles = bundles
        # The cluster name (clusterName): the key of its namespace isolation policies (isolation.py).
        self.cluster = "standalone"
        self.ownership: Ownership | None = None
        # Load reports, the leader's shedding and splits, placement (cluster/load_manager.py).
        self.load_manager: LoadManager | None = None
        self.extra_registries: list[Any] = []
        self._unwatch_session: Any = None
        self._unwatch: Any = None
        self._unwatch_policies: list[Any] = []
        self._refreshing: set[asyncio.Task[None]] = set()
        # Called when the metadata session is lost; the CLI makes it exit the process.
        self.on_fatal: Any = None
        # Called after ``brokers shutdown`` has drained this broker; the CLI stops the process as SIGTERM does.
        self.on_shutdown: Callable[[], None] | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Join the cluster (when clustered) and start serving; the listeners are already bound."""
        if self.clustered:
            me = BrokerInfo(
                f"{self.config.advertised_host}:{self.port}",
                self.broker_url,
                self.web_url,
                self.broker_url_tls,
                self.web_url_tls,
                self.config.advertised_listeners,
                internal_listener(self.config.advertised_listeners, self.config.internal_listener_name),
                incarnation=uuid.uuid4().hex,
            )
            isolation = NamespaceIsolation(self.store, self.cluster)
            self.ownership = Ownership(self.store, me, bundles=self.bundles, isolation=isolation)
            await self.ownership.register()
            self._unwatch = self.store.watch(paths.OWNERSHIP, self._ownership_changed)
            on_session_lost = getattr(self.store, "on_session_lost", None)  # stores with leases (etcd)
            if on_session_lost is not None:
                self._unwatch_session = on_session_lost(self._session_lost)
        self._unwatch_policies = [
            self.store.watch(paths.NAMESPACES, self._policies_changed),
            self.store.watch(paths.TOPICS, self._policies_changed),
        ]
        if self.ownership is not None:  # give up bundles a changed isolation policy moves away
            self._unwatch_policies.append(watch_policy_changes(self, self.cluster))
        self._ticker = asyncio.get_running_loop().create_task(self._tick())
        self._policy_checks.start()  # TTL, retention, backlog quotas (expiry.py)
        self._compaction_monitor = asyncio.get_running_loop().create_task(run_monitor(self))
        self.load_manager = LoadManager(self)
        with contextlib.suppress(ValueError):  # a registry shared with an earlier service has them
            self.metrics.registry.register(LoadBalancerCollector(self.load_manager))
        await self.load_manager.start()
        self.ready = True

    @property
    def broker_id(self) -> str:
        return self.ownership.me.broker_id if self.ownership else "standalone"

    def _session_lost(self) -> None:
        log.error("metadata session lost: another broker may own our bundles; dropping everything")
        self.ready = False
        self.closing = True
        for conn in list(self.connections):
            conn.abort()
        self.topics.clear()
        self.non_persistent.drop_all()
        if self.on_fatal is not None:
            self.on_fatal()

    def _ownership_changed(self, note: Any) -> None:
        """Our ownership key vanished (session trouble or an operator): stop serving that bundle."""
        own = self.ownership
        if own is None or note.kind != "delete" or note.path not in own.owned:
            return
        asyncio.get_running_loop().create_task(self._ownership_deleted(note.path))

    async def _ownership_deleted(self, path: str) -> None:
        """A delete of an owned bundle's key was seen: unload its topics, unless the key there now
        is this process's own (the delete was of a previous run's key, which ``Ownership.acquire``
        removed just before writing ours: unloading would drop a bundle we hold)."""
        own = self.ownership
        if own is None:
            return
        try:
            found = await self.store.get(path)
        except Exception:  # cannot tell whose it is: stop serving (the safe side)
            found = None
        if (found is not None and own.is_me(BrokerInfo.from_json(found.value))) or path not in own.owned:
            return
        own.owned.discard(path)
        names = [(k, self.topics.name_of(k)) for k in self.topics]
        names += [(k, TopicName.parse(k)) for k in self.non_persistent.topics]
        for key in [k for k, name in names if own.bundle_path(name) == path]:
            log.warning("lost ownership of %s: unloading %s", path, key)
            await self.unload_topic(key)

    # ------------------------------------------------------------------ lookup and ownership
    async def lookup(self, name: TopicName) -> tuple[str, bool]:
        """(broker_url, redirect) for a client's lookup (WIRE.md, ownership section)."""
        url, redirect, _ = await self.lookup_with_tls(name)
        return url, redirect

    async def lookup_with_tls(self, name: TopicName, listener_name: str | None = None) -> tuple[str, bool, str | None]:
        """``lookup`` plus the named broker's TLS URL, when it has a TLS listener (WIRE.md R66).

        The URLs are those of the advertised listener the client named, or the internal one
        (``advertised_listeners.py``, WIRE.md R110)."""
        own = self.ownership
        if own is None:
            if self.closing:
                raise ServiceNotReady("broker is shutting down")
            url, url_tls = self.own_lookup_urls(listener_name)
            return url, False, url_tls
        if self.closing:
            current = await own.owner(name)
            if current is not None and current.broker_id != own.me.broker_id:
                url, url_tls = current.lookup_urls(listener_name)
                return url, False, url_tls
            others = [b for b in await own.live_brokers() if b.broker_id != own.me.broker_id]
            if not others:
                raise ServiceNotReady("broker is shutting down and no other broker is available")
            url, url_tls = others[0].lookup_urls(listener_name)
            return url, True, url_tls
        info, redirect = await own.lookup(name)
        url, url_tls = info.lookup_urls(listener_name)
        return url, redirect, url_tls

    async def ensure_owned(self, name: TopicName) -> None:
        """Raise ServiceNotReady unless this broker owns (or could just take) the topic's bundle."""
        if self.closing:
            raise ServiceNotReady("broker is shutting down")
        own = self.ownership
        if own is None:
            return
        owner = await own.acquire(name)
        if owner.broker_id != own.me.broker_id:
            raise ServiceNotReady(f"topic {name} is served by {owner.broker_url}")

    async def owner_web_url(self, name: TopicName) -> str | None:
        """The admin URL of the broker that owns ``name`` when it is another broker, else None."""
        own = self.ownership
        if own is None:
            return None
        owner = await own.acquire_or_place(name)  # kept out by isolation: forward to the group
        return None if owner.broker_id == own.me.broker_id else owner.web_url

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.rate_sampler.tick()  # the topics with traffic only: O(active), not O(loaded)

    async def stop(self) -> None:
        """Graceful unload: leave the live set, hand topics over, seal ledgers, release bundles.

        The listeners stay open throughout (clients told to look up again may ask this broker,
        which now redirects them); afterwards the node closes the service listener, then calls
        ``close_connections``, then stops the admin server."""
        self.ready = False
        self.closing = True
        if self._ticker is not None:
            self._ticker.cancel()
        self._policy_checks.stop()
        if self._compaction_monitor is not None:
            self._compaction_monitor.cancel()
        if self._unwatch_session is not None:
            self._unwatch_session()
        if self.load_manager is not None:  # hand the leadership over first: another broker leads at once
            await self.load_manager.stop()
        for unwatch in self._unwatch_policies:
            unwatch()
        if self.ownership is not None:
            await self.ownership.unregister()
        for name in list(self.topics):
            await self.unload_topic(name)
        await self.non_persistent.unload_all()
        if self.ownership is not None:
            await self.ownership.release_all()
        if self._unwatch is not None:
            self._unwatch()

    def close_connections(self) -> None:
        """Close every client connection (after ``stop``, once the listener accepts no more)."""
        for conn in list(self.connections):
            conn.close()

    # ------------------------------------------------------------------ topics
    async def get_any_topic(self, name: TopicName, *, create: bool = True) -> PersistentTopic | NonPersistentTopic:
        """The topic for a client's producer or consumer, of either domain."""
        if not name.is_persistent:
            return await self.non_persistent.get(name, create=create)
        return await self.get_topic(name, create=create)

    async def get_topic(self, name: TopicName, *, create: bool = True) -> PersistentTopic:
        if not name.is_persistent:  # never give a non-persistent topic a managed ledger
            raise InvalidTopicName(f"{name} is a non-persistent topic: it has no managed ledger")
        key = str(name)
        if self.closing:
            raise ServiceNotReady("broker is shutting down")
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        closing = self._closing_topics.get(key)
        if closing is not None:
            await asyncio.shield(closing)
            return await self.get_topic(name, create=create)
        fut: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            async with self.load_slots.slot(name.tenant):  # topics/loads.py: a tenant's share of the loop
                topic = await self._load(name, create)
                topic.compaction = await TopicCompaction.load(
                    topic, self.store, self.ledgers, retain_null_key=self.config.topic_compaction_retain_null_key
                )
            self.topics[key] = topic
            fut.set_result(topic)
            return topic
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._loading.pop(key, None)

    async def _load(self, name: TopicName, create: bool) -> PersistentTopic:
        await self.ensure_owned(name)
        await require_namespace_of(self.resources, name)  # TopicNotFound, as Pulsar answers
        record = await self.resources.get_topic(name)
        if record is not None and int(record[0].get("partitions", 0)) > 0:
            raise InvalidTopicName(f"{name} is a partitioned topic: use its partitions ({name}-partition-N)")
        if record is None and not await self.resources.topic_exists(name):
            if not (create and self.config.allow_auto_topic_creation):
                raise TopicNotFound(f"topic {name} does not exist")
            try:
                await self.resources.create_topic(name, 0)
            except AlreadyExists:
                pass
        eff = await self.resolve_policies(name)
        ml = await ManagedLedger.open(
            name.path, self.store, self.ledgers, self._ml_config(eff), entry_messages=entry_messages
        )
        log.info("loaded topic %s (E/Qw/Qa %s/%s/%s)", name, eff.ensemble_size, eff.write_quorum, eff.ack_quorum)
        topic = PersistentTopic(str(name), ml, policies=eff, config=self.config)
        topic.on_traffic = self.rate_sampler.join
        return topic

    async def resolve_policies(self, name: TopicName) -> EffectivePolicies:
        """The policies ``name`` runs with now: its topic-level ones (a partition's live on its
        partitioned topic) over its namespace's, over the broker's defaults."""
        ns_policies, _ = await self.resources.get_namespace(name.tenant, name.namespace)
        record = await self.resources.get_topic(name)
        if record is None and name.partition_index >= 0:
            record = await self.resources.get_topic(name.partitioned_base)
        topic_policies = (record[0].get("policies") if record else None) or {}
        c = self.config
        return EffectivePolicies.resolve(
            (c.default_ensemble_size, c.default_write_quorum, c.default_ack_quorum), ns_policies, topic_policies
        )

    def _ml_config(self, eff: EffectivePolicies) -> ManagedLedgerConfig:
        return dataclasses.replace(
            self.config.managed_ledger,
            ensemble_size=eff.ensemble_size,
            write_quorum=eff.write_quorum,
            ack_quorum=eff.ack_quorum,
            retention_minutes=eff.retention_minutes,
            retention_mb=eff.retention_mb,
        )

    # ------------------------------------------------------------------ live policies
    def _policies_changed(self, note: Any) -> None:
        """A namespace or topic record changed: re-resolve the policies of the loaded topics it
        governs (Pulsar applies policy updates to live topics; a producer need not reconnect)."""
        parts = note.path.strip("/").split("/")
        if len(parts) < 3:
            return
        tenant, ns = parts[1], parts[2]
        local = parts[3] if parts[0] == paths.TOPICS.strip("/") and len(parts) > 3 else None
        if self.ownership is not None and parts[0] == paths.NAMESPACES.strip("/") and len(parts) == 3:
            self.ownership.namespace_changed(tenant, ns)  # its bundle ranges (a split, a create)
        if local is None:
            self.non_persistent.namespace_policies_changed(tenant, ns)
        keys = self.topics.in_namespace(tenant, ns) if local is None else self.topics.named(tenant, ns, local)
        for key in keys:
            topic, name = self.topics[key], self.topics.name_of(key)
            task = asyncio.get_running_loop().create_task(self._refresh_policies(name, topic))
            self._refreshing.add(task)
            task.add_done_callback(self._refreshing.discard)

    async def _refresh_policies(self, name: TopicName, topic: PersistentTopic) -> None:
        try:
            eff = await self.resolve_policies(name)
        except Exception as exc:  # the namespace was deleted, the store is away: keep the old ones
            log.info("policies of %s not refreshed: %s", name, exc)
            return
        if self.topics.get(str(name)) is topic:
            topic.apply_policies(eff)

    async def unload_topic(self, key: str) -> None:
        if await self.non_persistent.unload(key):
            return
        topic = self.topics.pop(key, None)
        if topic is None:
            return
        closed = self._closing_topics[key] = asyncio.get_running_loop().create_future()
        try:
            for conn in list(self.connections):
                conn.topic_unloaded(key)
            with contextlib.suppress(Exception):
                await topic.close()
        finally:
            if self._closing_topics.get(key) is closed:
                del self._closing_topics[key]
            closed.set_result(None)

    async def delete_topic(self, name: TopicName, *, force: bool = False) -> None:
        """Delete a non-partitioned topic or one partition: its data, cursors and record."""
        if not name.is_persistent:
            await self.non_persistent.delete(name, force=force)
            return
        key = str(name)
        exists = await self.resources.topic_exists(name) or key in self.topics
        if not exists:
            raise NotFound(f"topic {name} does not exist")
        topic = self.topics.get(key)
        if (
            topic is not None
            and not force
            and (topic.producers or any(s.dispatcher.consumers for s in topic.subscriptions.values()))
        ):
            raise Conflict(f"topic {name} has active producers or consumers (use force)")
        if topic is None:
            ml = await ManagedLedger.open(
                name.path, self.store, self.ledgers, self.config.managed_ledger, entry_messages=entry_messages
            )
        else:
            self.topics.pop(key, None)
            for conn in list(self.connections):
                conn.topic_unloaded(key)
            ml = topic.ml
            for sub in topic.subscriptions.values():
                sub.close()
        if topic is not None and topic.compaction is not None:
            await topic.compaction.close()
        await delete_compaction_state(self.store, self.ledgers, name)
        await ml.delete()
        await self.resources.delete_topic_record(name)
