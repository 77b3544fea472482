"""``BookieService``: one bookie process — cookie check, storage, TCP server, registration.

The start order is the safety argument. The cookie is verified before the storage is opened, so
a bookie refused for a wiped disk leaves the directory as it found it. The server registers in
``/bookies/available`` only after it listens, so nobody is sent to a port that refuses. Stop runs
in reverse: deregister first (no new ensembles pick this bookie), then close connections, then
let the writer thread finish every queued add before the environment closes.

A background task re-checks disk usage every ``disk_check_interval`` seconds (adds also check,
at most once a second, and a commit that hits ENOSPC turns the bookie read-only at once), and the
registration is republished as soon as the storage enters or leaves read-only mode.

``scrub_interval`` > 0 runs the scrubber (``scrub.py``): a periodic checksum walk whose findings are
repaired through auto-recovery. If the storage finds its index broken, the service deregisters and
stops serving (the storage refuses every call and the next start), so the cluster treats the
bookie as lost and re-replicates its ledgers.

Auto-recovery (``autorecovery``, on by default when there is a metadata store): every bookie
process runs an auditor candidate (``autorecovery/auditor.py``; one is elected cluster-wide) and a
replication worker (``autorecovery/replication.py``), so the cluster repairs itself with no extra
service to deploy. They
start after the bookie registered (the auditor must not see its own bookie as lost) and stop
before it deregisters, the auditor resigning so another candidate takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from magnetar.bookie.auth import BookieSecurity
from magnetar.bookie.autorecovery.auditor import DEFAULT_GRACE_PERIOD, DEFAULT_RECHECK_INTERVAL, Auditor
from magnetar.bookie.autorecovery.replication import (
    DEFAULT_COPY_CONCURRENCY,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_RETRY_DELAY,
    ReplicationWorker,
)
from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.cookie import Cookie, read_local_cookie, verify_cookie
from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.metrics import BookieMetrics
from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.bookie.scrub import Scrubber, verify_before_serving
from magnetar.bookie.server import BookieServer
from magnetar.bookie.storage import BookieStorage
from magnetar.metadata.store import MetadataStore

log = logging.getLogger(__name__)
DEFAULT_READONLY_THRESHOLD = 0.95


@dataclass(frozen=True, slots=True)
class AutoRecoveryOptions:
    """Timings of the auditor and the replication worker (short ones make tests fast)."""

    grace_period: float = DEFAULT_GRACE_PERIOD  # a lost bookie may come back this long for free
    recheck_interval: float = DEFAULT_RECHECK_INTERVAL  # full audit of every ledger
    poll_interval: float = DEFAULT_POLL_INTERVAL  # workers look for work even without a watch event
    retry_delay: float = DEFAULT_RETRY_DELAY  # before a worker retries a ledger whose repair failed
    copy_concurrency: int = DEFAULT_COPY_CONCURRENCY  # entries in flight per fragment copy


class BookieService:
    """``bookie_id=None`` reuses the id in the data directory's cookie, or makes a new one
    (``bookie-<8 hex>``) on first start; clusters should pass a stable id (the pod name)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        bookie_id: str | None = None,
        store: MetadataStore | None = None,
        readonly_threshold: float | None = DEFAULT_READONLY_THRESHOLD,
        *,
        reprovision: bool = False,
        sync: bool = True,
        journal: bool | None = None,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        disk_check_interval: float = 10.0,
        registry: CollectorRegistry | None = None,
        autorecovery: bool | None = None,
        autorecovery_options: AutoRecoveryOptions | None = None,
        security: BookieSecurity | None = None,
        client_security: BookieClientSecurity | None = None,
        scrub_interval: float = 0.0,
    ) -> None:
        """``security``: who may use this bookie and TLS on its port (bookie/auth.py);
        ``client_security``: what autorecovery sends to the other bookies (its own credentials)."""
        self.security = security or BookieSecurity()
        self.client_security = client_security or BookieClientSecurity()
        # Built now so that a bad key or TLS file stops the process before anything is opened.
        self._authenticator = self.security.authenticator()
        self._ssl_context = self.security.ssl_context()
        self.data_dir = Path(data_dir)
        self.host = host
        self._port = port
        if bookie_id is None:
            existing = read_local_cookie(self.data_dir)
            bookie_id = existing.bookie_id if existing else f"bookie-{uuid.uuid4().hex[:8]}"
        self.bookie_id = bookie_id
        self.store = store
        self.readonly_threshold = readonly_threshold
        self._reprovision = reprovision
        self._sync = sync
        self._journal = journal
        self._advertised_host = advertised_host
        self._advertised_port = advertised_port
        self._disk_check_interval = disk_check_interval
        self._metrics = BookieMetrics.for_registry(registry).bind(bookie_id)
        self.cookie: Cookie | None = None
        self._storage: BookieStorage | None = None
        self._server: BookieServer | None = None
        self._disk_task: asyncio.Task[None] | None = None
        if autorecovery and store is None:
            raise ValueError("autorecovery needs a metadata store")
        self.autorecovery = store is not None if autorecovery is None else autorecovery
        self._recovery_options = autorecovery_options or AutoRecoveryOptions()
        self.auditor: Auditor | None = None
        self.replication: ReplicationWorker | None = None
        self._resolver: MetadataBookieResolver | None = None
        self.scrub_interval = scrub_interval
        self.scrubber: Scrubber | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def storage(self) -> BookieStorage:
        if self._storage is None:
            raise RuntimeError("the bookie service is not started")
        return self._storage

    @property
    def port(self) -> int:
        """The bound port once started (useful with port 0)."""
        return self._server.port if self._server is not None else self._port

    def local_client(self) -> LocalBookieClient:
        """An in-process client of this bookie (standalone mode: no TCP hop)."""
        return LocalBookieClient(self.storage, self.bookie_id)

    async def start(self) -> None:
        self.cookie = await verify_cookie(self.data_dir, self.bookie_id, self.store, reprovision=self._reprovision)
        self._storage = await asyncio.to_thread(
            BookieStorage,
            self.data_dir,
            sync=self._sync,
            journal=self._journal,
            readonly_threshold=self.readonly_threshold,
            metrics=self._metrics,
        )
        if self.scrub_interval > 0 and self._storage.unclean:
            try:
                await verify_before_serving(self._storage)  # a crash may have been the index's doing
            except BaseException:
                await self._storage.close()
                raise
        self._server = BookieServer(
            self._storage,
            bookie_id=self.bookie_id,
            host=self.host,
            port=self._port,
            store=self.store,
            advertised_host=self._advertised_host,
            advertised_port=self._advertised_port,
            authenticator=self._authenticator,
            ssl_context=self._ssl_context,
        )
        try:
            await self._server.start()
        except BaseException:
            await self._storage.close()
            raise
        self._storage.mode_listener = lambda _read_only: self._in_background(self.check_disk())
        self._storage.failure_listener = lambda reason: self._in_background(self._stop_serving(reason))
        self._disk_task = asyncio.get_running_loop().create_task(self._watch_disk())
        if self.scrub_interval > 0:
            self.scrubber = Scrubber(
                self._storage, self.bookie_id, interval=self.scrub_interval, store=self.store, metrics=self._metrics
            )
            await self.scrubber.start()
        if self.autorecovery and self.store is not None:
            await self._start_autorecovery(self.store)

    async def _start_autorecovery(self, store: MetadataStore) -> None:
        opts = self._recovery_options
        self._resolver = MetadataBookieResolver(store, security=self.client_security)
        self.auditor = Auditor(
            store,
            self.bookie_id,
            grace_period=opts.grace_period,
            recheck_interval=opts.recheck_interval,
            metrics=self._metrics,
        )
        self.replication = ReplicationWorker(
            store,
            self._resolver,
            self.bookie_id,
            poll_interval=opts.poll_interval,
            retry_delay=opts.retry_delay,
            copy_concurrency=opts.copy_concurrency,
            metrics=self._metrics,
        )
        await self.auditor.start()
        await self.replication.start()

    async def _stop_autorecovery(self) -> None:
        if self.replication is not None:
            await self.replication.stop()
            self.replication = None
        if self.auditor is not None:
            await self.auditor.stop()
            self.auditor = None
        if self._resolver is not None:
            await self._resolver.close()
            self._resolver = None

    def _in_background(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _stop_serving(self, reason: str) -> None:
        """The storage is corrupt: deregister and close the server, so nobody reads from it and
        the auditor re-replicates its ledgers after the grace period."""
        log.critical("bookie %s: storage is corrupt (%s); no longer serving", self.bookie_id, reason)
        await self._stop_autorecovery()
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop()

    async def _watch_disk(self) -> None:
        while True:
            await asyncio.sleep(self._disk_check_interval)  # a timer, not a wait for an event
            await self.check_disk()

    async def check_disk(self) -> bool:
        """Re-evaluate read-only mode now and publish a change; returns the read-only flag."""
        storage, server = self.storage, self._server
        was = storage.read_only
        now = storage.check_disk(force=True)
        if now != was:
            log.warning("bookie %s is now %s", self.bookie_id, "read-only" if now else "writable")
        if server is not None:
            try:
                await server.update_registration()
            except Exception as exc:  # metadata unavailable (or its disk full, standalone): try again on the next tick
                log.warning(
                    "bookie %s could not update its registration (tried again in %.0f s): %r",
                    self.bookie_id,
                    self._disk_check_interval,
                    exc,
                )
        return now

    async def stop(self) -> None:
        if self.scrubber is not None:
            await self.scrubber.stop()
            self.scrubber = None
        await self._stop_autorecovery()
        if self._disk_task is not None:
            self._disk_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._disk_task
            self._disk_task = None
        if self._server is not None:
            await self._server.stop()
            self._server = None
        if self._storage is not None:
            await self._storage.close()
            self._storage = None

    async def __aenter__(self) -> BookieService:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()
