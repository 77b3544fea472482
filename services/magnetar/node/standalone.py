"""Standalone Magnetar: one broker, one in-process bookie and the embedded LMDB metadata store.

Everything lives under one data directory (``metadata/``, ``bookie/``) so that a restart — clean
or after kill -9 — finds its topics, ledgers and cursors again. The broker talks to its bookie
in-process (no TCP hop); the bookie also listens on its own port so that tools that read ledgers
directly (the Spark data source) can reach it. With token authentication on, that port admits
only clients with a valid token of the broker's key (and, when the broker has superusers, only
theirs), as a cluster's bookies do: otherwise anyone on the host could write ledgers past the
broker's checks. On first start the tenant ``public`` and the
namespace ``public/default`` are created, as in Pulsar's standalone. The data directory is locked
first (node/data_dir_lock.py): a second standalone on it is refused in one line.

Start order: metadata store, bookie (it listens and is ready before any ledger is written),
default namespace, the broker's listeners, then the broker service. Stop runs in reverse, the
broker's graceful unload first (it seals every ledger, so a restart needs no recovery) while its
listeners still answer. A start that fails part-way stops what it had started and re-raises.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from magnetar.bookie.auth import BookieSecurity
from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.resolver import StaticBookieResolver
from magnetar.bookie.service import BookieService
from magnetar.broker.cluster.resources import ensure_default_namespace
from magnetar.broker.config import BrokerConfig
from magnetar.broker.metrics.registry import BrokerMetrics
from magnetar.broker.service import BrokerService
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.node.data_dir_lock import DataDirLock
from magnetar.node.lifecycle import Node
from magnetar.node.listeners import BrokerListeners
from magnetar.node.ports import binding

log = logging.getLogger(__name__)

STANDALONE_BOOKIE_ID = "standalone-bookie"


@dataclass(slots=True)
class StandaloneConfig:
    data_dir: Path
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    bookie_port: int = 3181
    journal: bool | None = None  # the bookie's journal (bookie/journal.py); None: on unless MAGNETAR_BOOKIE_JOURNAL=0
    cluster: str = "standalone"  # Pulsar's clusterName: the tenant public's allowed cluster


class Standalone(Node):
    def __init__(self, config: StandaloneConfig) -> None:
        self.config = config
        self.store: LmdbMetadataStore | None = None
        self.bookie: BookieService | None = None
        self.broker: BrokerService | None = None
        self.listeners: BrokerListeners | None = None
        self.lock = DataDirLock(config.data_dir)

    async def _start(self) -> None:
        data = self.config.data_dir
        self.lock.acquire()  # creates the directory
        self.store = await LmdbMetadataStore.open(data / "metadata")
        bookie_registry = CollectorRegistry()
        bookie = BookieService(
            data / "bookie",
            host=self.config.broker.host,
            port=self.config.bookie_port,
            bookie_id=STANDALONE_BOOKIE_ID,
            store=self.store,
            registry=bookie_registry,
            autorecovery=False,  # one bookie: there is nowhere to re-replicate to
            security=bookie_security(self.config.broker),
            journal=self.config.journal,
        )
        with binding(self.config.bookie_port, "bookie"):
            await bookie.start()  # a failed start closes what it opened
        self.bookie = bookie
        resolver = StaticBookieResolver({STANDALONE_BOOKIE_ID: LocalBookieClient(bookie.storage, STANDALONE_BOOKIE_ID)})
        ledgers = LedgerManager(self.store, resolver)
        self.broker = BrokerService(self.config.broker, self.store, ledgers, BrokerMetrics())
        self.broker.extra_registries = [bookie_registry]
        self.broker.cluster = self.config.cluster
        await self._ensure_defaults()
        self.listeners = BrokerListeners(self.broker)
        await self.listeners.start()
        await self.broker.start()

    async def _ensure_defaults(self) -> None:
        assert self.broker is not None
        await ensure_default_namespace(self.broker.resources, self.config.cluster, self.broker.bundles)

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
        if self.listeners is not None:
            await self.listeners.stop()
        if self.bookie is not None:
            await self.bookie.stop()
        if self.store is not None:
            await self.store.close()
        self.lock.release()


def bookie_security(broker: BrokerConfig) -> BookieSecurity:
    """The embedded bookie's port asks for what the broker asks for: a token of the same key."""
    if not broker.authentication_enabled or not (broker.token_secret_key or broker.token_public_key):
        return BookieSecurity()
    return BookieSecurity(
        authentication_enabled=True,
        token_secret_key=broker.token_secret_key,
        token_public_key=broker.token_public_key,
        token_public_alg=broker.token_public_alg,
        token_auth_claim=broker.token_auth_claim,
        super_user_roles=list(broker.super_user_roles),
    )
