"""The asyncio client's brokers: connections, the cluster in use, topic lookup, partition counts.

``LookupClient`` is the part of ``aio.Client`` that talks to brokers before a producer or consumer
exists, and what every producer and consumer asks of its client afterwards (``operation_timeout``,
``lookup``, ``new_backoff``...). The client keeps one connection per broker URL (the service URL's
brokers and every broker a lookup points to), shared by all its producers and consumers, opened
once even when many ask at once. A topic is looked up on any broker of the service URL, starting
from the last one that answered, following ``redirect`` answers for a bounded number of hops; an
``http(s)://`` service URL asks the admin API instead (``net.http_lookup``). At most
``concurrent_lookup_requests`` lookups are in flight. Retryable errors are retried with backoff
until the operation timeout (``_retrying``).

A ``ServiceInfoProvider`` (``net.service_info``) may switch the client to another cluster at any
time: new lookups go there and the open connections are closed, so producers and consumers look
their topics up again. Partitioned producers and consumers re-read their partition counts every
``partitions_update_interval`` seconds (``_start_partition_updates``).

The state is set up by ``aio.Client.__init__`` (the public constructor, with every option); the
declarations below say what this part uses of it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from magnetar.client.config.client import ClientSettings
from magnetar.client.net.auth import Authentication
from magnetar.client.net.connect_deadline import as_connect_error, give_up_at
from magnetar.client.net.connection import Connection
from magnetar.client.net.reconnect import Backoff
from magnetar.client.net.service_info import ServiceInfo, ServiceInfoProvider, check_update
from magnetar.client.net.service_target import ServiceTarget, TlsSettings
from magnetar.client.net.service_url import is_tls_url, normalize_url
from magnetar.client.partition_updates import PartitionsUpdater
from magnetar.client.schema_codec import WriterSchemas
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import (
    AlreadyClosed,
    MagnetarError,
    NotConnected,
    RetryableError,
    ServiceNotReady,
    Timeout,
)
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import SchemaInfo

__all__ = ["LookupClient", "is_closing"]

log = logging.getLogger("magnetar.client.aio")
T = TypeVar("T")


class LookupClient:
    """Connections, cluster, lookup and partition counts of one asyncio client (see the module docstring)."""

    # Set by ``aio.Client.__init__``.
    _settings: ClientSettings
    _provider: ServiceInfoProvider | None
    _tls_settings: TlsSettings
    _default_auth: Authentication | None
    _pending_info: ServiceInfo | None  # pushed by the provider, applied on the loop
    _loop: asyncio.AbstractEventLoop | None
    _loop_lock: threading.Lock  # orders a provider's update against the loop's start
    _op_timeout: float
    _connect_timeout: float
    _max_redirects: int
    _backoff: tuple[float, float]
    _keep_alive: float
    _conns: dict[str, asyncio.Future[Connection]]
    _ids: itertools.count[int]
    _partitions_update_interval: float
    _updaters: set[PartitionsUpdater]
    _writer_schemas: WriterSchemas
    _closed: bool
    # The wait between attempts; tests swap in a recorder instead of sleeping for real.
    _sleep: Callable[[float], Awaitable[None]]

    # ---------------------------------------------------------------- which cluster (net.service_info)

    def _apply_target(self, target: ServiceTarget) -> None:
        """Dial ``target``'s brokers (or ask its HTTP lookup) from now on."""
        self._target = target
        self._tls = target.tls
        self._service_urls = target.service_urls
        self._ssl = target.ssl_context
        self._auth = target.auth
        self._service_index = 0

    def get_service_info(self) -> ServiceInfo:
        """The ``ServiceInfo`` of the cluster this client uses now (pulsar-client 3.x's ``get_service_info``)."""
        return self._target.info

    def _on_service_info(self, info: ServiceInfo) -> None:
        """The provider's update callback; any thread may call it (``ValueError`` for anything but a
        ``ServiceInfo``). Until the client's loop has started, as from ``initialize`` in the
        constructor, nothing runs on it yet and the switch is made here and now; after, on the loop."""
        check_update(info)
        with self._loop_lock:
            self._pending_info = info
            loop = self._loop
            if loop is None:
                self._switch_service()
                return
        if not loop.is_closed():
            loop.call_soon_threadsafe(self._switch_service)

    def _switch_service(self) -> None:
        """Switch to the provider's latest ``ServiceInfo``: new lookups go there, open connections are closed."""
        info, self._pending_info = self._pending_info, None
        if info is None or self._closed or info == self._target.info:
            return
        try:
            target = ServiceTarget.resolve(
                info, self._tls_settings, default_auth=self._default_auth, timeout=self._op_timeout
            )
        except (MagnetarError, ValueError, OSError) as exc:
            log.error("cannot switch to %r: %s", info, exc)
            return
        log.info("switching from %s to %s", self._target.info.service_url, info.service_url)
        self._apply_target(target)
        conns = [f.result() for f in self._conns.values() if f.done() and not f.cancelled() and f.exception() is None]
        self._conns.clear()
        for conn in conns:  # producers and consumers reconnect, looking their topics up on the new cluster
            conn.close()

    def _on_loop(self) -> None:
        """First use on the client's loop: start the statistics; provider updates go to the loop from now on."""
        if self._loop is not None:
            return
        with self._loop_lock:
            self._loop = asyncio.get_running_loop()
        self._settings.on_loop()

    @property
    def message_listener_threads(self) -> int:
        """pulsar-client's ``message_listener_threads``: the size of the listener pool."""
        return self._settings.message_listener_threads

    @property
    def listener_name(self) -> str | None:
        return self._settings.listener_name

    # ---------------------------------------------------------------- what producers and consumers use

    @property
    def operation_timeout(self) -> float:
        return self._op_timeout

    @property
    def connect_timeout(self) -> float:
        return self._connect_timeout

    def next_id(self) -> int:
        """A producer/consumer id, unique on every connection of this client (one per registration)."""
        return next(self._ids)

    def new_backoff(self) -> Backoff:
        return Backoff(*self._backoff)

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    # ---------------------------------------------------------------- connections and lookup

    async def _connection(self, url: str) -> Connection:
        """The pooled connection to ``url``, opened (once, even if many ask at once) when needed."""
        if self._closed:
            raise AlreadyClosed("client is closed")
        if self._loop is None:
            self._on_loop()
        if self._pending_info is not None:
            self._switch_service()
        key = normalize_url(url)
        fut = self._conns.get(key)
        if fut is not None:
            if not fut.done():
                return await asyncio.shield(fut)
            if not fut.cancelled() and fut.exception() is None and not fut.result().closed:
                return fut.result()
        fut = asyncio.get_running_loop().create_future()
        self._conns[key] = fut
        try:
            conn = await Connection.open(
                key,
                operation_timeout=self._op_timeout,
                connect_timeout=self._connect_timeout,
                keep_alive_interval=self._keep_alive,
                ssl_context=self._ssl,
                auth=self._auth,
            )
        except asyncio.CancelledError:
            fut.cancel()
            self._conns.pop(key, None)
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the caller gets it raised below
            self._conns.pop(key, None)
            raise
        fut.set_result(conn)
        return conn

    async def _service_connection(self) -> Connection:
        """A connection to any broker of the service URL: the last one that worked first, then the others."""
        urls = self._service_urls
        last: MagnetarError | None = None
        for i in range(len(urls)):
            index = (self._service_index + i) % len(urls)
            try:
                conn = await self._connection(urls[index])
            except (NotConnected, Timeout) as exc:
                last = exc
                continue
            self._service_index = index
            return conn
        assert last is not None
        raise last

    async def lookup(self, topic: str) -> Connection:
        """Find the broker serving ``topic``: ask, follow redirects (a bounded number), return its connection.

        ``redirect: true`` names a broker to ask again; ``redirect: false`` names the owner. A
        redirect loop longer than ``max_lookup_redirects`` raises ``ServiceNotReady``, which is
        retryable: ownership may be moving, and the caller's backoff loop asks again later.
        """
        async with self._lookup_slot():
            http = self._target.http
            if http is not None:  # an http(s):// service URL: the owner over the admin API (http_lookup.py)
                found = await http.lookup(topic, self._settings.listener_name)
                return await self._connection(str((self._tls and found.get("broker_url_tls")) or found["broker_url"]))
            conn = await self._service_connection()
            for _ in range(self._max_redirects + 1):
                answer: cmds.LookupResponse = await conn.request(
                    cmds.lookup(topic, listener_name=self._settings.listener_name)  # R110
                )
                target = await self._connection(self._answered_url(answer, conn))
                if not answer.get("redirect"):
                    return target
                conn = target
        raise ServiceNotReady(f"lookup of {topic} was redirected more than {self._max_redirects} times")

    def _lookup_slot(self) -> asyncio.Semaphore:
        """One of the ``concurrent_lookup_requests`` slots; first starts what needs the loop, or switches cluster."""
        if self._loop is None:
            self._on_loop()
        if self._pending_info is not None:
            self._switch_service()
        return self._settings.lookup_slots

    def _answered_url(self, answer: cmds.LookupResponse, asked: Connection) -> str:
        """The URL to dial for a lookup answer: its ``broker_url_tls`` when this client uses TLS.

        A broker that has no TLS listener answers no ``broker_url_tls``; a TLS client then keeps
        to TLS and asks the same broker again when the answer names the broker it asked (a
        standalone, or a broker older than R65), and otherwise refuses to fall back to plaintext
        by dialling the plaintext address with TLS, which fails with a clear ``ConnectError``.
        """
        plain = str(answer.get("broker_url") or asked.url)
        if not self._tls:
            return plain
        tls_url = answer.get("broker_url_tls")
        if tls_url:
            return str(tls_url)
        if is_tls_url(plain):
            return plain
        if not answer.get("redirect"):
            return asked.url
        return "magnetar+ssl://" + plain.split("://", 1)[-1]

    async def _partitions(self, topic: TopicName) -> int:
        """How many partitions ``topic`` has, retrying retryable errors until the operation timeout."""
        if topic.partition_index >= 0:
            return 0  # a single partition named directly

        async def ask() -> int:
            async with self._lookup_slot():
                if self._target.http is not None:
                    return await self._target.http.partitions(str(topic))
                conn = await self._service_connection()
                answer: cmds.PartitionedMetadataResponse = await conn.request(cmds.partitioned_metadata(str(topic)))
            return int(answer.get("partitions") or 0)

        return await self._retrying(ask, f"partition metadata of {topic}")

    async def _retrying(self, ask: Callable[[], Awaitable[T]], what: str) -> T:
        """``ask()``, again with backoff after each retryable error, until the operation timeout."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self._op_timeout
        backoff = self.new_backoff()
        while True:
            try:
                return await ask()
            except RetryableError as exc:
                delay = backoff.next()
                if loop.time() + delay >= give_up_at(exc, started, deadline, self._connect_timeout):
                    error = as_connect_error(exc)  # connect_deadline.py: ConnectError, as Pulsar's
                    if error is exc:
                        raise
                    raise error from exc
                log.info("%s: %s; retrying in %.3fs", what, exc, delay)
                await self.sleep(delay)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition topic names of ``topic`` (itself when it is not partitioned)."""
        name = TopicName.parse(topic)
        n = await self._partitions(name)
        return [str(name.partition(i)) for i in range(n)] if n else [str(name)]

    async def _fetch_schema(self, topic: str, version: int | None) -> tuple[int, SchemaInfo]:
        """One version of ``topic``'s schema (None: the newest) from its owner (``get_schema``, R121)."""

        async def ask() -> tuple[int, SchemaInfo]:
            conn = await self.lookup(topic)
            answer: cmds.GetSchemaResponse = await conn.request(cmds.get_schema(topic, version))
            return int(answer["version"]), SchemaInfo.from_wire(answer["schema"])

        return await self._retrying(ask, f"schema version {version} of {topic}")

    async def get_schema_info(self, topic: str, version: int | None = None) -> SchemaInfo:
        """Version ``version`` of ``topic``'s schema (None: the newest live one), as pulsar-client's
        ``_pulsar.Client.get_schema_info``; ``TopicNotFound`` when there is no such version."""
        if not isinstance(topic, str):
            raise ValueError(f"Argument topic is expected to be of type 'str' and not '{type(topic).__name__}'")
        name = TopicName.parse(topic)
        if version is None:
            return (await self._fetch_schema(str(name), None))[1]
        key = name.partitioned_base.path
        return await self._writer_schemas.load(str(name), key, int(version))

    def _targets(self, name: TopicName, partitions: int) -> list[tuple[str, int]]:
        if partitions == 0:
            return [(str(name), name.partition_index)]
        return [(str(name.partition(i)), i) for i in range(partitions)]

    async def _topics_of_namespace(self, namespace: str, mode: str = cmds.TOPICS_PERSISTENT) -> list[str]:
        """The topics of ``tenant/namespace`` in ``mode``'s domains (a partitioned one once, by its own name)."""

        async def ask() -> list[str]:
            if self._target.http is not None:
                return await self._target.http.topics_of_namespace(namespace, mode)
            conn = await self._service_connection()
            answer: cmds.TopicsOfNamespaceResponse = await conn.request(
                cmds.get_topics_of_namespace(namespace, mode=mode)
            )
            return [str(t) for t in answer.get("topics") or ()]

        return await self._retrying(ask, f"topics of {namespace}")

    @staticmethod
    async def _create_all(coros: list[Any]) -> list[Any]:
        """Run per-partition creations together; if any fails, close those that succeeded."""
        results = await asyncio.gather(*coros, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for r in results:
                if not isinstance(r, BaseException):
                    try:
                        await r.close()
                    except MagnetarError as exc:
                        log.debug("cleanup after failed create: %s", exc)
            raise errors[0]
        return list(results)

    # ---------------------------------------------------------------- added partitions

    def _start_partition_updates(self, what: str, update: Callable[[], Awaitable[None]], owner: object) -> None:
        """Re-read partition counts for a producer or consumer every ``partitions_update_interval``."""
        if self._partitions_update_interval <= 0:
            return
        updater = PartitionsUpdater(what, self._partitions_update_interval, update, lambda: is_closing(owner))
        self._updaters.add(updater)
        updater.start(on_done=self._updaters.discard)


def is_closing(owner: object) -> bool:
    """Whether a producer or consumer is closing (or closed): its background work should stop."""
    return bool(getattr(owner, "_closing", False))
