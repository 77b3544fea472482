"""Standalone Magnetar: one broker, one in-process bookie and the embedded LMDB metadata store.

Everything lives under one data directory (``metadata/``, ``bookie/``) so that a restart — clean
or after kill -9 — finds its topics, ledgers and cursors again. The broker talks to its bookie
in-process (no TCP hop); the bookie also listens on its own port so that tools that read ledgers
directly (the Spark data source) can reach it. On first start the tenant ``public`` and the
namespace ``public/default`` are created, as in Pulsar's standalone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.resolver import StaticBookieResolver
from magnetar.bookie.service import BookieService
from magnetar.broker.config import BrokerConfig
from magnetar.broker.metrics import BrokerMetrics
from magnetar.broker.resources import ensure_default_namespace
from magnetar.broker.service import BrokerService
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.lmdb_store import LmdbMetadataStore

log = logging.getLogger(__name__)

STANDALONE_BOOKIE_ID = "standalone-bookie"


@dataclass(slots=True)
class StandaloneConfig:
    data_dir: Path
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    bookie_port: int = 3181


class Standalone:
    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.store: LmdbMetadataStore | None = None
        self.bookie: BookieService | None = None
        self.broker: BrokerService | None = None

    async def start(self) -> None:
        data = self.config.data_dir
        data.mkdir(parents=True, exist_ok=True)
        self.store = await LmdbMetadataStore.open(data / "metadata")
        bookie_registry = CollectorRegistry()
        self.bookie = BookieService(
            data / "bookie",
            host=self.config.broker.host,
            port=self.config.bookie_port,
            bookie_id=STANDALONE_BOOKIE_ID,
            store=self.store,
            registry=bookie_registry,
            autorecovery=False,  # one bookie: there is nowhere to re-replicate to
        )
        await self.bookie.start()
        resolver = StaticBookieResolver(
            {STANDALONE_BOOKIE_ID: LocalBookieClient(self.bookie.storage, STANDALONE_BOOKIE_ID)}
        )
        ledgers = LedgerManager(self.store, resolver)
        self.broker = BrokerService(self.config.broker, self.store, ledgers, BrokerMetrics())
        self.broker.extra_registries = [bookie_registry]
        await self._ensure_defaults()
        await self.broker.start()

    async def _ensure_defaults(self) -> None:
        assert self.broker is not None
        await ensure_default_namespace(self.broker.resources, "standalone")

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
        if self.bookie is not None:
            await self.bookie.stop()
        if self.store is not None:
            await self.store.close()
