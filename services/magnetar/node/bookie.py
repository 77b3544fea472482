"""A bookie process: the bookie service, its metadata session (in a cluster) and its HTTP endpoint.

The counterpart of ``node.broker.BrokerNode``: ``magnetar bookie`` builds one from its flags or
config file and runs it until a signal.

Unlike the broker's, the bookie's TCP server stays inside ``BookieService``: the bookie registers
in ``/bookies/available`` only once it listens (nobody is sent to a port that refuses) and
deregisters before it stops listening, between the cookie check and storage open before it and
auto-recovery after it — one ordering the service owns, which also lets tests run a full bookie
as a ``BookieService`` alone. The HTTP endpoint (probes, metrics) is the process's, so it is here.

Start order: the data directory's lock (node/data_dir_lock.py: a second bookie on it is refused
in one line), metadata session, bookie service, HTTP endpoint; stop in reverse. A start that fails
part-way stops what it had started and re-raises.
"""

from __future__ import annotations

from pathlib import Path

from magnetar.bookie.auth import BookieSecurity
from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.http import BookieHttpServer
from magnetar.bookie.service import BookieService
from magnetar.metadata.store import MetadataStore
from magnetar.metadata.url import open_metadata_store
from magnetar.node.data_dir_lock import DataDirLock
from magnetar.node.lifecycle import Node
from magnetar.node.ports import binding


class BookieNode(Node):
    def __init__(
        self,
        data_dir: Path,
        *,
        host: str,
        port: int,
        bookie_id: str,
        metadata_url: str | None = None,
        readonly_threshold: float = 0.95,
        reprovision: bool = False,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        sync_data: bool = True,
        journal: bool | None = None,
        http_port: int | None = None,
        security: BookieSecurity | None = None,
        client_security: BookieClientSecurity | None = None,
        scrub_interval: float = 0.0,
    ) -> None:
        """``security``: authentication and TLS of the bookie's port; ``client_security``: the
        credentials and TLS its autorecovery uses towards the other bookies (bookie/auth.py)."""
        self.security = security
        self.client_security = client_security
        self.scrub_interval = scrub_interval
        self.data_dir = data_dir
        self.host = host
        self.port = port
        self.bookie_id = bookie_id
        self.metadata_url = metadata_url
        self.readonly_threshold = readonly_threshold
        self.reprovision = reprovision
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        self.sync_data = sync_data
        self.journal = journal
        self.http_port = http_port
        self.store: MetadataStore | None = None
        self.service: BookieService | None = None
        self.http: BookieHttpServer | None = None
        self.lock = DataDirLock(data_dir)

    async def _start(self) -> None:
        self.lock.acquire()
        if self.metadata_url:
            self.store = await open_metadata_store(self.metadata_url)
        service = BookieService(
            self.data_dir,
            host=self.host,
            port=self.port,
            bookie_id=self.bookie_id,
            store=self.store,
            readonly_threshold=self.readonly_threshold,
            reprovision=self.reprovision,
            advertised_host=self.advertised_host,
            advertised_port=self.advertised_port,
            sync=self.sync_data,
            journal=self.journal,
            security=self.security,
            client_security=self.client_security,
            scrub_interval=self.scrub_interval,
        )
        with binding(self.port, "bookie"):
            await service.start()  # a failed start closes what it opened
        self.service = service
        if self.http_port is not None:
            self.http = BookieHttpServer(service)
            with binding(self.http_port, "http"):
                await self.http.start(self.host, self.http_port)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self.service is not None:
            await self.service.stop()
        if self.store is not None:
            await self.store.close()
        self.lock.release()

    def banner(self) -> str:
        assert self.service is not None
        http = f" http {self.host}:{self.http.port}" if self.http is not None else ""
        return f"magnetar bookie {self.bookie_id} ready on {self.host}:{self.service.port} data {self.data_dir}{http}"
