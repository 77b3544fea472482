"""Asyncio producers: one ``PartitionProducer`` per (partition) topic, and the public ``Producer``.

``PartitionProducer`` owns the send path: batching (count, bytes, delay), sequence ids, the
in-flight queue matched against receipts (the broker answers in ``seq`` order, so matching is a
``popleft``), the send timeout, back-pressure through ``max_pending_messages``, and (through
``reconnect.Attachment``) staying attached to the topic's owner, resending what is unacknowledged. ``Producer``
is what users hold: for a partitioned topic it routes each message to a partition
(``routing.RoundRobinRouter``), otherwise it forwards to its single partition producer.

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
from collections.abc import Callable
from datetime import timedelta

from magnetar.client.batch_builder import RECORD_OVERHEAD, Batch, KeyedBatches, SendCallback, SendReceipt
from magnetar.client.connection import Connection
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.options import BatchingType
from magnetar.client.reconnect import Attachment, Resolver
from magnetar.client.routing import RoundRobinRouter
from magnetar.protocol import commands as cmds
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
    (``TypeError``), rather than later on the client's loop thread."""
    if type(content) is not bytes and not isinstance(content, bytearray | memoryview):
        raise TypeError(f"message content must be bytes, not {type(content).__name__}")


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
    """The options of ``create_producer``, validated once (names and defaults as Pulsar's)."""

    __slots__ = (
        "batching_enabled",
        "batching_max_allowed_size_in_bytes",
        "batching_max_messages",
        "batching_max_publish_delay_ms",
        "batching_type",
        "block_if_queue_full",
        "compression_type",
        "max_pending_messages",
        "producer_name",
        "send_timeout_millis",
    )

    def __init__(
        self,
        *,
        producer_name: str | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        block_if_queue_full: bool = True,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10,
        batching_type: BatchingType = BatchingType.Default,
    ) -> None:
        compression_type = CompressionType(compression_type)
        batching_type = BatchingType(batching_type)
        if compression_type == CompressionType.SNAPPY:
            raise Unsupported("CompressionType.SNAPPY is not supported by the Magnetar client; use LZ4, ZLib or ZSTD")
        if batching_max_messages < 1 or batching_max_allowed_size_in_bytes < 1:
            raise ValueError("batching limits must be positive")
        if max_pending_messages < 1:
            raise ValueError("max_pending_messages must be positive")
        self.producer_name = producer_name
        self.send_timeout_millis = send_timeout_millis
        self.compression_type = compression_type
        self.max_pending_messages = max_pending_messages
        self.block_if_queue_full = block_if_queue_full
        self.batching_enabled = batching_enabled
        self.batching_max_messages = batching_max_messages if batching_enabled else 1
        self.batching_max_allowed_size_in_bytes = batching_max_allowed_size_in_bytes
        self.batching_max_publish_delay_ms = batching_max_publish_delay_ms
        self.batching_type = batching_type


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
        self.last_sequence_id = -1
        self._next_seq = 0
        self._ever_attached = False
        self._batching = config.batching_enabled
        self._max_messages = config.batching_max_messages
        self._max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._max_bytes = min(config.batching_max_allowed_size_in_bytes, self._max_message_size)
        self._delay = config.batching_max_publish_delay_ms / 1000.0
        self._timeout = config.send_timeout_millis / 1000.0
        self.max_pending = config.max_pending_messages
        self._compression = config.compression_type
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
        cmd = cmds.producer(self.topic, pid, self.producer_name or self._cfg.producer_name)
        conn.register_producer(pid, self)
        try:
            answer: cmds.ProducerSuccess = await conn.request(cmd)
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
        if not self._ever_attached:
            self._ever_attached = True
            last = answer.get("last_sequence_id")
            self.last_sequence_id = int(last) if last is not None else -1
            self._next_seq = self.last_sequence_id + 1
        self._max_message_size = conn.max_message_size
        self._max_bytes = min(self._cfg.batching_max_allowed_size_in_bytes, conn.max_message_size)
        try:
            for batch in self._inflight:
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
        content: bytes,
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
        # check_content, inlined: this runs once per message.
        if type(content) is not bytes and not isinstance(content, bytearray | memoryview):
            raise TypeError(f"message content must be bytes, not {type(content).__name__}")
        if callback is not None and not callable(callback):
            raise TypeError(f"send callback must be callable(result, msg_id), not {type(callback).__name__}")
        size = len(content)
        if size > self._max_message_size:
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
        content: bytes,
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
        batch.last_seq = seq
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
        except (TypeError, ValueError) as exc:  # e.g. a property value msgpack cannot encode
            self._complete(batch, MagnetarError(f"cannot encode batch: {exc}"))
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

    def __init__(self, topic: str, partitions: list[PartitionProducer], partitioned: bool) -> None:
        self._topic = topic
        self._parts = partitions
        self._partitioned = partitioned
        self._router = RoundRobinRouter(len(partitions)) if partitioned else None
        if self._router is not None:
            router = self._router
            for p in partitions:
                p.seal_listener = router.batch_sent

    def topic(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._parts[0].producer_name

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id for p in self._parts)

    @property
    def partitions(self) -> list[PartitionProducer]:
        return self._parts

    def _pick(self, partition_key: str | None) -> PartitionProducer:
        router = self._router
        if router is None:
            return self._parts[0]
        return self._parts[router.choose(partition_key)]

    async def send(
        self,
        content: bytes,
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
            disable_replication,
            event_timestamp,
            deliver_at,
            deliver_after,
        )
        return await receipt

    async def send_async(
        self,
        content: bytes,
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
        options = (
            None
            if ordering_key is None and sequence_id is None and deliver_at is None and deliver_after is None
            else message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        )
        router = self._router
        part = self._parts[0] if router is None else self._parts[router.choose(partition_key)]
        if part.pending >= part.max_pending:
            await part.wait_for_capacity_or_raise()
        return part.send_nowait(content, properties, partition_key, event_timestamp, callback, options=options)

    def send_nowait(
        self,
        content: bytes,
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
        options = message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        return self._pick(partition_key).send_nowait(
            content, properties, partition_key, event_timestamp, callback, options=options
        )

    def _enqueue(
        self,
        content: bytes,
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
        return self._pick(partition_key).send_nowait(
            content, properties, partition_key, event_timestamp, callback, options=options
        )

    async def flush(self) -> None:
        """Send buffered batches now and wait for every pending message's outcome."""
        await asyncio.gather(*(p.flush() for p in self._parts))

    async def close(self) -> None:
        """Flush, then close the producer on the broker."""
        await asyncio.gather(*(p.close() for p in self._parts))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
