"""The synchronous client (``magnetar.Client``), mirroring ``pulsar.Client``'s blocking API.

It is a thin shell over the asyncio client: the ``Client`` owns one background thread running one
event loop, and every producer and consumer lives on that loop. Blocking calls submit a coroutine
with ``run_coroutine_threadsafe`` and wait. The per-message calls are the exception, because a
coroutine submission costs tens of microseconds, far too much at hundreds of thousands of messages
per second: ``send_async``, ``acknowledge`` and the consumed-message bookkeeping of ``receive``
append to a thread-safe deque, and the loop is woken (one ``call_soon_threadsafe``) only when no
wake-up is already on its way, so a busy caller hands over messages in bulk.

Callbacks given to ``send_async`` run on the client's loop thread, as Pulsar's run on its
internal threads: keep them short and never call blocking client methods from them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from magnetar import event_loop, write_batch
from magnetar.client import aio
from magnetar.client.blocking.listener_pool import ListenerPool, Pump
from magnetar.client.blocking.waiting import wait_event, wait_future
from magnetar.client.config.arguments import check_message_arguments, check_service_url
from magnetar.client.config.client import CLIENT_OPTIONS, DEFAULT_SERVICE_URL
from magnetar.client.config.consumer import SUBSCRIBE_OPTIONS
from magnetar.client.config.option_list import Flavour
from magnetar.client.config.producer import PRODUCER_OPTIONS
from magnetar.client.config.reader import READER_OPTIONS, TABLE_VIEW_OPTIONS
from magnetar.client.consumer.consumer import PartitionConsumer
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError, ProducerQueueIsFull
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
    Result,
)
from magnetar.client.partition_updates import DEFAULT_PARTITIONS_UPDATE_INTERVAL
from magnetar.client.producer.batch_builder import SendCallback
from magnetar.client.producer.producer import MessageOptions, check_content, message_options
from magnetar.client.producer.routing import MessageRouter
from magnetar.client.readers import reader as aio_reader
from magnetar.client.readers.table_view import TableView
from magnetar.protocol.errors import AlreadyClosed, InvalidConfiguration, MagnetarError
from magnetar.protocol.message_id import MessageId
from magnetar.schema.info import SchemaInfo

log = logging.getLogger(__name__)
T = TypeVar("T")
# A queued message: content, properties, partition key, event time, callback, and the rarely used
# options (``producer.message_options``) or None, so the common message stays a short tuple.
_Pending = tuple[bytes | None, dict[str, str] | None, str | None, int | None, SendCallback, MessageOptions | None]


class _LoopThread:
    """A daemon thread running the event loop that every object of one ``Client`` lives on."""

    def __init__(self) -> None:
        self.loop = event_loop.new_event_loop()  # uvloop when installed
        self._thread = threading.Thread(target=self._main, name="magnetar-client-loop", daemon=True)
        self._thread.start()
        # Set when the client is closed: every later ``run`` raises AlreadyClosed,
        # and the producers, consumers and readers in ``owned`` are told (``_client_closed``).
        self.closed = False
        self.owned: weakref.WeakSet[Producer | Consumer | Reader] = weakref.WeakSet()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _may_block(self) -> None:
        """Raise unless this thread may wait for the loop: not from the loop (a callback), not once closed."""
        if self.in_loop_thread():
            raise RuntimeError("blocking client calls cannot be made from a client callback")
        if self.closed:
            raise AlreadyClosed("client is closed")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            self._may_block()
        except BaseException:
            coro.close()
            raise
        return wait_future(asyncio.run_coroutine_threadsafe(coro, self.loop), self.alive)

    def take(self, consumer: aio.Consumer, timeout_millis: int | None) -> Message:
        """The next message of ``consumer``'s queue, waiting on the loop thread's delivery
        (blocked_receivers.py): the blocking ``receive`` once nothing is queued."""
        self._may_block()
        return consumer._blocked.take(consumer._queue, lambda: consumer._error, timeout_millis, self.alive)

    def stop(self) -> None:
        self.closed = True
        for owned in list(self.owned):
            owned._client_closed()
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
            self.loop.close()


class Client:
    """Blocking client; ``close()`` closes every producer and consumer it created.

    Arguments in ``pulsar.Client``'s order, names and defaults (pulsar-client 3.x), then
    Magnetar's own, keyword-only. ``service_url`` may also be a ``ServiceInfoProvider`` such as
    ``AutoClusterFailover`` (``service_info.py``); the client-wide options (``io_threads``,
    ``concurrent_lookup_requests``, ``stats_interval_in_seconds``, ``logger``, ``listener_name``...)
    are described in ``client_config.py``.
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
        self._lt = _LoopThread()
        self._client = client
        self._closed = False
        # Shared by every message_listener / reader_listener (threads start with the first one).
        self._listeners = ListenerPool(self._lt.loop, client.message_listener_threads)

    def __enter__(self) -> Client:
        return self

    def get_service_info(self) -> ServiceInfo:
        """The ``ServiceInfo`` of the cluster in use (switched by a ``ServiceInfoProvider``)."""
        return self._client.get_service_info()

    def __exit__(self, *exc: object) -> None:
        if not self._closed:  # closing inside the block is fine; a second explicit close() is not
            self.close()

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
        ``hashing_scheme``, Magnetar's (``producer.ProducerConfig`` has the list).
        ``message_router(msg, num_partitions)`` runs on the client's loop thread.
        """
        arguments = locals()
        PRODUCER_OPTIONS.check(arguments)
        # The blocking wrapper applies block_if_queue_full itself, before the loop.
        forwarded = PRODUCER_OPTIONS.forward(arguments, to=Flavour.ASYNCIO, block_if_queue_full=True)
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
        ones are Magnetar's extensions (see ``consumer_config``). ``message_listener(consumer,
        message)`` is called on one of the client's ``message_listener_threads`` for every message
        (``listener_pool``), and ``receive`` / ``batch_receive`` then raise ``InvalidConfiguration``,
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
        """The latest value per key of ``topic``, kept current (``table_view``); as
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


