"""The asyncio client (``magnetar.asyncio``): ``Client``, producers, consumers.

    async with Client("magnetar://127.0.0.1:6650") as client:
        producer = await client.create_producer("my-topic")
        receipt = await producer.send_async(b"hello")     # pipelined: queued, not yet durable
        msg_id = await receipt                              # durable
        consumer = await client.subscribe("my-topic", "my-sub")
        async for msg in consumer:
            await consumer.acknowledge(msg)

The client keeps one connection per broker URL (the service URL's brokers and every broker a
lookup points to), shared by all its producers and consumers. Before a producer or consumer is
created the topic is looked up (following ``redirect`` answers for a bounded number of hops) and,
for a partitioned topic, one partition producer/consumer is created per partition on the broker
that owns it. Each of them stays attached to its topic's owner on its own (``net.reconnect``): when
a connection drops or the broker hands the topic over, it looks the topic up again and re-creates
itself there, with backoff, while the application keeps sending and receiving.

A consumer may span several topics: ``subscribe`` takes a topic, a list of topics or a compiled
pattern (``consumer.multi_topic``), and one ``Consumer`` then holds a partition consumer for every
partition of every topic; a pattern consumer re-lists its namespace every
``pattern_auto_discovery_period`` seconds and adds or drops topics as they come and go.
``create_reader`` makes a ``Reader`` (``readers.reader``): a non-durable Exclusive consumer that
starts at a given message id.

This module is the public one: it holds ``Client``'s constructor (every option, in
``config.client.CLIENT_OPTIONS``) and its closing, and exports the names of ``pulsar.asyncio``.
The rest of ``Client`` comes by concern from ``aio_consumers`` (``subscribe``, ``create_reader``),
``aio_producers`` (``create_producer``) and ``aio_lookup`` (connections, the cluster in use, topic
lookup, partition counts), each a base class of the next.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import Any

from magnetar.client.aio_consumers import ConsumerClient
from magnetar.client.config.client import CLIENT_OPTIONS, ClientSettings
from magnetar.client.config.client import DEFAULT_SERVICE_URL as DEFAULT_SERVICE_URL  # the CLI's default too
from magnetar.client.config.client import MAX_LOOKUP_REDIRECTS as MAX_LOOKUP_REDIRECTS
from magnetar.client.config.option_list import Flavour
from magnetar.client.consumer.consumer import Consumer
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.lifecycle.shutdown import abandon_now
from magnetar.client.lifecycle.stats import StatsReporter
from magnetar.client.lifecycle.thread_call import call_in_thread
from magnetar.client.message import Message
from magnetar.client.net.auth import Authentication
from magnetar.client.net.reconnect import Backoff
from magnetar.client.net.service_info import (
    ServiceInfo,
    ServiceInfoProvider,
    as_provider,
    initial_service_info,
    start_provider,
)
from magnetar.client.net.service_target import ServiceTarget, TlsSettings
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    MultiplierRedeliveryBackoff,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
)
from magnetar.client.partition_updates import DEFAULT_PARTITIONS_UPDATE_INTERVAL
from magnetar.client.producer.producer import Producer
from magnetar.client.readers.reader import Reader
from magnetar.client.schema_codec import WriterSchemas

# The errors a program may catch from this module, as before (every one is also in ``magnetar``).
from magnetar.protocol.errors import AlreadyClosed as AlreadyClosed
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.errors import NotConnected as NotConnected
from magnetar.protocol.errors import RetryableError as RetryableError
from magnetar.protocol.errors import ServiceNotReady as ServiceNotReady
from magnetar.protocol.errors import Timeout as Timeout
from magnetar.protocol.message_id import MessageId

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "MagnetarError",
    "Message",
    "MessageId",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerQueueIsFull",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
]

log = logging.getLogger(__name__)


class Client(ConsumerClient):
    """Entry point: creates producers and consumers, owns the connections to brokers.

    ``service_url`` may list several brokers (``magnetar://h1:6650,h2:6650``); lookups go to the
    first that answers, starting from the last one that did. Backoff between reconnection
    attempts starts at ``initial_backoff_interval_ms`` and doubles up to ``max_backoff_interval_ms``
    (Pulsar's C++ client options). ``keep_alive_interval_seconds`` (0 disables) is how long a
    silent connection is trusted before a ``ping``; one more interval without an answer and it is
    closed as dead. Every ``partitions_update_interval`` seconds (the C++ client's
    ``partitionsUpdateInterval``, 60 by default, 0 disables) partitioned producers and consumers
    re-read their topics' partition counts and attach to partitions added meanwhile.

    Security takes pulsar-client's arguments (``net.auth``, ``net.tls``): ``authentication`` (e.g.
    ``AuthenticationToken``) sends credentials in every ``connect``; TLS is on for a
    ``magnetar+ssl://`` URL or ``use_tls``, and then every broker a lookup names is dialled with TLS
    too (its ``broker_url_tls``).
    """

    def __init__(
        self,
        service_url: str | ServiceInfoProvider = DEFAULT_SERVICE_URL,
        *,
        authentication: Authentication | None = None,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        operation_timeout_seconds: float = 30,
        connection_timeout_ms: int = 10000,
        max_lookup_redirects: int = MAX_LOOKUP_REDIRECTS,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 30000,
        keep_alive_interval_seconds: float = 30,
        partitions_update_interval: float = DEFAULT_PARTITIONS_UPDATE_INTERVAL,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        logger: Any = None,
        listener_name: str | None = None,
    ) -> None:
        arguments = locals()
        if authentication is not None and not isinstance(authentication, Authentication):
            raise ValueError("authentication must be an Authentication (e.g. AuthenticationToken)")
        CLIENT_OPTIONS.check(arguments)  # the TLS arguments' types (config.client)
        provider = as_provider(service_url)
        info = (
            initial_service_info(provider, authentication, tls_trust_certs_file_path)
            if provider is not None
            else ServiceInfo(str(service_url), authentication, tls_trust_certs_file_path)
        )
        # pulsar-client's client-wide options (config.client); the provider / URL (service_target.py).
        self._settings = ClientSettings(**CLIENT_OPTIONS.forward(arguments, to=Flavour.CONFIG))
        self._provider = provider
        self._tls_settings = TlsSettings(
            bool(use_tls),
            tls_trust_certs_file_path,
            tls_allow_insecure_connection,
            tls_validate_hostname,
            tls_certificate_file_path,
            tls_private_key_file_path,
        )
        self._default_auth = authentication
        self._apply_target(
            ServiceTarget.resolve(
                info, self._tls_settings, default_auth=authentication, timeout=float(operation_timeout_seconds)
            )
        )
        self._pending_info = None  # pushed by the provider, applied on the loop
        self._loop = None
        self._loop_lock = threading.Lock()  # the provider's thread and the loop's start (aio_lookup)
        self._op_timeout = float(operation_timeout_seconds)
        self._connect_timeout = connection_timeout_ms / 1000.0
        self._max_redirects = max_lookup_redirects
        self._backoff = (initial_backoff_interval_ms / 1000.0, max_backoff_interval_ms / 1000.0)
        Backoff(*self._backoff)  # validate now, not at the first reconnection
        self._keep_alive = float(keep_alive_interval_seconds)
        self._conns = {}
        self._ids = itertools.count(1)
        self._producers = []
        self._background: set[asyncio.Task[None]] = set()  # a shutdown() under way (keeps its task alive)
        self._consumers = []
        self._watchers = []
        if partitions_update_interval < 0:
            raise ValueError("partitions_update_interval must be >= 0 (0 disables the updates)")
        self._partitions_update_interval = float(partitions_update_interval)
        self._updaters = set()
        # Writer schemas by (topic, version), fetched once for every consumer of this client.
        self._writer_schemas = WriterSchemas(self._fetch_schema)
        self._closed = False
        self._sleep = asyncio.sleep  # the wait between attempts (tests swap in a recorder)
        if provider is not None:  # in the constructor, as the C++ client: its first update applies at once
            start_provider(provider, self._on_service_info)
        stats = StatsReporter(
            self._settings.stats_interval_in_seconds, lambda: self._producers, lambda: self._consumers
        )
        self._settings.start(stats)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- closing

    def shutdown(self) -> None:
        """Close everything now, without waiting for the broker (``pulsar.asyncio.Client.shutdown``,
        not a coroutine): pending sends fail with ``AlreadyClosed`` at once (``lifecycle.shutdown``)."""
        abandon_now(self._producers, list(self._conns.values()))
        task = asyncio.get_running_loop().create_task(self.close())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def shutdown_now(self) -> None:
        """``shutdown`` that can be awaited: returns once everything is closed."""
        abandon_now(self._producers, list(self._conns.values()))
        await self.close()

    async def close(self) -> None:
        """Close every producer (flushing) and consumer (acks durable), then the connections."""
        if self._closed:
            return
        producers, self._producers = self._producers, []
        consumers, self._consumers = self._consumers, []
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            await watcher.stop()
        updaters, self._updaters = list(self._updaters), set()
        for updater in updaters:
            await updater.stop()
        results = await asyncio.gather(
            *(p.close() for p in producers), *(c.close() for c in consumers), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                log.debug("error while closing: %r", r)
        self._closed = True
        conns = [f.result() for f in self._conns.values() if f.done() and not f.cancelled() and f.exception() is None]
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()
        if self._provider is not None:  # stops its watch (a thread of its own for AutoClusterFailover)
            await call_in_thread(self._provider.close, "magnetar-provider-close")
        await self._settings.close()  # the statistics report, the logger option
