"""The synchronous client (``magnetar.Client``), mirroring ``pulsar.Client``'s blocking API: the blocking facade.

It is a thin shell over the asyncio client: the ``Client`` owns one background thread running one
event loop (``blocking.loop_thread``), and every producer and consumer lives on that loop. Blocking
calls submit a coroutine with ``run_coroutine_threadsafe`` and wait. The per-message calls are the
exception, because a coroutine submission costs tens of microseconds, far too much at hundreds of
thousands of messages per second: ``send_async``, ``acknowledge`` and the consumed-message
bookkeeping of ``receive`` append to a thread-safe deque, and the loop is woken (one
``call_soon_threadsafe``) only when no wake-up is already on its way, so a busy caller hands over
messages in bulk (``sync_producer``, ``sync_consumer``, ``sync_reader``).

Every option is handed to the asyncio client by name, as its option list says (``config``).
Only the blocking facade imports ``blocking`` (the loop thread, waiting, the listener threads),
an import-linter contract: the asyncio client and everything under it never block a thread.

Callbacks given to ``send_async`` run on the client's loop thread, as Pulsar's run on its
internal threads: keep them short and never call blocking client methods from them.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable
from typing import Any

from magnetar.client import aio
from magnetar.client.blocking.listener_pool import ListenerPool
from magnetar.client.blocking.loop_thread import LoopThread
from magnetar.client.config.arguments import check_service_url
from magnetar.client.config.client import CLIENT_OPTIONS, DEFAULT_SERVICE_URL
from magnetar.client.config.consumer import SUBSCRIBE_OPTIONS
from magnetar.client.config.option_list import Flavour
from magnetar.client.config.producer import PRODUCER_OPTIONS, refuses_batching_with_chunking
from magnetar.client.config.reader import READER_OPTIONS, TABLE_VIEW_OPTIONS
from magnetar.client.message import Message
from magnetar.client.net.auth import Authentication
from magnetar.client.net.service_info import ServiceInfo, ServiceInfoProvider
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RedeliveryBackoff,
    RegexSubscriptionMode,
)
from magnetar.client.partition_updates import DEFAULT_PARTITIONS_UPDATE_INTERVAL
from magnetar.client.producer.routing import MessageRouter
from magnetar.client.readers.table_view import TableView
from magnetar.client.sync_consumer import Consumer
from magnetar.client.sync_producer import Producer
from magnetar.client.sync_reader import Reader
from magnetar.protocol.errors import AlreadyClosed, MagnetarError
from magnetar.protocol.message_id import MessageId
from magnetar.schema.info import SchemaInfo

__all__ = ["Client", "Consumer", "Producer", "Reader"]


def _shut_down_unreferenced(lt: LoopThread, client: aio.Client, listeners: ListenerPool) -> None:
    """``shutdown()`` of a client that was collected without being closed (``weakref.finalize``).

    It runs where the last reference went, usually the application's thread; on the loop thread
    itself (a collection during a callback) it can only stop the loop, which ends the thread.
    """
    if lt.closed:
        return
    listeners.stop()
    if not lt.in_loop_thread():
        with contextlib.suppress(MagnetarError, OSError, RuntimeError):
            lt.run(client.shutdown_now())
    lt.stop()


class Client:
    """Blocking client; ``close()`` closes every producer and consumer it created.

    Arguments in ``pulsar.Client``'s order, names and defaults (pulsar-client 3.x), then
    Magnetar's own, keyword-only. ``service_url`` may also be a ``ServiceInfoProvider`` such as
    ``AutoClusterFailover`` (``net.service_info``); the client-wide options (``io_threads``,
    ``concurrent_lookup_requests``, ``stats_interval_in_seconds``, ``logger``, ``listener_name``...)
    are described in ``config.client``.
    """

    def __init__(
        self,
        service_url: str | ServiceInfoProvider = DEFAULT_SERVICE_URL,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: Any = None,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        *,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 30000,
        keep_alive_interval_seconds: float = 30,
        partitions_update_interval: float = DEFAULT_PARTITIONS_UPDATE_INTERVAL,
    ) -> None:
        arguments = locals()
        if isinstance(service_url, str):
            check_service_url(service_url)  # "fakeServiceUrl": ValueError now, as pulsar-client's
        # Built before the loop thread, so a bad TLS path or argument leaves no thread behind.
        client = aio.Client(**CLIENT_OPTIONS.forward(arguments, to=Flavour.ASYNCIO))
        self._lt = LoopThread()
        self._client = client
        self._closed = False
        # Shared by every message_listener / reader_listener (threads start with the first one).
        self._listeners = ListenerPool(self._lt.loop, client.message_listener_threads)
        # A client dropped without close() (unreferenced, then collected) is shut down, as
        # pulsar-client's is when its C++ object is destroyed: its loop thread must not outlive it.
        # Not at interpreter exit, where daemon threads simply end (a broker that does not answer
        # must not hold up the exit).
        self._finalizer = weakref.finalize(self, _shut_down_unreferenced, self._lt, client, self._listeners)
        self._finalizer.atexit = False

    def __enter__(self) -> Client:
        return self

    def get_service_info(self) -> ServiceInfo:
        """The ``ServiceInfo`` of the cluster in use (switched by a ``ServiceInfoProvider``)."""
        return self._client.get_service_info()

    def __exit__(self, *exc: object) -> None:
        if not self._closed:  # closing inside the block is fine; a second explicit close() is not
            self.close()

    @refuses_batching_with_chunking
    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Any = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
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
        """Create a producer; arguments in ``pulsar.Client.create_producer``'s order, with its names and defaults.

        Except ``batching_enabled``, True here (pulsar-client: False), and the keyword-only
        ``hashing_scheme``, Magnetar's (``config.producer`` has the list).
        ``message_router(msg, num_partitions)`` runs on the client's loop thread.
        """
        arguments = locals()
        PRODUCER_OPTIONS.check(arguments)
        # The blocking wrapper applies block_if_queue_full itself, before the loop. Batching given
        # with chunking was refused above (refuses_batching_with_chunking); a default one gives way
        # here, since the asyncio call is passed every option and would take it as given.
        forwarded = PRODUCER_OPTIONS.forward(
            arguments,
            to=Flavour.ASYNCIO,
            block_if_queue_full=True,
            batching_enabled=False if chunking_enabled is True else batching_enabled,
        )
        producer = self._lt.run(self._client.create_producer(**forwarded))
        return Producer(self._lt, producer, max_pending_messages, block_if_queue_full)

    def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        message_listener: Callable[[Consumer, Message], Any] | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        pattern_auto_discovery_period: int = 60,
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
        *,
        retry_enable: bool = False,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_tick_time_ms: int = 1000,
        priority_level: int = 0,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a pattern (``re.compile(...)``).

        Positional arguments, names and defaults are ``pulsar.Client.subscribe``'s; the keyword-only
        ones are Magnetar's extensions (see ``config.consumer``). ``message_listener(consumer,
        message)`` is called on one of the client's ``message_listener_threads`` for every message
        (``blocking.listener_pool``), and ``receive`` / ``batch_receive`` then raise ``InvalidConfiguration``,
        as in pulsar-client.
        """
        arguments = locals()
        SUBSCRIBE_OPTIONS.check(arguments)
        consumer = self._lt.run(self._client.subscribe(**SUBSCRIBE_OPTIONS.forward(arguments, to=Flavour.ASYNCIO)))
        wrapped = Consumer(self._lt, consumer, ConsumerType(consumer_type))
        if message_listener is not None:
            wrapped._start_listener(self._listeners, message_listener)
        return wrapped

    def create_reader(
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

        ``reader_listener(reader, message)`` is called on one of the client's
        ``message_listener_threads`` for every message (``read_next`` then raises ``InvalidConfiguration``).
        """
        arguments = locals()
        READER_OPTIONS.check(arguments)
        # The blocking listener runs on the listener threads, not on the loop.
        forwarded = READER_OPTIONS.forward(arguments, to=Flavour.ASYNCIO, reader_listener=None)
        reader = self._lt.run(self._client.create_reader(**forwarded))
        wrapped = Reader(self._lt, reader)
        if reader_listener is not None:
            wrapped._start_listener(self._listeners, reader_listener)
        return wrapped

    def create_table_view(self, topic: str, subscription_name: str | None = None, schema: Any = None) -> TableView:
        """The latest value per key of ``topic``, kept current (``readers.table_view``); as
        ``pulsar.Client.create_table_view``, returning once the table holds the whole topic."""
        TABLE_VIEW_OPTIONS.check(locals())
        return TableView.create(self._client, self._listeners, self._lt.run, topic, subscription_name, schema)

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._lt.run(self._client.get_topic_partitions(topic))

    def get_schema_info(self, topic: str, version: int | None = None) -> SchemaInfo:
        """Version ``version`` of ``topic``'s schema (None: the newest live one), as pulsar-client's
        ``_pulsar.Client.get_schema_info`` (``aio.Client.get_schema_info``)."""
        return self._lt.run(self._client.get_schema_info(topic, version))

    def close(self) -> None:
        """Close every producer (flushing), consumer and reader, then the connections.

        A second ``close()`` raises ``AlreadyClosed``, as pulsar-client's does.
        """
        if self._closed:
            raise AlreadyClosed("client is already closed")
        self._closed = True
        try:
            self._listeners.stop()  # no listener call starts after this; those under way finish first
            self._lt.run(self._client.close())
        finally:
            self._lt.stop()

    def shutdown(self) -> None:
        """Close everything now, without waiting for the broker (``pulsar.Client.shutdown``).

        Messages not yet acknowledged fail with ``AlreadyClosed`` (their callbacks run once), and
        every later call on the client or its producers and consumers raises ``AlreadyClosed``.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._listeners.stop()
            self._lt.run(self._client.shutdown_now())
        finally:
            self._lt.stop()
