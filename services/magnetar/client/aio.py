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
that owns it. Each of them stays attached to its topic's owner on its own (``reconnect``): when
a connection drops or the broker hands the topic over, it looks the topic up again and re-creates
itself there, with backoff, while the application keeps sending and receiving.

A consumer may span several topics: ``subscribe`` takes a topic, a list of topics or a compiled
pattern (``multi_topic``), and one ``Consumer`` then holds a partition consumer for every partition
of every topic; a pattern consumer re-lists its namespace every ``pattern_auto_discovery_period``
seconds and adds or drops topics as they come and go. ``create_reader`` makes a ``Reader``
(``reader``): a non-durable Exclusive consumer that starts at a given message id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from magnetar.client.config.client import CLIENT_OPTIONS, MAX_LOOKUP_REDIRECTS, ClientSettings
from magnetar.client.config.client import DEFAULT_SERVICE_URL as DEFAULT_SERVICE_URL  # the CLI's default too
from magnetar.client.config.consumer import SUBSCRIBE_OPTIONS, ConsumerConfig
from magnetar.client.config.option_list import Flavour
from magnetar.client.config.producer import PRODUCER_OPTIONS
from magnetar.client.consumer.acks import FlowPermits
from magnetar.client.consumer.consumer import Consumer, PartitionConsumer
from magnetar.client.consumer.dead_letter import retry_letter_topic
from magnetar.client.consumer.multi_topic import TOPICS_MODE_OF, PatternWatcher, TopicPattern
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.lifecycle.shutdown import abandon_now
from magnetar.client.lifecycle.stats import StatsReporter
from magnetar.client.message import Message
from magnetar.client.net.auth import Authentication
from magnetar.client.net.connect_deadline import as_connect_error, give_up_at
from magnetar.client.net.connection import Connection, is_tls_url, normalize_url
from magnetar.client.net.reconnect import Backoff
from magnetar.client.net.service_info import ServiceInfo, ServiceInfoProvider, as_provider
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
    RedeliveryBackoff,
    RegexSubscriptionMode,
    Result,
)
from magnetar.client.partition_updates import DEFAULT_PARTITIONS_UPDATE_INTERVAL, PartitionsUpdater
from magnetar.client.producer.producer import PartitionProducer, Producer, ProducerConfig
from magnetar.client.producer.routing import MessageRouter
from magnetar.client.producer.start import starts_lazily
from magnetar.client.readers.reader import Reader, reader_subscription_name, start_for_partition
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
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import SchemaInfo

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
T = TypeVar("T")


