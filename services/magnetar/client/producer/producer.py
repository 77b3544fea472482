"""Asyncio producers: one ``PartitionProducer`` per (partition) topic, and the public ``Producer``.

``PartitionProducer`` owns the send path: batching (count, bytes, delay), sequence ids, the
in-flight queue matched against receipts (the broker answers in ``seq`` order, so matching is a
``popleft``), the send timeout, back-pressure through ``max_pending_messages``, and (through
``reconnect.Attachment``) staying attached to the topic's owner, resending what is unacknowledged. ``Producer``
is what users hold: for a partitioned topic it routes each message to a partition (``routing``:
``message_routing_mode``, ``hashing_scheme``, ``message_router``) and takes in partitions added
later (``_add_partitions``), otherwise it forwards to its single partition producer.

Hot path per message: a size check, ``[payload, props, key, ts, seq]`` appended to the open batch,
and a two-slot ``SendReceipt``. No task and no future per message.

Entry keys and delayed messages (WIRE.md R29, R20e): each entry's ``meta.k`` is the key a
Key_Shared subscription routes it by — the ordering key of a message if it has one, else its
partition key; for a default batch of mixed keys the first key in it (so the batch goes whole to one
consumer, as Pulsar's default batcher does), and with ``BatchingType.KeyBased`` every batch holds
one key (``batch_builder.KeyedBatches``). A message with ``deliver_at`` / ``deliver_after`` goes
alone in its entry (``meta.dt``), after the open batch is sealed so that send order is kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from magnetar.client.encryption.crypto import Encryptor
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.net.connection import Connection
from magnetar.client.net.reconnect import Attachment, Resolver
from magnetar.client.options import BatchingType, HashingScheme, PartitionsRoutingMode, ProducerAccessMode
from magnetar.client.producer.batch_builder import RECORD_OVERHEAD, Batch, KeyedBatches, SendCallback, SendReceipt
from magnetar.client.producer.chunking import ChunkedSendReceipt, chunk_uuid, make_chunk_batches, split_payload
from magnetar.client.producer.routing import (
    DEFAULT_HASHING_SCHEME,
    CustomRouter,
    MessageRouter,
    RoundRobinRouter,
    SinglePartitionRouter,
    key_hasher,
    make_router,
)
from magnetar.client.producer.start import access_wait_limit
from magnetar.client.schema_codec import producer_schema
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.compression import CompressionType
from magnetar.protocol.errors import (
    AlreadyClosed,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    RetryableError,
    Timeout,
    Unsupported,
)
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE
from magnetar.protocol.message_id import MessageId

log = logging.getLogger(__name__)

# Shared by every record sent without properties (records are packed, never mutated).
_NO_PROPERTIES: dict[str, str] = {}


def check_content(content: object) -> None:
    """Refuse message content that is not bytes at the call, as pulsar-client's bytes schema does
    (``TypeError``), rather than later on the client's loop thread. None is a null value (a tombstone)."""
    if type(content) is not bytes and content is not None and not isinstance(content, bytearray | memoryview):
        raise TypeError(f"Invalid record obj of type {type(content)} - expected type is {bytes}")


# The rarely used per-message options, (ordering key, custom sequence id, deliver-at ms); None when
# none is given, so that the common message carries one ``None`` through the hot path.
MessageOptions = tuple[str | None, int | None, int | None]


def delivery_time(deliver_at: int | None, deliver_after: timedelta | None) -> int | None:
    """The deliver-at time (ms since the epoch) of a message sent with ``deliver_at`` / ``deliver_after``.

    Worked out at the call, so a delay counts from ``send``, not from when the batch is sealed.
    ``deliver_after`` wins when both are given, and a zero or missing value means "not delayed",
    as in pulsar-client (whose ``_build_msg`` sets them in that order, each only when truthy);
    a value of the wrong type is a ``ValueError``, as pulsar-client's argument checks raise.
    """
    if deliver_at is not None and (type(deliver_at) is bool or not isinstance(deliver_at, int)):
        raise ValueError("Argument deliver_at is expected to be either None or of type 'int'")
    if deliver_after is not None and not isinstance(deliver_after, timedelta):
        raise ValueError("Argument deliver_after is expected to be either None or of type 'timedelta'")
    if deliver_after:
        return int(time.time() * 1000) + int(deliver_after / timedelta(milliseconds=1))
    return deliver_at or None


def message_options(
    ordering_key: str | None, sequence_id: int | None, deliver_at: int | None, deliver_after: timedelta | None
) -> MessageOptions | None:
    """The options of one message, checked (``ValueError`` as pulsar-client), or None when there are none."""
    if ordering_key is None and sequence_id is None and deliver_at is None and deliver_after is None:
        return None
    if ordering_key is not None and not isinstance(ordering_key, str):
        raise ValueError("Argument ordering_key is expected to be either None or of type 'str'")
    if sequence_id is not None and (type(sequence_id) is bool or not isinstance(sequence_id, int)):
        raise ValueError("Argument sequence_id is expected to be either None or of type 'int'")
    return (ordering_key, sequence_id, delivery_time(deliver_at, deliver_after))


