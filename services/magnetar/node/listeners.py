"""The broker's listeners.

``BrokerListeners`` binds the client TCP server (one ``ServerConnection`` per client) and the
admin HTTP server for a ``BrokerService``, then tells the service its bound ports. It is started
before the service (a cluster broker registers its URLs) and stopped after the service's graceful
unload, which needs both listeners open: clients told to look their topics up again may still
ask this broker, and admin requests are still answered (and forwarded) meanwhile.

A taken port raises ``ports.PortInUse`` (naming the port and the listener) instead of the
``OSError``, so the command line can say so in one line.
"""

from __future__ import annotations

import asyncio

from magnetar.broker.admin import AdminServer
from magnetar.broker.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.node.ports import binding


class BrokerListeners:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._server: asyncio.Server | None = None
        self._admin: AdminServer | None = None

    async def start(self) -> None:
        """Bind both listeners on the configured ports and tell the service the bound ones."""
        service, config = self.service, self.service.config
        loop = asyncio.get_running_loop()
        with binding(config.port, "service"):
            self._server = await loop.create_server(
                lambda: ServerConnection(service), config.host, config.port, reuse_address=True
            )
        self._admin = AdminServer(service)
        with binding(config.web_port, "admin"):
            await self._admin.start(config.host, config.web_port)
        port: int = self._server.sockets[0].getsockname()[1]
        service.listening(port, self._admin.port)

    async def stop(self) -> None:
        """After the service's graceful stop: accept no more clients, close the remaining
        connections, then stop the admin server."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.service.close_connections()
        if self._admin is not None:
            await self._admin.stop()
            self._admin = None
