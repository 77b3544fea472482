"""The broker's listeners.

``BrokerListeners`` binds the client TCP server (one ``ServerConnection`` per client) and the
admin HTTP server for a ``BrokerService``, then tells the service its bound ports. It is started
before the service (a cluster broker registers its URLs) and stopped after the service's graceful
unload, which needs both listeners open: clients told to look their topics up again may still
ask this broker, and admin requests are still answered (and forwarded) meanwhile.

A taken port raises ``ports.PortInUse`` (naming the port and the listener) instead of the
``OSError``, so the command line can say so in one line.

TLS (``node/tls.py``): with ``broker_service_port_tls`` the binary protocol is also served with
TLS on that port, and with ``web_service_port_tls`` the admin API with HTTPS, from one server
context. ``port`` / ``web_port`` None turns the plaintext listener off (TLS only); the service then
advertises the TLS listener as its only one, so lookups and admin forwarding never name a port
that is not there.
"""

from __future__ import annotations

import asyncio

from magnetar.broker.admin.server import AdminServer
from magnetar.broker.server.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.node.ports import binding
from magnetar.node.tls import server_ssl_context, tls_enabled


class BrokerListeners:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._servers: list[asyncio.Server] = []
        self._admin: AdminServer | None = None

    async def start(self) -> None:
        """Bind the listeners on the configured ports and tell the service the bound ones."""
        service, config = self.service, self.service.config
        loop = asyncio.get_running_loop()
        context = server_ssl_context(config) if tls_enabled(config) else None  # bad files fail here
        if config.port is None and config.broker_service_port_tls is None:
            raise ValueError("the broker needs a service port: brokerServicePort or brokerServicePortTls")
        port = port_tls = None
        if config.port is not None:
            with binding(config.port, "service"):
                server = await loop.create_server(
                    lambda: ServerConnection(service), config.host, config.port, reuse_address=True, start_serving=False
                )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
        if config.broker_service_port_tls is not None:
            with binding(config.broker_service_port_tls, "service-tls"):
                server = await loop.create_server(
                    lambda: ServerConnection(service),
                    config.host,
                    config.broker_service_port_tls,
                    reuse_address=True,
                    ssl=context,
                    start_serving=False,
                )
            self._servers.append(server)
            port_tls = server.sockets[0].getsockname()[1]
        self._admin = AdminServer(service)
        if config.web_port is not None:
            with binding(config.web_port, "admin"):
                await self._admin.start(config.host, config.web_port)
        if config.web_service_port_tls is not None:
            assert context is not None
            with binding(config.web_service_port_tls, "admin-tls"):
                await self._admin.start_tls(config.host, config.web_service_port_tls, context)
        web_port, web_port_tls = self._admin.port or None, self._admin.port_tls
        if web_port is None and web_port_tls is None:
            raise ValueError("the broker needs an admin port: webServicePort or webServicePortTls")
        # TLS only: the TLS listener is the one the service advertises (service.broker_url).
        service.listening(port or port_tls or 0, web_port or web_port_tls or 0, port_tls, web_port_tls)
        # Clients only now: a lookup answered before ``listening`` would have no port to advertise
        # (a client reconnecting to a restarting broker on a fixed port arrives in that window).
        for server in self._servers:
            await server.start_serving()

    async def stop(self) -> None:
        """After the service's graceful stop: accept no more clients, close the remaining
        connections, then stop the admin server."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        self.service.close_connections()
        if self._admin is not None:
            await self._admin.stop()
            self._admin = None