class ProducerConfig:
    """The options of ``create_producer``, validated once (names, order and defaults as pulsar-client 3.x's).

    Deliberate differences: ``batching_enabled`` defaults to True (pulsar-client: False) and
    ``block_if_queue_full`` to True here, which the asyncio producer keeps (the blocking one passes
    pulsar-client's False); ``chunking_enabled=True`` turns batching off (pulsar-client raises
    ``ValueError`` when both are on, but cannot be asked to here, where batching is on by default);
    ``hashing_scheme`` is an extension (pulsar-client's Python API has none and always hashes with
    ``BoostHash``). A ``schema`` (``magnetar.schema``; None or ``BytesSchema``: bytes) is registered
    by every partition producer, encodes objects at ``send`` and names its version in every entry
    (``schema_codec``).
    ``encryption_key`` with ``crypto_key_reader`` encrypts every entry (``crypto``; its public key
    loads here, ``CryptoError`` if it cannot; without a reader: ``ValueError``, never plaintext).
    ``access_mode`` is enforced by the broker (WIRE.md R102-R103), ``properties`` go to it as the
    producer's metadata (R104), and ``lazy_start_partitioned_producers`` (in Shared mode only, as
    Pulsar) registers each partition producer but the first with its first batch (``producer_start``).
    """

    __slots__ = (
        "access_mode",
        "batching_enabled",
        "batching_max_allowed_size_in_bytes",
        "batching_max_messages",
        "batching_max_publish_delay_ms",
        "batching_type",
        "block_if_queue_full",
        "chunking_enabled",
        "compression_type",
        "encryptor",
        "hashing_scheme",
        "initial_sequence_id",
        "lazy_start_partitioned_producers",
        "max_pending_messages",
        "max_pending_messages_across_partitions",
        "message_router",
        "message_routing_mode",
        "producer_name",
        "properties",
        "schema",
        "schema_codec",
        "send_timeout_millis",
    )

    def __init__(
        self,
        *,
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
        hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME,
    ) -> None:
        compression_type = CompressionType(compression_type)
        batching_type = BatchingType(batching_type)
        message_routing_mode = PartitionsRoutingMode(message_routing_mode)
        access_mode = ProducerAccessMode(access_mode)
        hashing_scheme = HashingScheme(hashing_scheme)
        if compression_type == CompressionType.SNAPPY:
            raise Unsupported("CompressionType.SNAPPY is not supported by the Magnetar client; use LZ4, ZLib or ZSTD")
        if batching_max_messages < 1 or batching_max_allowed_size_in_bytes < 1:
            raise ValueError("batching limits must be positive")
        if max_pending_messages < 1:
            raise ValueError("max_pending_messages must be positive")
        if max_pending_messages_across_partitions < 1:
            raise ValueError("max_pending_messages_across_partitions must be positive")
        if initial_sequence_id is not None and (
            type(initial_sequence_id) is bool or not isinstance(initial_sequence_id, int)
        ):
            raise ValueError("Argument initial_sequence_id is expected to be either None or of type 'int'")
        if properties is not None and (
            not isinstance(properties, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items())
        ):
            raise ValueError("Argument properties is expected to be either None or a dict of str to str")
        # The schema's wire form, encoder and registry version; None for bytes (``schema_codec``).
        self.schema_codec = producer_schema(schema)
        # End-to-end encryption (``client.crypto``): the public keys load now, so a bad key file fails here.
        self.encryptor = Encryptor([encryption_key], crypto_key_reader) if encryption_key is not None else None
        if message_router is not None:
            if not callable(message_router):
                raise ValueError("message_router must be callable(message, num_partitions) -> partition index")
            message_routing_mode = PartitionsRoutingMode.CustomPartition  # as pulsar's setMessageRouter does
        elif message_routing_mode is PartitionsRoutingMode.CustomPartition:
            raise ValueError("message_routing_mode=PartitionsRoutingMode.CustomPartition needs a message_router")
        key_hasher(hashing_scheme)  # BoostHash: Unsupported, now rather than at the first keyed send
        if chunking_enabled:
            batching_enabled = False  # chunks go one per entry: Pulsar's rule, batching and chunking exclude
        self.producer_name = producer_name
        self.schema = schema
        # pulsar-client passes it on only when truthy (``if initial_sequence_id:``): 0 is "not given".
        self.initial_sequence_id = initial_sequence_id or None
        self.send_timeout_millis = send_timeout_millis
        self.compression_type = compression_type
        self.max_pending_messages = max_pending_messages
        self.max_pending_messages_across_partitions = max_pending_messages_across_partitions
        self.block_if_queue_full = block_if_queue_full
        self.batching_enabled = batching_enabled
        self.batching_max_messages = batching_max_messages if batching_enabled else 1
        self.batching_max_allowed_size_in_bytes = batching_max_allowed_size_in_bytes
        self.batching_max_publish_delay_ms = batching_max_publish_delay_ms
        self.chunking_enabled = bool(chunking_enabled)
        self.message_routing_mode = message_routing_mode
        self.lazy_start_partitioned_producers = bool(lazy_start_partitioned_producers)
        self.properties = dict(properties) if properties else {}
        self.batching_type = batching_type
        self.access_mode = access_mode
        self.message_router = message_router
        self.hashing_scheme = hashing_scheme

    def max_pending_per_partition(self, partitions: int) -> int:
        """Each partition producer's queue on a topic of ``partitions`` partitions (Pulsar's rule):
        ``min(max_pending_messages, max_pending_messages_across_partitions // partitions)``, at least 1."""
        if partitions <= 0:
            return self.max_pending_messages
        return max(1, min(self.max_pending_messages, self.max_pending_messages_across_partitions // partitions))


class PartitionProducer(Attachment):
    """Producer on one (non-partitioned, or single partition) topic, attached to its owner's connection.

    Unacknowledged batches stay in ``_inflight`` (in ``seq`` order, sealed payload kept) whether or
    not the producer is attached. While detached, sealed batches just join that queue; on every
    (re)attach the whole queue is written again, in order, with the same sequence ids and the same
    producer name, before any newer batch: the broker sees one gap-free, ordered stream per
    producer name, and may deduplicate by (producer name, seq). Each batch completes exactly once —
    by its receipt, a non-retryable ``send_error``, its send timeout, or close — because whichever
    comes first pops it from the queue.
    """

    def __init__(self, resolver: Resolver, topic: str, partition: int, config: ProducerConfig) -> None:
        super().__init__(resolver)
        self.topic = topic
        self.partition = partition
        self.producer_id = -1
        self._cfg = config
        self.producer_name = config.producer_name or ""
        # Numbered from initial_sequence_id before the first attach too (a lazily started one sends later).
        self.last_sequence_id = config.initial_sequence_id if config.initial_sequence_id is not None else -1
        self._next_seq = self.last_sequence_id + 1
        self._ever_attached = False
        self.topic_epoch: int | None = None  # granted with exclusive access (R103), shown on reconnects
        # Not registered until its first batch is sealed (lazy_start_partitioned_producers; producer_start).
        self.lazy = False
        self._batching = config.batching_enabled
        self._max_messages = config.batching_max_messages
        self._max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._max_bytes = min(config.batching_max_allowed_size_in_bytes, self._max_message_size)
        self._delay = config.batching_max_publish_delay_ms / 1000.0
        self._timeout = config.send_timeout_millis / 1000.0
        self.max_pending = config.max_pending_messages
        self._compression = config.compression_type
        # The producer's schema (shared by its partitions: one registry version); None for bytes.
        self._schema = config.schema_codec
        # Chunking (``producer/chunking.py``) as the C++ client under pulsar-client decides it: asked for,
        # batching off (``ProducerConfig`` turns it off for chunking), and a persistent topic.
        self._chunking = (
            config.chunking_enabled and not config.batching_enabled and not topic.startswith("non-persistent:")
        )
        self._batch: Batch | None = None
        # Key-based batching keeps one open batch per key here instead of ``_batch``.
        self._keyed: KeyedBatches | None = (
            KeyedBatches() if config.batching_enabled and config.batching_type == BatchingType.KeyBased else None
        )
        self._inflight: deque[Batch] = deque()
        self.pending = 0  # messages in the open batch plus in flight
        self._capacity_waiters: list[asyncio.Future[None]] = []
        self._timeout_handle: asyncio.TimerHandle | None = None
        # Told how many messages completed (either way); the sync layer counts in-flight with it.
        self.completion_listener: Callable[[int], None] | None = None
        # Told when a batch is sealed; the partitioned producer moves round robin on with it.
        self.seal_listener: Callable[[int], None] | None = None

    # ---------------------------------------------------------------- attaching

    async def _attach(self, conn: Connection) -> None:
        """Register as a producer on ``conn``; on success resend every unacknowledged batch in order."""
        pid = self._resolver.next_id()
        # After the first attach the broker-assigned name is kept: deduplication is keyed by it.
        # The access mode, the topic epoch got on an earlier attach and the properties: R102-R104.
        cmd = cmds.producer(
            self.topic,
            pid,
            self.producer_name or self._cfg.producer_name,
            access_mode=self._cfg.access_mode.name,
            epoch=self.topic_epoch,
            metadata=self._cfg.properties,
            schema=self._schema.wire if self._schema is not None else None,
        )
        conn.register_producer(pid, self)
        try:
            answer: cmds.ProducerSuccess = await conn.request(cmd, access_wait_limit(self._cfg.access_mode))
        except BaseException as exc:
            conn.unregister_producer(pid)
            if isinstance(exc, Timeout):  # it may still be created late: do not leave it behind
                conn.request_nowait(cmds.close_producer(pid))
            raise
        if self._closed is not None:  # closed while we were waiting
            conn.unregister_producer(pid)
            conn.request_nowait(cmds.close_producer(pid))
            return
        self.producer_id = pid
        self.producer_name = str(answer.get("producer_name") or self.producer_name)
        if self._schema is not None and answer.get("schema_version") is not None:
            self._schema.version = int(answer["schema_version"])  # R119: the version it was found under
        if self._cfg.access_mode is not ProducerAccessMode.Shared and answer.get("topic_epoch") is not None:
            self.topic_epoch = int(answer["topic_epoch"])
        if not self._ever_attached:
            self._ever_attached = True
            last = answer.get("last_sequence_id")
            if self._cfg.initial_sequence_id is not None:  # given: it wins over the broker's (as in Pulsar)
                last = self._cfg.initial_sequence_id
            if self.pending == 0:  # (a lazily started one may have numbered messages already: keep them)
                self.last_sequence_id = int(last) if last is not None else -1
                self._next_seq = self.last_sequence_id + 1
        self._max_message_size = conn.max_message_size
        self._max_bytes = min(self._cfg.batching_max_allowed_size_in_bytes, conn.max_message_size)
        try:
            for batch in self._inflight:
                if self._schema is not None and batch.meta is not None and "sv" not in batch.meta:
                    self._schema.stamp(batch.meta)  # sealed before any partition had registered (lazy start)
                conn.write(self._send_cmd(batch))
        except MagnetarError as exc:  # the connection died under us: its loss was not ours to see
            conn.unregister_producer(pid)
            raise NotConnected(f"connection to {conn.url} lost while resending: {exc}") from exc
        self._conn = conn
        self._attached.set()

    def _send_cmd(self, batch: Batch) -> cmds.Send:
        meta, payload = batch.meta, batch.payload
        assert meta is not None and payload is not None  # sealed: every batch in _inflight is
        return cmds.send(self.producer_id, batch.first_seq, meta, payload)

    def start_lazily(self) -> None:
        """Register now (``lazy_start_partitioned_producers``: the first batch routed here was just
        sealed; ``producer_start``). It waits in ``_inflight`` meanwhile, as during a reconnection."""
        self.lazy = False
        if self._closed is None and self._conn is None and self._reattach_task is None:
            self._reattach_task = self._loop.create_task(self._reattach(), name=f"magnetar-start {self.topic}")

    def _connection_lost(self, conn: Connection, exc: MagnetarError) -> None:
        if conn is self._conn:
            self._detach(exc)

    def _closed_by_broker(self, conn: Connection) -> None:
        if conn is self._conn:
            self._detach(NotConnected(f"broker {conn.url} closed the producer on {self.topic}"))

    def _registration_broken(self, exc: MagnetarError) -> None:
        """A retryable ``send_error``: drop this registration (telling the broker) and re-attach.

        The broker said the message could not be stored *now* (topic moving, ledger fenced, not
        enough bookies) or that it no longer knows this producer; the message is not failed but
        resent, with everything after it, once the producer is attached again.
        """
        conn = self._conn
        if conn is None:
            return
        conn.unregister_producer(self.producer_id)
        conn.request_nowait(cmds.close_producer(self.producer_id))
        self._detach(exc)

    def _give_up(self, exc: MagnetarError) -> None:
        self._closed = exc
        self._fail_all(exc)

    # ---------------------------------------------------------------- send path

    def send_nowait(
        self,
        content: bytes | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
        callback: SendCallback | None = None,
        *,
        options: MessageOptions | None = None,
        check_capacity: bool = True,
    ) -> SendReceipt:
        """Add a message to the open batch without waiting; raises if refused.

        ``options`` (``message_options``) carries the rarely used ordering key, custom sequence id
        and deliver-at time; a message with any of them, and every message of a key-based batching
        producer, takes ``_send_special``.

        This is the per-message hot path: keep it to checks, one list append and counters.
        """
        if self._closed is not None:
            raise self._closed
        # check_content, inlined: this runs once per message. None is a null value (``has_null_value``).
        if type(content) is not bytes and content is not None and not isinstance(content, bytearray | memoryview):
            raise TypeError(f"Invalid record obj of type {type(content)} - expected type is {bytes}")
        if callback is not None and not callable(callback):
            raise TypeError(f"send callback must be callable(result, msg_id), not {type(callback).__name__}")
        size = len(content) if content is not None else 0
        if size > self._max_message_size and not self._chunking:
            raise MessageTooLarge(
                f"message of {size} bytes exceeds the broker's max_message_size of {self._max_message_size}"
            )
        if check_capacity and self.pending >= self.max_pending:
            raise ProducerQueueIsFull(f"{self.pending} messages pending (max_pending_messages)")
        size += RECORD_OVERHEAD
        if properties:
            for k, v in properties.items():
                size += len(k) + len(v) + 2
        else:
            properties = _NO_PROPERTIES
        # With chunking, a message that may not fit one entry (even compressed) is encoded now and
        # sent whole or in chunks; the margin covers compression that grows incompressible bytes.
        if self._chunking and size + (size >> 7) + 64 > self._max_message_size:
            return self._send_chunked(content, properties, partition_key, event_timestamp, callback, options)
        if options is not None or self._keyed is not None:
            return self._send_special(content, properties, partition_key, event_timestamp, callback, size, options)
        batch = self._batch
        if batch is None:
            batch = self._open_batch()
        elif batch.nbytes + size > self._max_bytes:  # (a full batch by count was sealed already)
            self._seal()
            batch = self._open_batch()
        if partition_key is not None and batch.key is None:
            batch.key = partition_key  # the first key of the batch routes it (WIRE.md R29)
        seq = self._next_seq
        self._next_seq = seq + 1
        records = batch.records
        records.append([content, properties, partition_key, event_timestamp or 0, seq])
        batch.count = n = len(records)
        batch.nbytes += size
        self.pending += 1
        if callback is not None:
            batch.add_callback(n - 1, callback)
        if n >= self._max_messages or batch.nbytes >= self._max_bytes:
            self._seal()
        return SendReceipt(batch, n - 1 if self._batching else -1)

    def _send_special(
        self,
        content: bytes | None,
        properties: dict[str, str],
        partition_key: str | None,
        event_timestamp: int | None,
        callback: SendCallback | None,
        size: int,
        options: MessageOptions | None,
    ) -> SendReceipt:
        """``send_nowait`` for a message with options, or under key-based batching (checks done).

        The key is the ordering key, else the partition key. A delayed message goes alone in its
        entry (sealed at once, after what was open); under key-based batching the message joins its
        key's batch; otherwise the open batch, as on the hot path. A custom sequence id goes in the
        record (what consumers see); the producer's own counter still numbers the ``send`` frames,
        by which receipts are matched. The ordering key, when given, is the record's sixth item.
        """
        ordering_key, sequence_id, deliver_at = options if options is not None else (None, None, None)
        key = partition_key if ordering_key is None else ordering_key
        keyed = self._keyed
        if deliver_at is not None:
            batch = self._open_delayed(key, deliver_at)
        elif keyed is not None:
            batch = self._open_keyed(keyed, key, size)
        else:
            open_batch = self._batch
            if open_batch is None:
                batch = self._open_batch()
            elif open_batch.nbytes + size > self._max_bytes:
                self._seal()
                batch = self._open_batch()
            else:
                batch = open_batch
            if key is not None and batch.key is None:
                batch.key = key
        seq = self._next_seq
        self._next_seq = seq + 1
        record = [content, properties, partition_key, event_timestamp or 0, seq if sequence_id is None else sequence_id]
        if ordering_key is not None:
            record.append(ordering_key)
        records = batch.records
        records.append(record)
        batch.count = n = len(records)
        batch.nbytes += size
        batch.last_seq = seq if sequence_id is None else sequence_id  # a custom id is the one dedup sees
        self.pending += 1
        if callback is not None:
            batch.add_callback(n - 1, callback)
        if deliver_at is not None:
            self._seal_batch(batch)
            return SendReceipt(batch, -1)
        if keyed is not None:
            keyed.count += 1
            keyed.nbytes += size
            if keyed.count >= self._max_messages or keyed.nbytes >= self._max_bytes:
                self._seal()
        elif n >= self._max_messages or batch.nbytes >= self._max_bytes:
            self._seal()
        return SendReceipt(batch, n - 1 if self._batching else -1)

    def _send_chunked(
        self,
        content: bytes | None,
        properties: dict[str, str],
        partition_key: str | None,
        event_timestamp: int | None,
        callback: SendCallback | None,
        options: MessageOptions | None,
    ) -> SendReceipt:
        """A message that may exceed ``max_message_size``, with chunking on (checks done).

        Encoded at once as a one-record entry (the producer does not batch); if the payload fits it
        goes as that one entry, otherwise as chunks (``chunking.split_payload``) that share its
        sequence id and count as one pending message. Whatever was open is sealed first, so send
        order is kept. The receipt answers the chunked ``MessageId`` (last chunk, and first chunk).
        """
        ordering_key, sequence_id, deliver_at = options if options is not None else (None, None, None)
        key = partition_key if ordering_key is None else ordering_key
        self._seal()
        seq = self._next_seq
        record = [content, properties, partition_key, event_timestamp or 0, seq if sequence_id is None else sequence_id]
        if ordering_key is not None:
            record.append(ordering_key)
        try:
            meta, payload = encode_batch(
                [record],
                producer_name=self.producer_name,
                first_sequence_id=seq,
                compression=self._compression,
                batched=False,
                key=key,
                deliver_at=deliver_at,
            )
        except (TypeError, ValueError) as exc:  # e.g. a property value msgpack cannot encode
            raise MagnetarError(f"cannot encode message: {exc}") from exc
        if self._schema is not None:  # every chunk copies it from here (R122)
            self._schema.stamp(meta)
        if self._cfg.encryptor is not None:  # the whole message, before it is cut into chunks
            payload = self._cfg.encryptor.seal(meta, payload)
        if sequence_id is not None:  # the message's own sequence id, for deduplication (as ``Batch.encode``)
            meta["seq"] = sequence_id
        self._next_seq = seq + 1
        now = self._loop.time()
        batches: list[Batch]
        if len(payload) <= self._max_message_size:
            whole = Batch(seq, now, self._loop.create_future(), batched=False, key=key, deliver_at=deliver_at)
            whole.count = 1
            whole.meta = meta
            whole.payload = payload
            batches = [whole]
            receipt = SendReceipt(whole, -1)
        else:
            uuid = chunk_uuid(self.producer_name, seq if sequence_id is None else sequence_id)
            chunks = split_payload(meta, payload, self._max_message_size, uuid)
            batches = list(make_chunk_batches(chunks, seq, now, self._loop))
            receipt = ChunkedSendReceipt(batches[-1], -1)
        if callback is not None:
            batches[-1].add_callback(-1, callback)
        self.pending += 1
        if self.seal_listener is not None:
            self.seal_listener(self.partition)
        for batch in batches:
            self._queue_sealed(batch)
        return receipt

    def _queue_sealed(self, batch: Batch) -> None:
        """Put a sealed batch in flight: queued for receipts, written when attached, timed out."""
        self._inflight.append(batch)
        if self.lazy:
            self.start_lazily()
        conn = self._conn
        if conn is not None:
            meta, payload = batch.meta, batch.payload
            assert meta is not None and payload is not None
            try:
                conn.write(cmds.send(self.producer_id, batch.first_seq, meta, payload))
            except MagnetarError as exc:  # closed, and we were not told yet: keep it for the resend
                self._detach(exc)
        if self._timeout_handle is None and self._timeout > 0:
            self._timeout_handle = self._loop.call_at(batch.opened_at + self._timeout, self._check_timeouts)

    async def wait_for_capacity(self) -> None:
        """Return once fewer than ``max_pending_messages`` are pending."""
        while self.pending >= self.max_pending:
            if self._closed is not None:
                raise self._closed
            fut: asyncio.Future[None] = self._loop.create_future()
            self._capacity_waiters.append(fut)
            await fut

    async def wait_for_capacity_or_raise(self) -> None:
        """Wait for room if the producer blocks when full; otherwise refuse at once."""
        if not self._cfg.block_if_queue_full:
            raise ProducerQueueIsFull(f"{self.pending} messages pending (max_pending_messages)")
        await self.wait_for_capacity()

    def _open_batch(self) -> Batch:
        now = self._loop.time()
        batch = self._batch = Batch(self._next_seq, now, self._loop.create_future(), batched=self._batching)
        if self._batching:
            self._loop.call_at(now + self._delay, self._on_batch_timer, batch)
        return batch

    def _on_batch_timer(self, batch: Batch) -> None:
        if self._batch is batch:
            self._seal()

    def _open_keyed(self, keyed: KeyedBatches, key: str | None, size: int) -> Batch:
        """The open batch of ``key`` under key-based batching (sealing them all first if this would overflow)."""
        if keyed.count and keyed.nbytes + size > self._max_bytes:
            self._seal()
        batches = keyed.batches
        batch = batches.get(key)
        if batch is None:
            now = self._loop.time()
            if not batches:  # the delay runs from the first message of the whole container
                self._loop.call_at(now + self._delay, self._on_keyed_timer, batches)
            batch = batches[key] = Batch(self._next_seq, now, self._loop.create_future(), key=key)
        return batch

    def _on_keyed_timer(self, batches: dict[str | None, Batch]) -> None:
        keyed = self._keyed
        if keyed is not None and keyed.batches is batches and batches:
            self._seal()

    def _open_delayed(self, key: str | None, deliver_at: int) -> Batch:
        """A batch of its own for a delayed message, after sealing what is open (send order is kept)."""
        self._seal()
        future = self._loop.create_future()
        return Batch(self._next_seq, self._loop.time(), future, batched=False, key=key, deliver_at=deliver_at)

    def _seal(self) -> None:
        """Seal every open batch (the default one, or each key's under key-based batching)."""
        batch = self._batch
        if batch is not None:
            self._batch = None
            self._seal_batch(batch)
        keyed = self._keyed
        if keyed is not None and keyed.batches:
            for batch in keyed.take():
                self._seal_batch(batch)

    def _seal_batch(self, batch: Batch) -> None:
        """Encode one batch (one msgpack + compress + CRC) and queue its ``send`` frame.

        Detached, the sealed batch only joins ``_inflight``; the next attach sends it.
        """
        try:
            meta, payload = batch.encode(producer_name=self.producer_name, compression=self._compression)
            if self._schema is not None:
                self._schema.stamp(meta)  # R122, before encryption seals the entry
            if self._cfg.encryptor is not None:  # after compression, as Pulsar (``client.crypto``)
                payload = self._cfg.encryptor.seal(meta, payload)
        except (TypeError, ValueError) as exc:  # e.g. a property value msgpack cannot encode
            self._complete(batch, MagnetarError(f"cannot encode batch: {exc}"))
            return
        except MagnetarError as exc:  # CryptoError: a key file became unreadable at a data key refresh
            self._complete(batch, exc)
            return
        if self.seal_listener is not None:
            self.seal_listener(self.partition)
        if len(payload) > self._max_message_size:
            self._complete(
                batch,
                MessageTooLarge(
                    f"batch of {len(payload)} bytes exceeds the broker's max_message_size of {self._max_message_size}"
                ),
            )
            return
        batch.meta = meta
        batch.payload = payload
        self._inflight.append(batch)
        if self.lazy:
            self.start_lazily()
        conn = self._conn
        if conn is not None:
            try:
                conn.write(cmds.send(self.producer_id, batch.first_seq, meta, payload))
            except MagnetarError as exc:  # closed, and we were not told yet: keep it for the resend
                self._detach(exc)
        if self._timeout_handle is None and self._timeout > 0:
            self._timeout_handle = self._loop.call_at(batch.opened_at + self._timeout, self._check_timeouts)

    # ---------------------------------------------------------------- completions

    def _complete(self, batch: Batch, exc: MagnetarError | None, ledger: int = -1, entry: int = -1) -> None:
        batch.payload = None  # receipts may be held long after; the bytes are not needed any more
        batch.meta = None
        if exc is None:
            batch.resolve(ledger, entry, self.partition)
        else:
            batch.fail(exc)
        self.pending -= batch.count
        if self.completion_listener is not None:
            self.completion_listener(batch.count)
        if self._capacity_waiters and self.pending < self.max_pending:
            waiters, self._capacity_waiters = self._capacity_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _on_receipt(self, seq: int, ledger: int, entry: int) -> None:
        inflight = self._inflight
        while inflight:
            head = inflight[0]
            if head.first_seq > seq:
                return  # a late receipt for a batch that already timed out
            inflight.popleft()
            if head.first_seq == seq:
                last = head.first_seq + head.count - 1
                self.last_sequence_id = last if head.last_seq < last else head.last_seq
                self._complete(head, None, ledger, entry)
                return
            # Receipts come in seq order, so an older batch without one was lost by the broker.
            self._complete(head, MagnetarError(f"broker skipped the receipt for seq {head.first_seq}"))

    def _on_send_error(self, seq: int, exc: MagnetarError) -> None:
        if isinstance(exc, RetryableError | AlreadyClosed):
            self._registration_broken(exc)
            return
        inflight = self._inflight
        while inflight and inflight[0].first_seq <= seq:
            head = inflight.popleft()
            self._complete(head, exc if head.first_seq == seq else MagnetarError("send lost"))
            if head.first_seq == seq:
                return

    def _check_timeouts(self) -> None:
        self._timeout_handle = None
        now = self._loop.time()
        inflight = self._inflight
        if inflight and inflight[0].opened_at + self._timeout <= now:
            state = "" if self._conn is not None else " (the producer is disconnected and reconnecting)"
            exc = Timeout(
                f"message to {self.topic} not acknowledged within {self._cfg.send_timeout_millis} ms"
                f" (send_timeout_millis){state}"
            )
            while inflight and inflight[0].opened_at + self._timeout <= now:
                self._complete(inflight.popleft(), exc)
        if inflight:
            self._timeout_handle = self._loop.call_at(inflight[0].opened_at + self._timeout, self._check_timeouts)

    def _fail_all(self, exc: MagnetarError) -> None:
        if self._batch is not None:
            batch, self._batch = self._batch, None
            self._complete(batch, exc)
        if self._keyed is not None:
            for batch in self._keyed.take():
                self._complete(batch, exc)
        while self._inflight:
            self._complete(self._inflight.popleft(), exc)
        if self._timeout_handle is not None:
            self._timeout_handle.cancel()
            self._timeout_handle = None
        waiters, self._capacity_waiters = self._capacity_waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(exc)
                w.exception()

    # ---------------------------------------------------------------- flush / close

    def seal_open_batch(self) -> None:
        self._seal()

    async def flush(self) -> None:
        """Send the open batch now and wait until every pending message has an outcome."""
        self._seal()
        if self._inflight:
            await asyncio.wait([self._inflight[-1].future])

    async def close(self) -> None:
        """Flush (while attached, for at most the operation timeout), then close on the broker.

        With the broker gone and ``send_timeout_millis=0`` a flush could wait forever, so close
        waits at most the operation timeout, and not at all when the producer is already
        detached (as Pulsar's close, which never waits for a reconnection). Whatever is still
        unacknowledged then fails with ``AlreadyClosed``: its outcome is unknown, it may have
        been stored.
        """
        if self._closed is not None:
            return
        limit = self._resolver.operation_timeout
        deadline = self._loop.time() + limit
        self._seal()
        if self._inflight and self._conn is not None:
            await asyncio.wait([self._inflight[-1].future], timeout=limit)
        self._closed = AlreadyClosed(f"producer on {self.topic} is closed")
        await self._stop_reattaching()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if not conn.closed:
                    remaining = max(deadline - self._loop.time(), 0.001)
                    await conn.request(cmds.close_producer(self.producer_id), remaining)
            except (NotConnected, Timeout) as exc:
                log.debug("close_producer on %s: %s", self.topic, exc)
            finally:
                conn.unregister_producer(self.producer_id)
        unacknowledged = bool(self._inflight) or self._batch is not None or bool(self._keyed and self._keyed.batches)
        self._fail_all(
            AlreadyClosed(f"producer on {self.topic} closed before the message was acknowledged")
            if unacknowledged
            else self._closed
        )


class Producer:
    """A producer on a topic, partitioned or not (``client.create_producer`` makes one).

    ``send`` waits for the broker's receipt; ``send_async`` returns a ``SendReceipt`` as soon as the
    message is queued, so many sends can be in flight (await the receipts, in any order, later).
    """

    def __init__(
        self,
        topic: str,
        partitions: list[PartitionProducer],
        partitioned: bool,
        config: ProducerConfig | None = None,
    ) -> None:
        self._topic = topic
        self._parts = partitions
        self._partitioned = partitioned
        self._config = config if config is not None else ProducerConfig()
        codec = self._config.schema_codec
        # Turns a schema producer's objects into payloads at the call; None for bytes producers.
        self._encode: Callable[[Any], bytes | None] | None = codec.encode if codec is not None else None
        self._closing = False
        # Keyed / round robin / single partition routing (hot path), or the user's message_router.
        self._router: RoundRobinRouter | SinglePartitionRouter | None = None
        self._custom: CustomRouter | None = None
        if partitioned:
            cfg = self._config
            router = make_router(cfg.message_routing_mode, len(partitions), cfg.hashing_scheme, cfg.message_router)
            if isinstance(router, CustomRouter):
                self._custom = router
            else:
                self._router = router
            per_partition = cfg.max_pending_per_partition(len(partitions))
            for p in partitions:
                p.seal_listener = router.batch_sent
                p.max_pending = per_partition

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        # The first partition's, or (lazily started, partition 0 not yet registered) the first one known.
        return next((p.producer_name for p in self._parts if p.producer_name), "")

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id for p in self._parts)

    def is_connected(self) -> bool:
        """Whether the producer is open and every started partition producer is registered on a
        live connection (as Pulsar's ``isConnected``; a lazily started one counts once started)."""
        return not self._closing and all(p.connected for p in self._parts if not p.lazy)

    @property
    def partitions(self) -> list[PartitionProducer]:
        return self._parts

    @property
    def closed(self) -> bool:
        return self._closing

    def _pick(
        self,
        content: bytes | None,
        properties: dict[str, str] | None,
        partition_key: str | None,
        event_timestamp: int | None,
        options: MessageOptions | None,
    ) -> PartitionProducer:
        """The partition producer a message goes to (``routing``); raises if a ``message_router`` fails."""
        router = self._router
        if router is not None:
            return self._parts[router.choose(partition_key)]
        custom = self._custom
        if custom is None:
            return self._parts[0]
        ordering_key = options[0] if options is not None else None
        return self._parts[custom.route(content, properties, partition_key, event_timestamp, ordering_key)]

    def _add_partitions(self, parts: Sequence[PartitionProducer]) -> None:
        """Take in the (attached) producers of partitions added to the topic, and route to them from now on.

        ``parts`` are partitions ``len(self.partitions)`` onwards, in order. They get the hooks the
        first partition has (the router's seal listener, the blocking producer's completion
        counter) and its queue size, and the routers are resized: keyed messages hash over the new
        count from now on, as in Pulsar.
        """
        first = self._parts[0]
        for i, part in enumerate(parts, start=len(self._parts)):
            if part.partition != i:
                raise ValueError(f"partition producers must be added in order: expected {i}, got {part.partition}")
            part.seal_listener = first.seal_listener
            part.completion_listener = first.completion_listener
            part.max_pending = first.max_pending
        self._parts.extend(parts)
        n = len(self._parts)
        if self._router is not None:
            self._router.resize(n)
        if self._custom is not None:
            self._custom.resize(n)

    async def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish one message and wait until it is durable; returns its id.

        Arguments as ``pulsar.asyncio.Producer.send``. ``replication_clusters`` and
        ``disable_replication`` are accepted and ignored: Magnetar has no geo-replication.
        """
        receipt = await self.send_async(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            bool(disable_replication),
            event_timestamp,
            deliver_at,
            deliver_after,
        )
        return await receipt

    async def send_async(
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
        callback: SendCallback | None = None,
    ) -> SendReceipt:
        """Queue one message (waiting only for room under ``max_pending_messages``); await the receipt.

        The message arguments are ``send``'s; ``callback(result, msg_id)``, if given, is also called
        with the outcome.
        """
        if self._encode is not None:
            content = self._encode(content)  # TypeError for a wrong type, before anything is queued
        options = (
            None
            if ordering_key is None and sequence_id is None and deliver_at is None and deliver_after is None
            else message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        )
        router = self._router
        if router is not None:
            part = self._parts[router.choose(partition_key)]
        elif self._custom is None:
            part = self._parts[0]
        else:
            part = self._pick(content, properties, partition_key, event_timestamp, options)
        if part.pending >= part.max_pending:
            await part.wait_for_capacity_or_raise()
        return part.send_nowait(content, properties, partition_key, event_timestamp, callback, options=options)

    def send_nowait(
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
        callback: SendCallback | None = None,
    ) -> SendReceipt:
        """Queue one message without waiting; raises ``ProducerQueueIsFull`` when there is no room."""
        if self._encode is not None:
            content = self._encode(content)
        options = message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        return self._pick(content, properties, partition_key, event_timestamp, options).send_nowait(
            content, properties, partition_key, event_timestamp, callback, options=options
        )

    def _enqueue(
        self,
        content: bytes | None,
        properties: dict[str, str] | None,
        partition_key: str | None,
        event_timestamp: int | None,
        callback: SendCallback | None,
        options: MessageOptions | None = None,
    ) -> SendReceipt:
        """``send_nowait`` with the options already checked and worked out (``message_options``).

        The blocking producer's bulk hand-over uses it: the options were checked, and
        ``deliver_after`` turned into a time, in the caller's thread at the call, not later when
        the loop gets to the message.
        """
        return self._pick(content, properties, partition_key, event_timestamp, options).send_nowait(
            content, properties, partition_key, event_timestamp, callback, options=options
        )

    async def flush(self) -> None:
        """Send buffered batches now and wait for every pending message's outcome."""
        await asyncio.gather(*(p.flush() for p in self._parts))

    async def close(self) -> None:
        """Flush, then close the producer on the broker."""
        self._closing = True  # also stops taking in added partitions
        await asyncio.gather(*(p.close() for p in self._parts))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
