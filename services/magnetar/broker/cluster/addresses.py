"""Where this broker is reached: the ports its node bound, and the URLs it advertises.

The node binds the client and admin listeners (and their TLS twins) before the service starts and
reports their ports (``listening``); the URLs a broker registers, and a standalone answers its
lookups with (``own_lookup_urls``, through its advertised listeners), follow from them and from
``advertisedAddress``. ``BrokerService`` is a ``BrokerAddresses``: these depend on nothing the
service loads or owns, so they are kept apart from its topics and bundle ownership.
"""

from __future__ import annotations

from magnetar.broker.cluster.advertised_listeners import choose, internal_listener
from magnetar.broker.config import BrokerConfig


class BrokerAddresses:
    """A broker's bound ports and advertised URLs (module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self._port: int | None = None
        self._web_port: int | None = None
        self.port_tls: int | None = None  # the TLS listeners' ports, when there are any
        self.web_port_tls: int | None = None

    def listening(self, port: int, web_port: int, port_tls: int | None = None, web_port_tls: int | None = None) -> None:
        """Record the bound service and admin ports (the node binds them before ``start``), and
        the TLS ones when the node has TLS listeners (``node/tls.py``)."""
        self._port = port
        self._web_port = web_port
        self.port_tls = port_tls
        self.web_port_tls = web_port_tls

    @property
    def broker_url_tls(self) -> str | None:
        """``magnetar+ssl://host:port`` of the TLS listener (Pulsar's brokerServiceUrlTls), if any."""
        port_tls = self.port_tls
        return None if port_tls is None else f"magnetar+ssl://{self.config.advertised_host}:{port_tls}"

    @property
    def web_url_tls(self) -> str | None:
        web_port_tls = self.web_port_tls
        return None if web_port_tls is None else f"https://{self.config.advertised_host}:{web_port_tls}"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the broker's service port is not bound yet")
        return self._port

    @property
    def broker_url(self) -> str:
        if self.port_tls is not None and self.port_tls == self.port:  # TLS only (node/listeners.py)
            return f"magnetar+ssl://{self.config.advertised_host}:{self.port}"
        return f"magnetar://{self.config.advertised_host}:{self.port}"

    @property
    def web_port(self) -> int:
        if self._web_port is None:
            raise RuntimeError("the broker's admin port is not bound yet")
        return self._web_port

    @property
    def web_url(self) -> str:
        if self.web_port_tls is not None and self.web_port_tls == self.web_port:  # HTTPS only
            return f"https://{self.config.advertised_host}:{self.web_port}"
        return f"http://{self.config.advertised_host}:{self.web_port}"

    def own_lookup_urls(self, listener_name: str | None) -> tuple[str, str | None]:
        """A standalone's answer: its own listener's URLs (``advertised_listeners``)."""
        listeners = self.config.advertised_listeners
        internal = internal_listener(listeners, self.config.internal_listener_name)
        return choose(
            f"{self.config.advertised_host}:{self.port}",
            self.broker_url,
            self.broker_url_tls,
            listeners,
            internal,
            listener_name,
        )
