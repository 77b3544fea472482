"""A cluster broker process: the broker service over a shared metadata store and TCP bookies.

Unlike standalone it owns no storage: bookies register themselves in the metadata store and the
ledger layer reaches them over TCP (``MetadataBookieResolver``); topics are served by whichever
broker owns their bundle.
"""

from __future__ import annotations

from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.broker.config import BrokerConfig
from magnetar.broker.metrics import BrokerMetrics
from magnetar.broker.resources import ensure_default_namespace
from magnetar.broker.service import BrokerService
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.store import MetadataStore
from magnetar.metadata.url import open_metadata_store


class BrokerNode:
    def __init__(self, metadata_url: str, config: BrokerConfig, *, bundles: int = 4, cluster: str = "local") -> None:
        self.metadata_url = metadata_url
        self.config = config
        self.bundles = bundles
        self.cluster = cluster
        self.store: MetadataStore | None = None
        self.resolver: MetadataBookieResolver | None = None
        self.broker: BrokerService | None = None

    async def start(self) -> None:
        self.store = await open_metadata_store(self.metadata_url)
        self.resolver = MetadataBookieResolver(self.store)
        ledgers = LedgerManager(self.store, self.resolver)
        self.broker = BrokerService(
            self.config, self.store, ledgers, BrokerMetrics(), clustered=True, bundles=self.bundles
        )
        await ensure_default_namespace(self.broker.resources, self.cluster)
        await self.broker.start()

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
        if self.resolver is not None:
            await self.resolver.close()
        if self.store is not None:
            await self.store.close()