class Producer:
    """Blocking producer; ``send_async`` hands messages to the loop in bulk."""

    def __init__(self, lt: _LoopThread, producer: aio.Producer, max_pending: int, block: bool) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._p = producer
        self._max_pending = max_pending
        self._block = block
        self._queue: deque[_Pending] = deque()
        self._wakeup_pending = False
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        for part in producer.partitions:
            part.completion_listener = self._completed
        lt.owned.add(self)

    def _client_closed(self) -> None:
        """The client closed: refuse later sends, and fail those still queued here (each callback once)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        while self._queue:
            try:
                callback = self._queue.popleft()[4]
            except IndexError:  # the loop took the last one meanwhile
                break
            callback(AlreadyClosed("the client was closed before the message was sent"), None)

    def topic(self) -> str:
        return self._p.topic()

    def producer_name(self) -> str:
        return self._p.producer_name()

    def last_sequence_id(self) -> int:
        return self._p.last_sequence_id()

    def is_connected(self) -> bool:
        """Whether the producer is registered on its broker(s) now (``aio.Producer.is_connected``)."""
        return self._p.is_connected()

    def send_async(
        self,
        content: Any,
        callback: SendCallback,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue a message; ``callback(result, msg_id)`` gets ``Result.Ok`` or the error.

        Arguments as ``pulsar.Producer.send_async``; ``replication_clusters`` and
        ``disable_replication`` are accepted and ignored (Magnetar has no geo-replication).
        """
        content = self._checked(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
        )
        if not callable(callback):
            raise TypeError(f"send_async needs a callable callback(result, msg_id), not {type(callback).__name__}")
        extra = message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        if not self._reserve(self._block):
            callback(ProducerQueueIsFull(f"{self._max_pending} messages pending"), None)
            return
        self._enqueue((content, properties, partition_key, event_timestamp, callback, extra))

    def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish one message and block until it is durable (arguments as ``pulsar.Producer.send``)."""
        if self._lt.in_loop_thread():
            raise RuntimeError("blocking send cannot be called from a client callback; use send_async")
        done = threading.Event()
        outcome: list[Any] = []

        def callback(result: Any, msg_id: MessageId | None) -> None:
            outcome.append((result, msg_id))
            done.set()

        content = self._checked(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
        )
        extra = message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        # Same path as send_async, so a send after some send_asyncs keeps their order.
        if not self._reserve(self._block):
            raise ProducerQueueIsFull(f"{self._max_pending} messages pending")
        self._enqueue((content, properties, partition_key, event_timestamp, callback, extra))
        wait_event(done, self._lt.alive)
        result, msg_id = outcome[0]
        if result is not Result.Ok:
            raise result
        assert isinstance(msg_id, MessageId)
        return msg_id

    def _checked(
        self,
        content: Any,
        properties: dict[str, str] | None,
        partition_key: str | None,
        ordering_key: str | None,
        sequence_id: int | None,
        replication_clusters: list[str] | None,
        disable_replication: bool,
        event_timestamp: int | None,
    ) -> bytes | None:
        """The payload of ``content`` (encoded by the producer's schema, if it has one), its arguments
        checked: refused at the call, as pulsar-client does, not later on the client's loop thread
        where the queue behind it would stall. Nothing is queued when this raises."""
        encode = self._p._encode
        if encode is None:
            check_content(content)
            payload: bytes | None = content
        else:
            payload = encode(content)  # the schema's TypeError for a wrong type
        check_message_arguments(
            properties=properties,
            partition_key=partition_key,
            ordering_key=ordering_key,
            sequence_id=sequence_id,
            replication_clusters=replication_clusters,
            disable_replication=disable_replication,
            event_timestamp=event_timestamp,
        )
        return payload

    def _enqueue(self, item: _Pending) -> None:
        """Hand one reserved message to the loop thread (``_drain``), waking it once per burst."""
        self._queue.append(item)
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)

    def _reserve(self, block: bool) -> bool:
        with self._cond:
            if self._closed:
                raise AlreadyClosed("producer is closed")
            while self._inflight >= self._max_pending:
                if not block:
                    return False
                self._cond.wait()
                if self._closed:
                    raise AlreadyClosed("producer is closed")
            self._inflight += 1
        return True

    def _completed(self, n: int) -> None:
        with self._cond:
            self._inflight -= n
            self._cond.notify_all()

    def _drain(self) -> None:
        """On the loop: move every queued message into the asyncio producer's batches."""
        self._wakeup_pending = False  # cleared first: anything appended from now on re-arms it
        with write_batch.flushed_at_end():  # the sends go out now, not a turn later (write_batch.py)
            self._drain_queued()

    def _drain_queued(self) -> None:
        queue = self._queue
        send = self._p._enqueue
        while queue:
            content, properties, key, ts, callback, extra = queue.popleft()
            try:
                send(content, properties, key, ts, callback, extra)
            except Exception as exc:  # any error, not only ours: a callback must never be left hanging
                self._completed(1)
                callback(exc, None)

    async def _flush(self) -> None:
        self._drain()
        await self._p.flush()

    async def _close(self) -> None:
        self._drain()
        await self._p.close()

    def flush(self) -> None:
        """Send buffered messages now and block until all pending ones have an outcome."""
        if self._closed:
            raise AlreadyClosed("producer is already closed")
        self._lt.run(self._flush())

    def close(self) -> None:
        """Flush, then close the producer; ``AlreadyClosed`` if it (or its client) already is."""
        if self._closed:
            raise AlreadyClosed("producer is already closed")
        try:
            self._lt.run(self._close())
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()


_CONSUMED, _ACK, _ACK_CUMULATIVE, _NACK = range(4)
# A queued operation's target: a message, or a message id already resolved (in the caller's thread,
# so that an id that belongs to no partition raises there) to (partition consumer, position, index).
_Target = Message | tuple[PartitionConsumer, tuple[int, int], int]


class Consumer:
    """Blocking consumer. ``acknowledge`` returns at once; ``close`` waits until acks are durable."""

    def __init__(self, lt: _LoopThread, consumer: aio.Consumer, consumer_type: ConsumerType) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._c = consumer
        self._type = consumer_type
        self._ops: deque[tuple[int, _Target]] = deque()
        self._wakeup_pending = False
        self._listener: Pump | None = None
        self._closed = False
        lt.owned.add(self)

    def _client_closed(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        """Every call on a closed consumer (or one of a closed client) raises ``AlreadyClosed`` at once."""
        if self._closed:
            raise AlreadyClosed("consumer is already closed")

    def topic(self) -> str:
        return self._c.topic()

    def subscription_name(self) -> str:
        return self._c.subscription_name()

    def consumer_name(self) -> str:
        return self._c.consumer_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be called on a consumer with a message_listener")
        return self._receive(timeout_millis)

    def batch_receive(self) -> list[Message]:
        """The next messages, bounded by the ``batch_receive_policy`` (count, bytes, timeout)."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("batch_receive() cannot be called on a consumer with a message_listener")
        return self._lt.run(self._c.batch_receive())

    def _receive(self, timeout_millis: int | None = None) -> Message:
        try:
            # Fast path: take a message already queued without a round trip to the loop; its
            # permit bookkeeping is handed over with the next batch of operations.
            msg = self._c._queue.popleft()
        except IndexError:
            msg = self._lt.take(self._c, timeout_millis)
        self._op(_CONSUMED, msg)
        return msg

    def acknowledge(self, message: Message | MessageId) -> None:
        self._op(_ACK, self._target(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgement is not allowed on a {self._type.value} subscription"
            )
        self._op(_ACK_CUMULATIVE, self._target(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._op(_NACK, self._target(message))

    def redeliver_unacknowledged_messages(self) -> None:
        self._check_open()
        self._loop.call_soon_threadsafe(self._c.redeliver_unacknowledged_messages)

    def _target(self, message: Message | MessageId) -> _Target:
        self._check_open()  # every acknowledgement passes here
        if isinstance(message, Message):
            return message
        return self._c._locate(message)

    def _op(self, kind: int, item: _Target) -> None:
        self._ops.append((kind, item))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._wakeup_pending = False
        ops = self._ops
        c = self._c
        while ops:
            kind, item = ops.popleft()
            if kind == _CONSUMED:
                assert isinstance(item, Message)
                owner = item._info.owner
                if owner is not None:
                    owner.message_consumed(item._info)
                continue
            if kind == _NACK and isinstance(item, Message):
                c._negative_acknowledge(item)  # it knows the redelivery count (for a back-off)
                continue
            try:
                owner, position, index = c._locate(item) if isinstance(item, Message) else item
                if kind == _ACK:
                    owner.acknowledge(position, index)
                elif kind == _ACK_CUMULATIVE:
                    owner.acknowledge_cumulative(position, index)
                else:
                    owner.negative_acknowledge(position)
            except (MagnetarError, ValueError) as exc:  # e.g. a message of a consumer since closed
                log.warning("dropping an acknowledgement on %s: %s", c.topic(), exc)

    def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms since the epoch), as ``pulsar.Consumer.seek``."""
        self._drain_in_loop()
        self._lt.run(self._c.seek(messageid))

    def reconsume_later(
        self, message: Message, delay: timedelta | int, properties: dict[str, str] | None = None
    ) -> None:
        """Deliver ``message`` again after ``delay`` via the retry topic (needs ``retry_enable=True``)."""
        self._drain_in_loop()
        self._lt.run(self._c.reconsume_later(message, delay, properties))

    def get_last_message_id(self) -> MessageId:
        return self._lt.run(self._c.get_last_message_id())

    def is_connected(self) -> bool:
        return self._c.is_connected()

    def pause_message_listener(self) -> None:
        """Stop handing messages to the ``message_listener`` until ``resume_message_listener``."""
        if self._listener is not None:
            self._listener.pause()

    def resume_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.resume()

    def _start_listener(self, pool: ListenerPool, listener: Callable[[Consumer, Message], Any]) -> None:
        self._listener = pool.start(self._c.receive, lambda msg: listener(self, msg), self._c.queued)

    def _drain_in_loop(self) -> None:
        """Hand queued acks to the loop before a blocking call (they must reach the broker first)."""
        if self._ops:
            self._loop.call_soon_threadsafe(self._drain)

    async def _close(self, unsubscribe: bool) -> None:
        self._drain()
        if self._listener is not None:
            self._listener.stop()  # a paused listener's pump is not waiting for a message
        if unsubscribe:
            await self._c.unsubscribe()
        else:
            await self._c.close()

    def unsubscribe(self) -> None:
        self._check_open()
        self._lt.run(self._close(True))
        self._closed = True

    def close(self) -> None:
        """Close; returns once acknowledgements made before it are durable (``AlreadyClosed`` if closed)."""
        self._check_open()
        self._closed = True
        self._lt.run(self._close(False))


class Reader:
    """Blocking reader (``client.create_reader``), mirroring ``pulsar.Reader``."""

    def __init__(self, lt: _LoopThread, reader: aio_reader.Reader) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._r = reader
        self._read: deque[Message] = deque()
        self._wakeup_pending = False
        self._listener: Pump | None = None
        self._closed = False
        lt.owned.add(self)

    def _client_closed(self) -> None:
        self._closed = True

    def topic(self) -> str:
        return self._r.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        if self._closed:
            raise AlreadyClosed("reader is already closed")
        if self._listener is not None:
            raise InvalidConfiguration("read_next() cannot be called on a reader with a reader_listener")
        return self._read_next(timeout_millis)

    def _read_next(self, timeout_millis: int | None = None) -> Message:
        try:
            # Fast path, as the consumer's: the read bookkeeping follows on the loop, in order.
            msg = self._r.consumer._queue.popleft()
        except IndexError:
            msg = self._lt.take(self._r.consumer, timeout_millis)
        self._read.append(msg)
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)
        return msg

    def _drain(self) -> None:
        self._wakeup_pending = False
        read = self._read
        reader = self._r
        while read:
            reader._handed_out(read.popleft())

    def has_message_available(self) -> bool:
        """Whether a message can be read now from the current position."""
        return self._lt.run(self._r.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id or a publish time (ms since the epoch)."""
        self._lt.run(self._r.seek(messageid))

    def is_connected(self) -> bool:
        return self._r.is_connected()

    def _start_listener(self, pool: ListenerPool, listener: Callable[[Reader, Message], Any]) -> None:
        self._listener = pool.start(self._r.read_next, lambda msg: listener(self, msg), self._r.queued)

    def close(self) -> None:
        """Close the reader (its non-durable subscription goes with it); ``AlreadyClosed`` if closed."""
        if self._closed:
            raise AlreadyClosed("reader is already closed")
        self._closed = True
        self._lt.run(self._r.close())