class Client:
    """Entry point: creates producers and consumers, owns the connections to brokers.

    ``service_url`` may list several brokers (``magnetar://h1:6650,h2:6650``); lookups go to the
    first that answers, starting from the last one that did. Backoff between reconnection
    attempts starts at ``initial_backoff_interval_ms`` and doubles up to ``max_backoff_interval_ms``
    (Pulsar's C++ client options). ``keep_alive_interval_seconds`` (0 disables) is how long a
    silent connection is trusted before a ``ping``; one more interval without an answer and it is
    closed as dead. Every ``partitions_update_interval`` seconds (the C++ client's
    ``partitionsUpdateInterval``, 60 by default, 0 disables) partitioned producers and consumers
    re-read their topics' partition counts and attach to partitions added meanwhile.

    Security takes pulsar-client's arguments (``auth.py``, ``tls.py``): ``authentication`` (e.g.
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
        # pulsar-client's client-wide options (config.client); the provider / URL (service_target.py).
        self._settings = ClientSettings(**CLIENT_OPTIONS.forward(arguments, to=Flavour.CONFIG))
        self._provider = as_provider(service_url)
        info = (
            self._provider.initial_service_info()
            if self._provider is not None
            else ServiceInfo(str(service_url), authentication, tls_trust_certs_file_path)
        )
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
        self._pending_info: ServiceInfo | None = None  # pushed by the provider, applied on the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._op_timeout = float(operation_timeout_seconds)
        self._connect_timeout = connection_timeout_ms / 1000.0
        self._max_redirects = max_lookup_redirects
        self._backoff = (initial_backoff_interval_ms / 1000.0, max_backoff_interval_ms / 1000.0)
        Backoff(*self._backoff)  # validate now, not at the first reconnection
        self._keep_alive = float(keep_alive_interval_seconds)
        self._conns: dict[str, asyncio.Future[Connection]] = {}
        self._ids = itertools.count(1)
        self._producers: list[Producer] = []
        self._background: set[asyncio.Task[None]] = set()  # a shutdown() under way (keeps its task alive)
        self._consumers: list[Consumer] = []
        self._watchers: list[PatternWatcher] = []
        if partitions_update_interval < 0:
            raise ValueError("partitions_update_interval must be >= 0 (0 disables the updates)")
        self._partitions_update_interval = float(partitions_update_interval)
        self._updaters: set[PartitionsUpdater] = set()
        # Writer schemas by (topic, version), fetched once for every consumer of this client.
        self._writer_schemas = WriterSchemas(self._fetch_schema)
        self._closed = False
        # The wait between attempts; tests swap in a recorder instead of sleeping for real.
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        stats = StatsReporter(
            self._settings.stats_interval_in_seconds, lambda: self._producers, lambda: self._consumers
        )
        self._settings.start(stats)

    # ---------------------------------------------------------------- which cluster (service_info.py)

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
        """The provider's update callback; any thread may call it."""
        if not isinstance(info, ServiceInfo):
            log.warning("ignoring a service info update that is not a ServiceInfo: %r", info)
            return
        self._pending_info = info
        loop = self._loop
        if loop is not None and not loop.is_closed():
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
        """First use on the client's loop: start the statistics and the provider's watch."""
        if self._loop is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._settings.on_loop()
        if self._provider is not None:
            self._provider.initialize(self._on_service_info)

    @property
    def message_listener_threads(self) -> int:
        """pulsar-client's ``message_listener_threads``: the size of the listener pool."""
        return self._settings.message_listener_threads

    @property
    def listener_name(self) -> str | None:
        return self._settings.listener_name

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    # ---------------------------------------------------------------- producers

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Any = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = True,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        batching_type: BatchingType = BatchingType.Default,
        encryption_key: str | None = None,
        crypto_key_reader: Any = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: MessageRouter | None = None,
        *,
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
    ) -> Producer:
        """Create a producer on ``topic`` (short names expand to ``persistent://public/default/…``).

        Arguments in ``pulsar.asyncio.Client.create_producer``'s order, with pulsar-client's
        ``message_router`` last; ``hashing_scheme`` (keyword-only) is Magnetar's: pulsar-client's
        Python API has none. ``producer.ProducerConfig`` lists what differs from Pulsar. Unlike
        Pulsar, the asyncio producer waits for room when ``max_pending_messages`` are pending
        (``block_if_queue_full=True``), which is the natural back-pressure for
        ``await send_async(...)``. On a partitioned topic the producer attaches to partitions added
        later within ``partitions_update_interval`` (a ``Client`` option).
        """
        arguments = locals()
        PRODUCER_OPTIONS.check(arguments)  # pulsar-client's ValueErrors (config.producer)
        config = ProducerConfig(**PRODUCER_OPTIONS.forward(arguments, to=Flavour.CONFIG))
        name = TopicName.parse(topic)
        partitions = await self._partitions(name)
        parts = await self._partition_producers(name, self._targets(name, partitions), config)
        producer = Producer(str(name), parts, partitioned=partitions > 0, config=config)
        self._producers.append(producer)
        if partitions > 0:
            self._start_partition_updates(str(name), lambda: self._grow_producer(producer, name, config), producer)
        return producer

    async def _partition_producers(
        self, name: TopicName, targets: list[tuple[str, int]], config: ProducerConfig
    ) -> list[PartitionProducer]:
        """Create and attach a ``PartitionProducer`` per (topic, partition index) target, all at once."""

        async def one(target: str, index: int) -> PartitionProducer:
            part = PartitionProducer(self, target, index, config)
            lazy = starts_lazily(config.lazy_start_partitioned_producers, config.access_mode, index)
            if lazy and target != str(name):
                part.lazy = True  # registers on its first batch (producer_start)
                return part
            await part.attach_first()
            return part

        parts: list[PartitionProducer] = await self._create_all([one(t, i) for t, i in targets])
        return parts

    # ---------------------------------------------------------------- added partitions

    def _start_partition_updates(
        self, what: str, update: Callable[[], Awaitable[None]], owner: Producer | Consumer
    ) -> None:
        """Re-read partition counts for a producer or consumer every ``partitions_update_interval``."""
        if self._partitions_update_interval <= 0:
            return
        updater = PartitionsUpdater(what, self._partitions_update_interval, update, lambda: _is_closed(owner))
        self._updaters.add(updater)
        updater.start(on_done=self._updaters.discard)

    async def _grow_producer(self, producer: Producer, name: TopicName, config: ProducerConfig) -> None:
        """Attach to the partitions added to ``name`` since the producer last looked, then route to them."""
        known = len(producer.partitions)
        n = await self._partitions(name)
        if n <= known or producer.closed:
            return
        log.info("%s: %d partitions (was %d); attaching the producer to the new ones", name, n, known)
        parts = await self._partition_producers(name, [(str(name.partition(i)), i) for i in range(known, n)], config)
        if producer.closed or len(producer.partitions) != known:  # closed (or grown) meanwhile
            await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
            return
        producer._add_partitions(parts)

    async def _grow_consumer(self, consumer: Consumer, config: ConsumerConfig) -> None:
        """Subscribe the partitions added to the consumer's partitioned topics since it last looked.

        A new partition is subscribed from its earliest message whatever ``initial_position`` says:
        it was created empty after the consumer subscribed, so everything on it is new to this
        subscription (Pulsar gets the same by creating the subscription on added partitions when
        they are added).
        """
        earliest = dataclasses.replace(config, initial_position=InitialPosition.Earliest)
        for topic, known in list(consumer._partitioned.items()):
            name = TopicName.parse(topic)
            try:
                n = await self._partitions(name)
                if n <= known or _is_closed(consumer):
                    continue
                log.info("%s: %d partitions (was %d); subscribing the new ones", topic, n, known)
                new = [str(name.partition(i)) for i in range(known, n)]
                parts = await self._partition_consumers(consumer, new, earliest)
            except MagnetarError as exc:  # one topic's trouble must not hold up the others
                log.warning("%s: cannot subscribe its added partitions yet: %s", topic, exc)
                continue
            if _is_closed(consumer) or consumer._partitioned.get(topic) != known:
                await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
                continue
            consumer._add_parts(parts)
            consumer._partitioned[topic] = n

    # ---------------------------------------------------------------- consumers

    async def subscribe(
        self,
        topic: str | Sequence[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: Any = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: Any = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        is_pattern_topic: bool = False,
        *,
        pattern_auto_discovery_period: int = 60,
        retry_enable: bool = False,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_tick_time_ms: int = 1000,
        priority_level: int = 0,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a topic pattern as ``subscription_name``.

        The positional arguments are ``pulsar.asyncio.Client.subscribe``'s, in its order (``topic``
        may also be a compiled ``re.Pattern``, as for the blocking ``pulsar.Client``); the
        keyword-only ones are ``pulsar.Client``'s ``pattern_auto_discovery_period`` and Magnetar's
        extensions (``consumer_config.ConsumerConfig``). One ``Consumer`` serves every partition of
        every topic. A pattern lists its namespace now and every ``pattern_auto_discovery_period``
        seconds, adding the topics that appear and dropping those that go (``multi_topic``).
        With ``retry_enable`` the consumer also reads its retry topic,
        ``{first topic}-{subscription}-RETRY`` (not for a pattern, as in Pulsar's Java client).
        """
        arguments = locals()
        SUBSCRIBE_OPTIONS.check(arguments)  # pulsar-client's ValueErrors (config.consumer)
        pattern = _topic_pattern(topic, is_pattern_topic)
        config = ConsumerConfig(**SUBSCRIBE_OPTIONS.forward(arguments, to=Flavour.CONFIG))
        if dead_letter_policy is not None or retry_enable:
            config.producer_factory = self._letter_producer
            config.subscriber_factory = self._ensure_subscription
        if pattern is None:
            assert not isinstance(topic, re.Pattern)
            topics = _topic_list(topic)
            if retry_enable:
                retry = retry_letter_topic(topics[0], subscription_name)
                if retry not in topics:
                    topics.append(retry)
            # A list names its consumer as pulsar-client's multi-topic consumer does: made up.
            display = topic if isinstance(topic, str) else f"{topics[-1]}-TopicsConsumerFakeName-{secrets.token_hex(5)}"
            return await self._subscribe(
                str(TopicName.parse(display)) if isinstance(topic, str) else display, topics, config
            )
        return await self._subscribe_pattern(pattern, config)

    async def _subscribe(
        self,
        display_topic: str,
        topics: list[str],
        config: ConsumerConfig,
        *,
        register: bool = True,
    ) -> Consumer:
        """One ``Consumer`` over every partition of ``topics`` (full names), registered for ``close()``."""
        consumer = Consumer(display_topic, config)
        parts = await self._partition_consumers(consumer, topics, config)
        consumer._add_parts(parts)
        if register:
            self._consumers.append(consumer)
            self._start_partition_updates(display_topic, lambda: self._grow_consumer(consumer, config), consumer)
        return consumer

    async def _partition_consumers(
        self,
        consumer: Consumer,
        topics: Sequence[str],
        config: ConsumerConfig,
        *,
        durable: bool = True,
        start: Callable[[int], MessageId] | None = None,
    ) -> list[PartitionConsumer]:
        """Subscribe (and attach) a ``PartitionConsumer`` for each partition of each topic, all at once.

        ``durable=False`` and ``start`` make a reader's: ``start(i)`` is the start id of partition
        ``i``, ``start(-1)`` that of a topic that is not partitioned. If any of them fails, those
        that succeeded are closed and the first error is raised.
        """
        names = [TopicName.parse(t) for t in topics]
        counts = await asyncio.gather(*(self._partitions(n) for n in names))
        consumer._partitioned.update((str(name), n) for name, n in zip(names, counts, strict=True) if n > 0)
        inclusive = config.start_message_id_inclusive

        async def one(target: str, index: int, partitioned: bool) -> PartitionConsumer:
            part = PartitionConsumer(
                self,
                target,
                index,
                config,
                deliver=consumer._deliver,
                on_closed=consumer._on_partition_closed,
                discard_queued=consumer._discard_queued,
                durable=durable,
                start_message_id=None if start is None else start(index if partitioned else -1),
                start_inclusive=inclusive if start is not None else False,
                writer_schemas=self._writer_schemas,
            )
            part.permits = FlowPermits(config.queue_size_per_partition(len(consumer._parts) + len(targets)))
            await part.attach_first()
            return part

        targets = [(t, i, n > 0) for name, n in zip(names, counts, strict=True) for t, i in self._targets(name, n)]
        return await self._create_all([one(t, i, partitioned) for t, i, partitioned in targets])

    async def _subscribe_pattern(self, pattern: re.Pattern[str], config: ConsumerConfig) -> Consumer:
        mode = TOPICS_MODE_OF[config.regex_subscription_mode]
        topic_pattern = TopicPattern.parse(pattern, mode)
        topics = sorted(topic_pattern.filter(await self._topics_of_namespace(topic_pattern.namespace, mode)))
        consumer = await self._subscribe(pattern.pattern, topics, config)

        async def add(new: list[str]) -> list[str]:
            added: list[str] = []
            for t in new:
                if _is_closed(consumer):
                    break
                try:
                    parts = await self._partition_consumers(consumer, [t], config)
                except MagnetarError as exc:
                    log.warning("pattern %s: cannot subscribe to %s yet: %s", pattern.pattern, t, exc)
                    continue
                if _is_closed(consumer):
                    await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
                    break
                consumer._add_parts(parts)
                added.append(t)
            return added

        async def remove(gone: list[str]) -> None:
            gone_names = set(gone)
            parts = [p for p in consumer.partitions if str(TopicName.parse(p.topic).partitioned_base) in gone_names]
            if parts:
                await consumer._remove_parts(parts)  # closes them too

        watcher = PatternWatcher(
            topic_pattern,
            config.pattern_auto_discovery_period,
            topics,
            list_topics=lambda namespace: self._topics_of_namespace(namespace, mode),
            add_topics=add,
            remove_topics=remove,
            is_closed=lambda: _is_closed(consumer),
        )
        watcher.start()
        self._watchers.append(watcher)
        return consumer

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

    async def _letter_producer(self, topic: str) -> Producer:
        """A dead letter / retry letter producer: unbatched, so each letter is alone in its entry."""
        return await self.create_producer(topic, batching_enabled=False)

    async def _ensure_subscription(self, topic: str, subscription: str) -> None:
        """Create ``subscription`` on ``topic`` (from its earliest message) if it does not exist yet."""
        config = ConsumerConfig(subscription, ConsumerType.Shared, initial_position=InitialPosition.Earliest)
        consumer = await self._subscribe(str(TopicName.parse(topic)), [topic], config, register=False)
        await consumer.close()

    # ---------------------------------------------------------------- readers

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        reader_listener: Callable[[Reader, Message], Any] | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """A reader on ``topic`` from ``start_message_id``; arguments as ``pulsar.Client.create_reader``.

        ``reader_listener(reader, message)``, if given, is called on the client's loop for every
        message (``read_next`` is then not to be called), as Pulsar calls it on its listener thread.
        """
        if not isinstance(topic, str):
            raise ValueError(f"Argument topic is expected to be of type 'str' and not '{type(topic).__name__}'")
        if not isinstance(start_message_id, MessageId):
            raise ValueError(
                "Argument start_message_id is expected to be of type 'MessageId' and not "
                f"'{type(start_message_id).__name__}'"
            )
        name = TopicName.parse(topic)
        config = ConsumerConfig(
            reader_subscription_name(subscription_role_prefix),
            ConsumerType.Exclusive,
            schema=schema,
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            is_read_compacted=is_read_compacted,
            crypto_key_reader=crypto_key_reader,
            start_message_id_inclusive=start_message_id_inclusive,
            crypto_failure_action=crypto_failure_action,
        )
        consumer = Consumer(str(name), config)
        parts = await self._partition_consumers(
            consumer,
            [str(name)],
            config,
            durable=False,
            start=lambda index: start_for_partition(start_message_id, index),
        )
        consumer._add_parts(parts)
        self._consumers.append(consumer)
        partitioned = any(p.partition >= 0 for p in parts) and name.partition_index < 0
        reader = Reader(
            str(name),
            consumer,
            start_message_id,
            start_message_id_inclusive,
            partitioned=partitioned,
            on_close=self._forget_consumer,
        )
        if reader_listener is not None:
            reader.start_listener(reader_listener)
        return reader

    def _forget_consumer(self, consumer: Consumer) -> None:
        """A closed reader's consumer: ``close()`` has nothing left to do for it."""
        if consumer in self._consumers:
            self._consumers.remove(consumer)

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

    # ---------------------------------------------------------------- closing

    def shutdown(self) -> None:
        """Close everything now, without waiting for the broker (``pulsar.asyncio.Client.shutdown``,
        not a coroutine): pending sends fail with ``AlreadyClosed`` at once (``shutdown.py``)."""
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
            await asyncio.get_running_loop().run_in_executor(None, self._provider.close)
        await self._settings.close()  # the statistics report, the logger option


def _topic_pattern(topic: object, is_pattern_topic: bool) -> re.Pattern[str] | None:
    """The pattern of a pattern subscription (None for a topic or a list of topics).

    A compiled pattern is one (``pulsar.Client.subscribe``); so is a string with
    ``is_pattern_topic=True`` (``pulsar.asyncio.Client.subscribe``). Anything else that is not a
    string or a list of strings is refused with pulsar-client's ``ValueError``.
    """
    if isinstance(topic, re.Pattern):
        if not isinstance(topic.pattern, str):
            raise ValueError("a topic pattern must be a str pattern, not bytes")
        return topic
    if isinstance(topic, str):
        return re.compile(topic) if is_pattern_topic else None
    if isinstance(topic, list | tuple):
        if is_pattern_topic:
            raise ValueError(
                "Argument 'topic' must be a string when 'is_pattern_topic' is True; "
                "lists of topics do not support pattern subscriptions"
            )
        return None
    raise ValueError("Argument 'topic' is expected to be of a type between (str, list, re.pattern)")


def _topic_list(topic: str | Sequence[str]) -> list[str]:
    """Full names of the topics to subscribe to, each once, in the order given."""
    names = [topic] if isinstance(topic, str) else list(topic)
    if not names:
        raise ValueError("subscribe needs at least one topic")
    for t in names:
        if not isinstance(t, str):
            raise ValueError(f"Argument 'topic' must list topic names (str), not {type(t).__name__}")
    return list(dict.fromkeys(str(TopicName.parse(t)) for t in names))


def _is_closed(owner: Consumer | Producer) -> bool:
    return bool(getattr(owner, "_closing", False))
