"""A cluster broker process: the broker service over a shared metadata store and TCP bookies.

Unlike standalone it owns no storage: bookies register themselves in the metadata store and the
ledger layer reaches them over TCP (``MetadataBookieResolver``); topics are served by whichever
broker owns their bundle.

Start order: metadata session, default namespace, listeners (so the broker knows the ports it
advertises), then the service, which registers this broker in the live set. Stop runs in reverse:
the service's graceful unload (leave the live set, hand topics over, seal ledgers, release
bundles) while the listeners still answer, then the listeners, then the metadata session. A start
that fails part-way stops what it had started and re-raises.
"""

from __future__ import annotations

from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.broker.cluster.resources import ensure_default_namespace
from magnetar.broker.config import BrokerConfig
from magnetar.broker.metrics.registry import BrokerMetrics
from magnetar.broker.service import BrokerService
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.store import MetadataStore
from magnetar.metadata.url import open_metadata_store
from magnetar.node.lifecycle import Node
from magnetar.node.listeners import BrokerListeners


class BrokerNode(Node):
    def __init__(self, metadata_url: str, config: BrokerConfig, *, bundles: int = 4, cluster: str = "local") -> None:
        self.metadata_url = metadata_url
        self.config = config
        self.bundles = bundles
        self.cluster = cluster
        self.store: MetadataStore | None = None
        self.resolver: MetadataBookieResolver | None = None
        self.broker: BrokerService | None = None
        self.listeners: BrokerListeners | None = None

    async def _start(self) -> None:
        self.store = await open_metadata_store(self.metadata_url)
        # The broker's own credentials and TLS towards the bookies (bookkeeperClientAuthentication*,
        # bookkeeperTLS*): every ledger write and read goes through these clients.
        self.resolver = MetadataBookieResolver(self.store, security=BookieClientSecurity.from_config(self.config))
        ledgers = LedgerManager(self.store, self.resolver)
        self.broker = BrokerService(
            self.config, self.store, ledgers, BrokerMetrics(), clustered=True, bundles=self.bundles
        )
        self.broker.cluster = self.cluster  # whose namespace isolation policies apply (broker/cluster/isolation.py)
        await ensure_default_namespace(self.broker.resources, self.cluster, self.bundles)
        self.listeners = BrokerListeners(self.broker)
        await self.listeners.start()
        await self.broker.start()

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
        if self.listeners is not None:
            await self.listeners.stop()
        if self.resolver is not None:
            await self.resolver.close()
        if self.store is not None:
            await self.store.close()
