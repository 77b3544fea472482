"""A bookie's HTTP endpoint: ``/health``, ``/ready`` and ``/metrics`` for probes and Prometheus.

Health means the process serves HTTP; readiness means the bookie's storage is open and its
server is listening, and it stays ready while read-only (reads are still served) but reports the
mode in the body, so a rolling restart can tell a sick bookie from a full one.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from magnetar.bookie.service import BookieService


class BookieHttpServer:
    def __init__(self, service: BookieService, registry: CollectorRegistry | None = None) -> None:
        self.service = service
        self.registry = registry or REGISTRY
        self.app = web.Application()
        self.app.router.add_get("/health", self._health)
        self.app.router.add_get("/ready", self._ready)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        try:
            storage = self.service.storage
            port = self.service.port
        except Exception as exc:  # not started yet
            return web.Response(text=f"not ready: {exc}", status=503)
        mode = "read-only" if storage.read_only else "writable"
        return web.Response(text=f"ok {mode} port {port}")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
