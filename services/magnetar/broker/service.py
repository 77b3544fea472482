"""BrokerService: owns the topics this broker serves and the servers in front of them.

Topics are loaded on first use (a producer, a consumer or an admin call) and stay loaded until
unloaded or the broker stops; concurrent first uses share one load. A topic is auto-created as a
non-partitioned topic when its namespace exists, as Pulsar does with allowAutoTopicCreation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.metrics import BrokerMetrics
from magnetar.broker.policies import EffectivePolicies
from magnetar.broker.resources import Resources
from magnetar.broker.topic import PersistentTopic
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import AlreadyExists, InvalidTopicName, NotFound, TopicNotFound
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)


class BrokerService:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        ledgers: LedgerManager,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.ledgers = ledgers
        self.resources = Resources(store)
        self.metrics = metrics or BrokerMetrics()
        self.topics: dict[str, PersistentTopic] = {}
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        self._server: asyncio.Server | None = None
        self._web: Any = None
        self._ticker: asyncio.Task[None] | None = None
        self.connections: set[Any] = set()
        self.ready = False

    # ------------------------------------------------------------------ addresses
    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def broker_url(self) -> str:
        return f"magnetar://{self.config.advertised_host}:{self.port}"

    @property
    def web_port(self) -> int:
        port: int = self._web.port
        return port

    @property
    def web_url(self) -> str:
        return f"http://{self.config.advertised_host}:{self.web_port}"

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        from magnetar.broker.admin import AdminServer
        from magnetar.broker.connection import ServerConnection

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self), self.config.host, self.config.port, reuse_address=True
        )
        self._web = AdminServer(self)
        await self._web.start(self.config.host, self.config.web_port)
        self._ticker = loop.create_task(self._tick())
        self.ready = True

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for topic in list(self.topics.values()):
                topic.sample_rates()
            self.metrics.update(self)

    async def stop(self) -> None:
        """Stop accepting, close client connections, then close topics so ledgers are sealed."""
        self.ready = False
        if self._ticker is not None:
            self._ticker.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for name in list(self.topics):
            await self.unload_topic(name)
        if self._web is not None:
            await self._web.stop()

    # ------------------------------------------------------------------ topics
    async def get_topic(self, name: TopicName, *, create: bool = True) -> PersistentTopic:
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        pending = self._loading.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[key] = fut
        try:
            topic = await self._load(name, create)
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
        ns_policies, _ = await self.resources.get_namespace(name.tenant, name.namespace)
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
            record = await self.resources.get_topic(name)
        topic_policies = (record[0].get("policies") if record else None) or {}
        if record is None:  # a partition: topic-level policies live on the partitioned topic
            base = await self.resources.get_topic(name.partitioned_base)
            topic_policies = (base[0].get("policies") if base else None) or {}
        c = self.config
        eff = EffectivePolicies.resolve(
            (c.default_ensemble_size, c.default_write_quorum, c.default_ack_quorum),
            ns_policies,
            topic_policies,
        )
        mlc = c.managed_ledger
        ml_config = ManagedLedgerConfig(
            ensemble_size=eff.ensemble_size,
            write_quorum=eff.write_quorum,
            ack_quorum=eff.ack_quorum,
            max_entries_per_ledger=mlc.max_entries_per_ledger,
            max_bytes_per_ledger=mlc.max_bytes_per_ledger,
            max_ledger_seconds=mlc.max_ledger_seconds,
            cache_bytes=mlc.cache_bytes,
            cursor_flush_delay=mlc.cursor_flush_delay,
        )
        ml = await ManagedLedger.open(name.path, self.store, self.ledgers, ml_config)
        log.info("loaded topic %s (E/Qw/Qa %s/%s/%s)", name, eff.ensemble_size, eff.write_quorum, eff.ack_quorum)
        return PersistentTopic(str(name), ml, max_producers=eff.max_producers, max_consumers=eff.max_consumers)

    async def unload_topic(self, key: str) -> None:
        topic = self.topics.pop(key, None)
        if topic is None:
            return
        for conn in list(self.connections):
            conn.topic_unloaded(key)
        with contextlib.suppress(Exception):
            await topic.close()

    async def delete_topic(self, name: TopicName, *, force: bool = False) -> None:
        """Delete a non-partitioned topic or one partition: its data, cursors and record."""
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
            from magnetar.broker.resources import Conflict

            raise Conflict(f"topic {name} has active producers or consumers (use force)")
        if topic is None:
            ml = await ManagedLedger.open(name.path, self.store, self.ledgers, self.config.managed_ledger)
        else:
            self.topics.pop(key, None)
            for conn in list(self.connections):
                conn.topic_unloaded(key)
            ml = topic.ml
            for sub in topic.subscriptions.values():
                sub.close()
        await ml.delete()
        await self.resources.delete_topic_record(name)
