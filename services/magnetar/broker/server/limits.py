"""Limits against abuse on the binary protocol (WIRE.md R87-R91).

An unauthenticated or misbehaving peer must not be able to exhaust a broker. The limits, with
Pulsar's broker.conf names where Pulsar has the setting:

- ``brokerMaxConnections`` / ``brokerMaxConnectionsPerIp`` (Pulsar's; 0 = unlimited, the
  default): a connection over either is answered with one ``ServiceNotReady`` error frame and
  closed as soon as it is accepted, before a single byte of it is read, so refusing costs an
  ``accept`` and a ``close``.
- ``maxProducersPerConnection`` / ``maxConsumersPerConnection`` (Magnetar's: Pulsar limits per
  topic and per subscription, not per connection; 0 = unlimited): the producer (consumer) over
  the limit is refused with ``ProducerBusy`` (``ConsumerBusy``); the connection and its other
  producers and consumers carry on.
- ``maxConcurrentLookupRequest`` (Pulsar's, default 50000): lookups and partitioned-metadata
  requests in flight on this broker at once. One over it is answered at once with
  ``ServiceNotReady`` "Failed due to too many pending lookup requests" (Pulsar's
  ``TooManyRequests``); the client retries it as any retryable error.
- ``preAuthenticationMaxFrameSize`` and ``preAuthenticationTimeoutSeconds`` (Magnetar's; Pulsar
  has neither): while authentication is on, a connection that has not yet sent an authenticated
  ``connect`` may send frames of at most 64 KiB (a connect with a token is well under 8 KiB), so
  a stranger cannot make the broker buffer 5 MiB per connection, and is closed with
  ``AuthenticationError`` when no authenticated ``connect`` came within 30 s. With
  authentication off anyone may connect anyway, so neither applies (and nothing changes).

``limits_for(service)`` keeps one ``BrokerLimits`` per broker (the counters of every listener);
``ConnectionGuard`` is one connection's share of it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError, ConsumerBusy, ProducerBusy, ServiceNotReady
from magnetar.protocol.framing import encode_frame

TOO_MANY_LOOKUPS = "Failed due to too many pending lookup requests"


class BrokerLimits:
    """The broker-wide counters: connections (in all, per address) and lookups in flight."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.connections = 0
        self.per_ip: Counter[str] = Counter()
        self.pending_lookups = 0
        self.refused_connections = 0

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; the reason it is refused, or None when admitted."""
        cfg = self.config
        if cfg.broker_max_connections > 0 and self.connections >= cfg.broker_max_connections:
            self.refused_connections += 1
            return f"Reached the maximum number of connections ({cfg.broker_max_connections})"
        if cfg.broker_max_connections_per_ip > 0 and self.per_ip[ip] >= cfg.broker_max_connections_per_ip:
            self.refused_connections += 1
            return f"Reached the maximum number of connections from {ip} ({cfg.broker_max_connections_per_ip})"
        self.connections += 1
        self.per_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.connections -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]

    def lookup_started(self) -> None:
        """Take a lookup slot, or raise ``ServiceNotReady`` (Pulsar's TooManyRequests)."""
        limit = self.config.max_concurrent_lookup_request
        if limit > 0 and self.pending_lookups >= limit:
            raise ServiceNotReady(TOO_MANY_LOOKUPS)
        self.pending_lookups += 1

    def lookup_done(self) -> None:
        self.pending_lookups -= 1


_BUILT: weakref.WeakKeyDictionary[object, BrokerLimits] = weakref.WeakKeyDictionary()


def limits_for(owner: object, config: BrokerConfig) -> BrokerLimits:
    """The limits of the broker ``owner``, made on first use and kept as long as it."""
    try:
        return _BUILT[owner]
    except KeyError:
        built = _BUILT[owner] = BrokerLimits(config)
        return built


class ConnectionGuard:
    """One connection's limits: admission, the pre-authentication frame cap and timeout, and its
    producer and consumer counts."""

    def __init__(self, limits: BrokerLimits, authenticating: bool, fail: Callable[[str, str], None]) -> None:
        """``authenticating``: authentication is on; ``fail(code, reason)`` closes the connection."""
        self.limits = limits
        self.authenticating = authenticating
        self._fail = fail
        self._ip: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._creating_producers = 0
        self._creating_consumers = 0

    @property
    def pre_auth_frame_size(self) -> int | None:
        """The frame cap until an authenticated ``connect`` (None: no separate cap)."""
        return self.limits.config.pre_authentication_max_frame_size if self.authenticating else None

    def on_accept(self, transport: asyncio.Transport) -> bool:
        """Admit the new connection or close it at once with one error frame (False)."""
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        refused = self.limits.admit(ip)
        if refused is not None:
            transport.write(encode_frame(c.error_frame(None, str(ServiceNotReady.code), refused)))
            transport.close()
            return False
        self._ip = ip
        timeout = self.limits.config.pre_authentication_timeout_seconds
        if self.authenticating and timeout > 0:
            self._timer = asyncio.get_running_loop().call_later(timeout, self._timed_out, timeout)
        return True

    def _timed_out(self, timeout: float) -> None:
        self._timer = None
        self._fail(
            str(AuthenticationError.code),
            f"Authentication required: no authenticated connect within {timeout:g} seconds",
        )

    def on_authenticated(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def on_lost(self) -> None:
        self.on_authenticated()
        if self._ip is not None:
            self.limits.release(self._ip)
            self._ip = None

    # Producers and consumers being created count too, so that many ``producer`` commands sent at
    # once cannot all pass the check before the first one is added.
    def check_producer(self, open_producers: int) -> None:
        limit = self.limits.config.max_producers_per_connection
        if limit > 0 and open_producers + self._creating_producers >= limit:
            raise ProducerBusy(f"Connection reached max producers limit ({limit})")

    def check_consumer(self, open_consumers: int) -> None:
        limit = self.limits.config.max_consumers_per_connection
        if limit > 0 and open_consumers + self._creating_consumers >= limit:
            raise ConsumerBusy(f"Connection reached max consumers limit ({limit})")

    def counting_producer(self, create: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
        """``create`` (a producer's creation), counted as a producer until it is done."""
        self._creating_producers += 1

        async def run() -> None:
            try:
                await create
            finally:
                self._creating_producers -= 1

        return run()

    def counting_consumer(self, create: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
        """``create`` (a consumer's subscribe), counted as a consumer until it is done."""
        self._creating_consumers += 1

        async def run() -> None:
            try:
                await create
            finally:
                self._creating_consumers -= 1

        return run()
