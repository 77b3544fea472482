"""Asyncio consumers: one ``PartitionConsumer`` per (partition) topic, merged by ``Consumer``.

``PartitionConsumer`` speaks to one broker: it subscribes, grants permits, verifies and decodes
each pushed entry (one ``decode_batch`` — CRC, decompress, one msgpack call — per entry), and
batches acknowledgements. ``Consumer`` is what users hold: one receive queue fed by every
partition (of one topic, or of several for multi-topic and pattern subscriptions: ``_add_parts``),
``receive``/``async for``, and acks routed back to the partition the message came from.

Acks are grouped as Pulsar's client groups them (``ackGroupingTimeMs`` 100, ``ackGroupingMaxSize``
1,000): individual acks wait up to ``ACK_GROUPING_SECONDS`` in a list, or until
``ACK_GROUPING_MAX`` are pending, and go out as one ``ack`` frame (with a ``rid``). Cumulative and
batch-index acks, and redeliveries, go out at the end of the loop iteration and take the grouped
acks with them. One frame per message cost the consumer and the broker a frame each, and the broker
a cursor write every few milliseconds, at 5,000 msg/s. The broker answers ``ack_response`` once
the acks are durable; ``close()``, ``seek`` and ``redeliver_unacknowledged_messages`` flush first
(and ``close()`` waits for the answers), so acks made before ``close`` are durable when it
returns. With ``batch_index_ack_enabled`` an ack of one message of a batch goes out at once as a
``batch_acks`` item (WIRE.md R20c); without it, the entry is acked when its last message is.
Either way an entry redelivered with ``acked`` indexes never hands those out again.

Redelivery follows Pulsar's client (``redelivery``): ``negative_acknowledge`` redelivers after
``negative_ack_redelivery_delay_ms`` (or a back-off), ``unacked_messages_timeout_ms`` redelivers
what was handed out and not acked in time, and both send ``redeliver`` with the entries' positions
(on every subscription type: Pulsar redelivers *everything* unacknowledged on Exclusive and
Failover to keep order; we redeliver what is due, and say so in the package docstring). With a
``dead_letter_policy`` or ``retry_enable``, entries past ``max_redeliver_count`` go to the dead
letter topic instead (``dead_letter``), and ``reconsume_later`` goes through the retry topic.

``seek`` (by message id or publish time) moves the subscription; messages that were queued or in
flight for the old position are dropped: the partition consumer ignores every entry pushed
between sending ``seek`` and the broker's answer (the answer arrives after all of them on the
same connection, and resolves the request future at once, before later frames are dispatched).

Each ``PartitionConsumer`` re-subscribes on its own when its broker goes away or hands the topic
over (``reconnect.Attachment``; what is kept and what is dropped is in its class docstring), so a
partitioned consumer keeps receiving from the partitions that were not affected.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timedelta
from itertools import repeat
from typing import Any

from magnetar.client.config.consumer import ConsumerConfig
from magnetar.client.consumer.acks import BatchAckTracker, FlowPermits, Position
from magnetar.client.consumer.batch_receive import collect
from magnetar.client.consumer.blocked_receivers import BlockedReceivers
from magnetar.client.consumer.chunks import ChunkAssembler, ChunkedMessage, is_chunk
from magnetar.client.consumer.dead_letter import (
    DELAY_TIME,
    RECONSUMETIMES,
    RETRY_GROUP_TOPIC_SUFFIX,
    DeadLetters,
    delay_millis,
    letter_properties,
    retry_letter_topic,
)
from magnetar.client.consumer.redelivery import AckTimeoutTracker, NegativeAckTracker
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError
from magnetar.client.message import EntryInfo, Message
from magnetar.client.net.connection import Connection
from magnetar.client.net.reconnect import Attachment, Resolver
from magnetar.client.options import ConsumerType, KeySharedMode
from magnetar.client.schema_codec import MessageDecoder, WriterSchemaGate, WriterSchemas, message_decoder
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import META_BATCHED, META_COUNT, META_CRC, META_PUBLISH_TIME, decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import META_ENCRYPTION_KEYS, META_NUM_CHUNKS, EntryMeta
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, NotConnected, Timeout, Unsupported
from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

# Individual acks are sent after this long, or once this many are pending (Pulsar's C++ client's
# ackGroupingTimeMs and ackGroupingMaxSize defaults, which its Python client uses).
ACK_GROUPING_SECONDS = 0.1
ACK_GROUPING_MAX = 1_000


# _OWNER: a message knows its partition consumer as a ``message.MessageOwner`` (the message module
# does not import this one); every owner is a ``PartitionConsumer``, and the per-message paths
# below read its internals through a local annotated as one: no cast call, nothing at run time.


def _is_sentinel(mid: MessageId) -> bool:
    return mid == EARLIEST or mid == LATEST


class PartitionConsumer(Attachment):
    """A consumer on one (non-partitioned, or single partition) topic, attached to its owner's connection.

    On every re-attach (``reconnect.Attachment``) it subscribes again with the same subscription,
    type and consumer name, and starts afresh as Pulsar's consumer does: the messages still queued
    for the application are dropped (the broker redelivers them, they were never acknowledged),
    the permit count restarts at ``receiver_queue_size``, pending negative acks, ack timeouts and
    dead letter candidates are forgotten (everything unacknowledged comes back anyway), and
    ``epoch`` moves on so that messages handed out before the reconnect no longer count towards
    permits of the new registration. Acknowledgements are never dropped: those made while
    detached, and those whose answer was lost with the old connection, are sent on the new
    registration (an ack for an entry the broker already has acked is ignored by it).

    A non-durable one (a reader's, ``durable=False``) has no cursor to come back to: it subscribes
    again from the first message it had queued and not handed out (inclusive), or else from after
    the last one it received, so a reader neither skips nor repeats across a broker restart.
    Within the entry it starts in, it drops the batch indexes before its start id (as Pulsar's
    client does); on the wire it asks for that whole entry (``start_message_id`` with batch -1,
    inclusive), so that how the broker treats batch indexes does not matter.
    """

    def __init__(
        self,
        resolver: Resolver,
        topic: str,
        partition: int,
        config: ConsumerConfig,
        *,
        deliver: Callable[[list[Message]], None],
        on_closed: Callable[[MagnetarError], None],
        discard_queued: Callable[[PartitionConsumer], Sequence[Message] | None],
        durable: bool = True,
        start_message_id: MessageId | None = None,
        start_inclusive: bool = False,
        subscription: str | None = None,
        writer_schemas: WriterSchemas | None = None,
    ) -> None:
        super().__init__(resolver)
        self.topic = topic
        self.partition = partition
        self.consumer_id = -1
        self.epoch = 0
        # Failover: whether the broker says this consumer is the active one (None: not told).
        self.is_active: bool | None = None
        self.config = config
        self._subscription = subscription if subscription is not None else config.subscription_name
        self._type = config.consumer_type
        self._durable = durable
        # Where (re-)subscribing starts; what arrives before it is dropped (see the class docstring).
        self._start: MessageId | None = None
        self._start_inclusive = start_inclusive
        self._skip_before: MessageId | None = None
        self._set_start(start_message_id, start_inclusive)
        self._last_received: MessageId | None = None
        self._deliver = deliver
        self._on_closed = on_closed
        self._discard_queued = discard_queued
        # ``Message.value()`` decodes with it; None for bytes (``schema_codec``).
        self.decoder: MessageDecoder | None = message_decoder(config.schema, topic, writer_schemas)
        self._gate: WriterSchemaGate | None = None
        if self.decoder is not None and self.decoder.needs_writer:
            # Messages wait here, in order, while a writer schema is fetched; dropped with the queue.
            gate = self._gate = WriterSchemaGate(self.decoder, deliver, self._loop)
            self._deliver = gate.deliver
            self._discard_queued = lambda part: [*(discard_queued(part) or ()), *gate.take()]
        self.permits = FlowPermits(config.receiver_queue_size)
        self.tracker = BatchAckTracker()
        self._batch_index_ack = config.batch_index_ack_enabled
        self._acks: list[Position] = []
        # Messages acknowledged since the last flush (a batch's messages count one each, as in
        # Pulsar's grouping tracker): the broker counts unacked messages, not entries, against
        # max_unacked_messages_per_consumer, so a group is bounded in messages.
        self._acked_msgs = 0
        self._batch_acks: dict[Position, set[int]] = {}
        self._cumulative: Position | None = None
        self._flush_scheduled = False
        self._ack_timer: asyncio.TimerHandle | None = None  # the grouping window of individual acks
        # Ack requests awaiting their answer, with the command (resent if the answer is lost).
        self._outstanding: dict[asyncio.Future[cmds.AckResponse], cmds.Ack] = {}
        # Redelivery: entries to redeliver at once (corrupt), nacked ones, ack timeouts.
        self._redeliver_now: set[Position] = set()
        self.nacks = NegativeAckTracker(config.negative_ack_redelivery_delay_ms, config.negative_ack_redelivery_backoff)
        self._nack_timer: asyncio.TimerHandle | None = None
        self.ack_timeouts: AckTimeoutTracker | None = None
        self._tick: asyncio.TimerHandle | None = None
        if config.ack_timeout_enabled:
            assert config.unacked_messages_timeout_ms is not None
            self.ack_timeouts = AckTimeoutTracker(
                config.unacked_messages_timeout_ms, config.ack_timeout_redelivery_backoff
            )
        # Dead letters (set by ``Consumer._add_parts``): candidates by entry, and those being sent.
        self._letters: DeadLetters | None = None
        self._first_topic: Callable[[], str | None] = lambda: None
        self._max_redeliver: int | None = None
        self._dlq_candidates: dict[Position, list[Message]] = {}
        self._dlq_sending: set[Position] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        # A seek in progress: entries pushed before its answer belong to the old position.
        self._seek_fut: asyncio.Future[Any] | None = None
        self._dropped_by_seek: list[Position] = []
        # Chunked messages (``chunks``): the messages being assembled; the chunks of each one
        # delivered, by its last chunk's position (an ack, nack or redelivery of it covers them all);
        # the timer that expires incomplete ones. Kept across reconnects: a redelivered first chunk
        # restarts its message, and a reader resuming after its last message finds its earlier chunks.
        self._chunks = ChunkAssembler(
            config.max_pending_chunked_message,
            config.expire_time_of_incomplete_chunked_message_ms,
            config.auto_ack_oldest_chunked_message_on_queue_full,
        )
        self._chunked: dict[Position, list[Position]] = {}
        self._chunk_timer: asyncio.TimerHandle | None = None

    @property
    def closed(self) -> MagnetarError | None:
        return self._closed

    @property
    def durable(self) -> bool:
        return self._durable

    @property
    def subscription(self) -> str:
        return self._subscription

    def _set_start(self, start: MessageId | None, inclusive: bool) -> None:
        if start is not None and inclusive and start.first_chunk is not None:
            # A chunked message's id, inclusive: the message starts at its first chunk (as Pulsar).
            start = MessageId(start.partition(), *start.first_chunk, -1)
        self._start = start
        self._start_inclusive = inclusive
        self._skip_before = None if start is None or _is_sentinel(start) else start

    def _use_dead_letters(self, letters: DeadLetters, first_topic: Callable[[], str | None]) -> None:
        self._letters = letters
        self._first_topic = first_topic
        self._max_redeliver = letters.max_redeliver_count

    # ---------------------------------------------------------------- attaching

    def _subscribe_cmd(self, cid: int) -> cmds.Subscribe:
        config = self.config
        mode: str | None = None
        ranges: list[list[int]] | None = None
        out_of_order = False
        policy = config.key_shared_policy
        if self._type is ConsumerType.KeyShared and policy is not None:
            mode = policy.key_shared_mode.value
            if policy.key_shared_mode is KeySharedMode.Sticky:
                ranges = [[start, end] for start, end in policy.sticky_ranges]
            out_of_order = policy.allow_out_of_order_delivery
        start: list[int] | None = None
        inclusive = self._start_inclusive
        if self._start is not None:
            s = self._start
            if s.batch_index() >= 0 and not _is_sentinel(s):
                start, inclusive = [s.ledger_id(), s.entry_id(), -1], True  # the whole entry; indexes dropped here
            else:
                start = [s.ledger_id(), s.entry_id(), s.batch_index()]
        return cmds.subscribe(
            self.topic,
            self._subscription,
            cid,
            self._type.value,
            config.initial_position.value,
            config.consumer_name,
            priority_level=config.priority_level,
            key_shared_mode=mode,
            key_ranges=ranges,
            allow_out_of_order=out_of_order,
            durable=self._durable,
            start_message_id=start,
            start_inclusive=inclusive if start is not None else False,
            read_compacted=config.is_read_compacted,
            properties=config.properties,
            schema=self.decoder.wire if self.decoder is not None else None,
        )

    async def _attach(self, conn: Connection) -> None:
        cid = self._resolver.next_id()
        cmd = self._subscribe_cmd(cid)
        # Registered before asking, so an entry pushed right after `success` is not dropped.
        conn.register_consumer(cid, self)
        try:
            await conn.request(cmd)
        except BaseException as exc:
            conn.unregister_consumer(cid)
            if isinstance(exc, Timeout):  # it may exist late, and an exclusive one would lock us out
                conn.request_nowait(cmds.close_consumer(cid))
            raise
        if self._closed is not None:
            conn.unregister_consumer(cid)
            conn.request_nowait(cmds.close_consumer(cid))
            return
        try:
            conn.write(cmds.flow(cid, self.permits.initial()))
        except MagnetarError as exc:
            conn.unregister_consumer(cid)
            raise NotConnected(f"connection to {conn.url} lost while subscribing: {exc}") from exc
        self.consumer_id = cid
        self._conn = conn
        self._attached.set()
        if self._acks or self._batch_acks or self._cumulative is not None:
            self._schedule_flush()
        if self.ack_timeouts is not None and self._tick is None:  # ticks from the first attach to close
            self._tick = self._loop.call_later(self.config.ack_timeout_tick_time_ms / 1000.0, self._on_tick)

    def _connection_lost(self, conn: Connection, exc: MagnetarError) -> None:
        if conn is self._conn:
            self._reset(exc)

    def _closed_by_broker(self, conn: Connection) -> None:
        if conn is self._conn:
            self._reset(NotConnected(f"broker {conn.url} closed the consumer on {self.topic}"))

    def _reset(self, exc: MagnetarError) -> None:
        """Detached: forget what the broker will redeliver anyway, keep the acks, re-attach."""
        self.epoch += 1
        self.permits = FlowPermits(self.permits.queue_size)
        self._forget_redeliveries()
        dropped = self._discard_queued(self)
        # A reader resumes after what it got; on a non-persistent topic every id is 0:0 (nothing
        # is stored), so a start there would filter out everything that comes next.
        if not self._durable and self.topic.startswith("persistent://"):
            if dropped:
                self._set_start(dropped[0].message_id(), True)
            elif self._last_received is not None:
                self._set_start(self._last_received, False)
        self._detach(exc)

    def _forget_redeliveries(self) -> None:
        """Everything unacknowledged comes back (re-subscribe, seek): no nack, timeout or candidate is due."""
        self._redeliver_now.clear()
        self.nacks.clear()
        if self._nack_timer is not None:
            self._nack_timer.cancel()
            self._nack_timer = None
        if self.ack_timeouts is not None:
            self.ack_timeouts.clear()
        self._dlq_candidates.clear()

    def _give_up(self, exc: MagnetarError) -> None:
        self._closed = exc
        self._stop_timers()
        self._on_closed(exc)

    def _stop_timers(self) -> None:
        for handle in (self._nack_timer, self._tick, self._chunk_timer, self._ack_timer):
            if handle is not None:
                handle.cancel()
        self._nack_timer = self._tick = self._chunk_timer = self._ack_timer = None

    # ---------------------------------------------------------------- incoming

    def _on_active_change(self, is_active: bool) -> None:
        """Failover: the broker made this consumer the active one, or a standby (WIRE.md R20b)."""
        self.is_active = is_active

    def _on_message(self, frame: cmds.Message) -> None:
        meta = frame["meta"]
        position = (frame["ledger"], frame["entry"])
        seek = self._seek_fut
        if seek is not None and not seek.done():  # pushed for the position a seek is leaving
            self._dropped_by_seek.append(position)
            self.return_permits(int(meta.get(META_COUNT, 1)) if isinstance(meta, dict) else 1)
            return
        if META_NUM_CHUNKS in meta and is_chunk(meta):
            self._on_chunk(frame, meta, position)
            return
        try:
            if META_ENCRYPTION_KEYS in meta:  # end-to-end encrypted: open it or apply the failure action
                from magnetar.client.encryption.decryption import open_entry

                opened = open_entry(self, meta, frame["payload"], [position])
                if opened is None:
                    return
                meta, records = opened
            else:
                records = decode_batch(meta, frame["payload"])
        except Exception as exc:  # ChecksumError, or undecodable bytes behind a good CRC
            log.warning("dropping entry %s:%s of %s and asking for redelivery: %s", *position, self.topic, exc)
            self._redeliver_now.add(position)
            self._schedule_flush()
            # The broker charged permits for it; the application will never consume it.
            self.return_permits(int(meta.get(META_COUNT, 1)) if isinstance(meta, dict) else 1)
            return
        batched = bool(meta.get(META_BATCHED, True))
        n = len(records)
        redelivery_count = frame.get("redelivery_count", 0)
        info = EntryInfo(position, n, meta.get(META_PUBLISH_TIME, 0), redelivery_count, self, batched, self.epoch, meta)
        if not self._durable:
            self._last_received = MessageId(self.partition, position[0], position[1], n - 1 if batched else -1)
        acked = frame.get("acked")
        limit = self._max_redeliver
        skip_before = self._skip_before
        if (
            not acked
            and (skip_before is None or position > skip_before.position)
            and (limit is None or redelivery_count < limit)
        ):
            # Hot path: nothing to filter.
            if batched:
                info.unacked = self.tracker.track(position, n)
                self._deliver(list(map(Message, records, repeat(info, n), range(n))))
            else:
                self._deliver([Message(r, info, -1) for r in records])
            return
        self._on_filtered_entry(info, records, acked or (), batched)

    def _on_chunk(self, frame: cmds.Message, meta: EntryMeta, position: Position) -> None:
        """One chunk of a chunked message (``chunks``): buffer it, deliver the message once whole.

        Every chunk but the one that completes a message gives its permit back at once (the
        application never sees it), as Pulsar's consumer does. Chunks before where this consumer
        starts are dropped; dead letter handling does not apply to chunked messages.
        """
        payload = frame["payload"]
        if not isinstance(payload, bytes) or crc32c(payload) != meta.get(META_CRC):
            log.warning("dropping chunk %s:%s of %s, asking for redelivery: checksum mismatch", *position, self.topic)
            self._redeliver_now.add(position)
            self._schedule_flush()
            self.return_permits(1)
            return
        skip = self._skip_before
        if skip is not None and (position < skip.position or (position == skip.position and not self._start_inclusive)):
            self.return_permits(1)
            return
        loop = self._loop
        redelivery_count = frame.get("redelivery_count", 0)
        out = self._chunks.add(meta, position, payload, loop.time(), int(time.time() * 1000))
        for p in out.ack:
            self.ack_entry(p)
        if out.untracked and self.ack_timeouts is not None:  # Pulsar's trackMessage: redelivered on timeout
            now = loop.time()
            for p in out.untracked:
                self.ack_timeouts.add(p, redelivery_count, now)
        self._arm_chunk_timer()
        assembled = out.message
        if assembled is None:
            self.return_permits(1)
            return
        try:
            if META_ENCRYPTION_KEYS in assembled.meta:  # encrypted before it was cut into chunks
                from magnetar.client.encryption.decryption import open_entry

                opened = open_entry(self, assembled.meta, assembled.payload, assembled.positions, verify=False)
                if opened is None:
                    return
                assembled.meta, records = opened
            else:
                records = decode_batch(assembled.meta, assembled.payload, verify=False)  # each chunk was verified
        except Exception as exc:  # undecodable behind good checksums: a producer bug; it would never decode
            log.error("dropping undecodable chunked message ending at %s:%s of %s: %s", *position, self.topic, exc)
            for p in assembled.positions:
                self.ack_entry(p)
            self.return_permits(1)
            return
        self._chunked[position] = assembled.positions
        ameta = assembled.meta
        info = EntryInfo(position, 1, ameta.get(META_PUBLISH_TIME, 0), redelivery_count, self, False, self.epoch, ameta)
        if not self._durable:
            self._last_received = MessageId(self.partition, position[0], position[1], -1)
        self._deliver([ChunkedMessage(records[0], info, assembled.positions[0])])

    def _arm_chunk_timer(self) -> None:
        if self._chunk_timer is not None:
            return
        when = self._chunks.next_expiry()
        if when is not None:
            self._chunk_timer = self._loop.call_at(when, self._on_chunk_timer)

    def _on_chunk_timer(self) -> None:
        """Drop (and acknowledge) the chunked messages still incomplete after their expiry time."""
        self._chunk_timer = None
        if self._closed is not None:
            return
        expired = self._chunks.expire(self._loop.time())
        if expired:
            log.info("acknowledging %d chunks of expired incomplete chunked messages of %s", len(expired), self.topic)
            for p in expired:
                self.ack_entry(p)
        self._arm_chunk_timer()

    def _skipped_indexes(self, position: Position, n: int, batched: bool) -> set[int]:
        """Indexes of the entry at ``position`` before where this consumer starts (or was sought to)."""
        start = self._skip_before
        if start is None or position > start.position:
            return set()
        if position < start.position:
            return set(range(n))
        if batched and start.batch_index() >= 0:
            first_kept = start.batch_index() if self._start_inclusive else start.batch_index() + 1
            return set(range(min(first_kept, n)))
        return set() if self._start_inclusive else set(range(n))

    def _on_filtered_entry(self, info: EntryInfo, records: list[Any], acked: Sequence[int], batched: bool) -> None:
        """The slow path of ``_on_message``: drop acked indexes and those before the start id, and
        hold back dead letters."""
        position, n = info.position, len(records)
        skip = self._skipped_indexes(position, n, batched)
        if batched:
            skip.update(acked)
            unacked = info.unacked = self.tracker.track(position, n)
            if unacked is not None:
                unacked.difference_update(skip)  # acknowledged, or before where we start: never handed out
                if not unacked:
                    self.tracker.forget(position)
                    if self._durable:
                        self.ack_entry(position)  # nothing of it is left for us
            messages = [Message(r, info, i) for i, r in enumerate(records) if i not in skip]
        else:
            messages = [] if skip else [Message(records[0], info, -1)]
        held = n - len(messages)
        limit = self._max_redeliver
        if messages and limit is not None and info.redelivery_count >= limit:
            self._dlq_candidates[position] = messages
            if info.redelivery_count > limit:  # its last delivery failed elsewhere: straight to the DLQ
                held += len(messages)
                messages = []
                self._start_dead_letter(position)
        if held:
            self.return_permits(held)
        if messages:
            self._deliver(messages)

    def return_permits(self, n: int) -> None:
        """Count ``n`` messages as consumed; send a ``flow`` when half the queue has been."""
        grant = self.permits.consumed(n)
        if grant:
            self._send(cmds.flow(self.consumer_id, grant))

    def message_consumed(self, info: EntryInfo) -> None:
        """One message of ``info``'s entry was handed to the application (from another thread's queue pop)."""
        if info.epoch == self.epoch:
            self.return_permits(1)
            timeouts = self.ack_timeouts
            if timeouts is not None:
                timeouts.add(info.position, info.redelivery_count, self._loop.time())

    def _send(self, cmd: cmds.Flow | cmds.Redeliver) -> None:
        """Write a fire-and-forget command; detached, it is dropped (the re-subscribe resets that state)."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.write(cmd)
        except MagnetarError as exc:
            log.debug("dropping %s for %s: %s", cmd["t"], self.topic, exc)

    # ---------------------------------------------------------------- acks

    def acknowledge(self, position: Position, index: int) -> None:
        """Individually acknowledge message ``index`` of the entry at ``position`` (-1: not batched)."""
        self._acked_msgs += 1
        chunked = self._chunked
        if chunked:
            chunks = chunked.pop(position, None)
            if chunks is not None:  # a chunked message: every chunk of it (Pulsar acks them all)
                for p in chunks:
                    self.ack_entry(p)
                return
        if index >= 0:
            remaining = self.tracker.get(position)
            if remaining is not None:
                remaining.discard(index)
                if remaining:
                    if self._batch_index_ack:
                        self._batch_ack(position, (index,))
                    return
                self.tracker.forget(position)
        self.ack_entry(position)

    def _batch_ack(self, position: Position, indexes: Sequence[int]) -> None:
        pending = self._batch_acks.get(position)
        if pending is None:
            pending = self._batch_acks[position] = set()
        pending.update(indexes)
        self._schedule_flush()

    def ack_entry(self, position: Position) -> None:
        """Queue an individual ack of a whole entry for the next coalesced ``ack`` frame."""
        self._acks.append(position)
        if self._dlq_candidates:
            self._dlq_candidates.pop(position, None)
        timeouts = self.ack_timeouts
        if timeouts is not None:
            timeouts.discard(position)
        if self._flush_scheduled:
            return
        if len(self._acks) >= ACK_GROUPING_MAX or self._acked_msgs >= ACK_GROUPING_MAX:
            self._schedule_flush()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(ACK_GROUPING_SECONDS, self.flush_acks)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush_acks)

    def acknowledge_cumulative(self, position: Position, index: int) -> None:
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgement is not allowed on a {self._type.value} subscription"
            )
        remaining = self.tracker.get(position)
        before = set(remaining) if self._batch_index_ack and remaining is not None and index >= 0 else None
        target = self.tracker.ack_cumulative(position, index)
        if before is not None:
            still = self.tracker.get(position)
            if still:  # a batch acknowledged part-way: tell the broker which of its indexes
                self._batch_ack(position, sorted(before - still))
        if target is None:
            return
        if self._chunked:
            for p in [p for p in self._chunked if p <= target]:
                del self._chunked[p]
        if self._cumulative is None or target > self._cumulative:
            self._cumulative = target
        if self.ack_timeouts is not None:
            self.ack_timeouts.discard_up_to(target)
        if self._dlq_candidates:
            for p in [p for p in self._dlq_candidates if p <= target]:
                del self._dlq_candidates[p]
        self._schedule_flush()

    def negative_acknowledge(self, position: Position, redelivery_count: int = 0) -> None:
        """Redeliver the entry at ``position`` once its delay has passed (see ``redelivery``)."""
        if self.ack_timeouts is not None:
            self.ack_timeouts.discard(position)
        self.nacks.add(position, redelivery_count, self._loop.time())
        self._schedule_nack_timer()

    def _schedule_nack_timer(self) -> None:
        deadline = self.nacks.next_deadline()
        timer = self._nack_timer
        if deadline is None:
            if timer is not None:
                timer.cancel()
                self._nack_timer = None
            return
        when = deadline + self.nacks.grouping
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._nack_timer = self._loop.call_at(when, self._on_nack_timer)

    def _on_nack_timer(self) -> None:
        self._nack_timer = None
        due = self.nacks.due(self._loop.time())
        if due:
            self.redeliver(due)
        self._schedule_nack_timer()

    def _on_tick(self) -> None:
        """Every ``ack_timeout_tick_time_ms``: redeliver what was handed out and not acked in time."""
        self._tick = None
        timeouts = self.ack_timeouts
        if self._closed is not None or timeouts is None:
            return
        due = timeouts.due(self._loop.time())
        if due:
            log.debug("%d entries of %s not acknowledged in time: redelivering", len(due), self.topic)
            self.redeliver(due)
        self._tick = self._loop.call_later(self.config.ack_timeout_tick_time_ms / 1000.0, self._on_tick)

    def redeliver(self, positions: Sequence[Position]) -> None:
        """Ask for these entries again, except dead letter candidates, which go to the dead letter topic.

        A chunked message's last chunk stands for every chunk of it.
        """
        chunked = self._chunked
        if chunked:
            positions = [q for p in positions for q in chunked.get(p, (p,))]
        timeouts = self.ack_timeouts
        again: list[Position] = []
        for p in positions:
            if timeouts is not None:
                timeouts.discard(p)
            if p in self._dlq_sending:
                continue
            if p in self._dlq_candidates:
                self._start_dead_letter(p)
            else:
                again.append(p)
        if again:
            self._redeliver_now.update(again)
            self._schedule_flush()

    def redeliver_unacknowledged(self) -> None:
        """Redeliver every unacknowledged entry of this consumer (Pulsar's ``redeliverUnacknowledgedMessages``).

        The messages still queued are dropped here (they come again), so their permits go back.
        """
        self._forget_redeliveries()
        dropped = self._discard_queued(self) or ()
        self.return_permits(sum(1 for m in dropped if m._info.epoch == self.epoch))
        self.flush_acks()  # acks made before it reach the broker first: those are not redelivered
        self._send(cmds.redeliver(self.consumer_id))

    # ---------------------------------------------------------------- dead letters

    def _start_dead_letter(self, position: Position) -> None:
        if position in self._dlq_sending:
            return
        self._dlq_sending.add(position)
        task = self._loop.create_task(self._dead_letter(position), name=f"magnetar-dlq {self.topic}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dead_letter(self, position: Position) -> None:
        """Publish the entry's unacknowledged messages to the dead letter topic, then ack the entry.

        If publishing fails the entry is redelivered instead, as Pulsar's client does.
        """
        letters = self._letters
        try:
            messages = self._dlq_candidates.get(position, [])
            unacked = self.tracker.get(position)
            if unacked is not None:
                messages = [m for m in messages if m._index in unacked]
            if letters is None or not messages:
                return
            topic = letters.dead_letter_topic(self.topic, self._first_topic())
            try:
                for m in messages:
                    await letters.publish_dead_letter(topic, m, letter_properties(m))
            except Exception as exc:
                log.warning("dead letter of %s:%s (%s) failed, redelivering: %s", *position, self.topic, exc)
                self._dlq_candidates.pop(position, None)
                self._redeliver_now.add(position)
                self._schedule_flush()
                return
            self.tracker.forget(position)
            self.ack_entry(position)
        finally:
            self._dlq_sending.discard(position)
            self._dlq_candidates.pop(position, None)

    # ---------------------------------------------------------------- flushing acks

    def flush_acks(self) -> None:
        """Send what was acked (and is due for redelivery) since the last flush: at most one frame of each kind.

        Detached, acks wait for the next attach (which flushes them); redeliveries are dropped,
        since the re-subscribe redelivers every unacknowledged entry anyway.
        """
        self._flush_scheduled = False
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._closed is not None:
            self._acks.clear()
            self._batch_acks.clear()
            self._redeliver_now.clear()
            self._cumulative = None
            return
        if self._conn is None:
            self._redeliver_now.clear()
            return
        if self._acks or self._batch_acks:
            self._acked_msgs = 0
            positions, self._acks = self._acks, []
            batch_acks: list[list[Any]] | None = None
            if self._batch_acks:
                done = set(positions)
                batch_acks = [
                    [p[0], p[1], self.tracker.count(p), sorted(idx)]
                    for p, idx in self._batch_acks.items()
                    if p not in done and self.tracker.count(p)
                ]
                self._batch_acks = {}
            if positions or batch_acks:
                self._ack_request(cmds.ack(self.consumer_id, cmds.ACK_INDIVIDUAL, positions, batch_acks=batch_acks))
        if self._cumulative is not None:
            position, self._cumulative = self._cumulative, None
            self._ack_request(cmds.ack(self.consumer_id, cmds.ACK_CUMULATIVE, [position]))
        if self._redeliver_now:
            positions_again, self._redeliver_now = sorted(self._redeliver_now), set()
            self._send(cmds.redeliver(self.consumer_id, positions_again))

    def _ack_request(self, cmd: cmds.Ack) -> None:
        conn = self._conn
        assert conn is not None
        try:
            fut = conn.request_future(cmd)
        except MagnetarError as exc:  # closed under us before we were told: keep the acks, re-attach
            self._requeue(cmd)
            if self._conn is conn:
                self._reset(exc)
            return
        self._outstanding[fut] = cmd
        fut.add_done_callback(self._ack_done)

    def _ack_done(self, fut: asyncio.Future[cmds.AckResponse]) -> None:
        cmd = self._outstanding.pop(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            return
        if self._closed is None and (self._conn is None or cmd["consumer_id"] != self.consumer_id):
            self._requeue(cmd)  # lost with the old registration: send it on the new one
        else:
            log.warning("acknowledgement on %s failed: %s", self.topic, exc)

    def _requeue(self, cmd: cmds.Ack) -> None:
        positions: list[Position] = [(p[0], p[1]) for p in cmd["positions"]]
        if cmd["kind"] == cmds.ACK_CUMULATIVE:
            if self._cumulative is None or positions[0] > self._cumulative:
                self._cumulative = positions[0]
        else:
            self._acks.extend(positions)
        for item in cmd.get("batch_acks", ()):
            pending = self._batch_acks.setdefault((int(item[0]), int(item[1])), set())
            pending.update(int(i) for i in item[3])
        if self._conn is not None:
            self._schedule_flush()

    @property
    def acks_pending(self) -> bool:
        """Acks not yet confirmed durable by the broker (queued, or sent and unanswered)."""
        return bool(self._acks) or bool(self._batch_acks) or self._cumulative is not None or bool(self._outstanding)

    async def wait_acks_durable(self, limit_seconds: float) -> bool:
        """Flush pending acks and wait until the broker confirms them all; False if time ran out first.

        Spans reconnects: acks lost with a connection are requeued and sent again once attached.
        """
        deadline = self._loop.time() + limit_seconds
        while self.acks_pending and self._closed is None:
            remaining = deadline - self._loop.time()
            if remaining <= 0 or not await self._wait_attached(remaining):
                return False
            self.flush_acks()
            if self._outstanding:
                await asyncio.wait(list(self._outstanding), timeout=max(deadline - self._loop.time(), 0))
        return not self.acks_pending

    # ---------------------------------------------------------------- seek and last message id

    async def _attached_connection(self, what: str) -> Connection:
        if self._closed is not None:
            raise AlreadyClosed(f"consumer on {self.topic} is closed")
        if not await self._wait_attached(self._resolver.operation_timeout) or self._conn is None:
            raise NotConnected(f"{what} on {self.topic}: not connected to its broker")
        return self._conn

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id (it is delivered next) or a publish time (ms).

        What was queued or in flight for the old position is dropped, with its permits given back;
        pending negative acks and ack timeouts are forgotten. For a non-durable consumer the id
        becomes its start (inclusive only with ``start_message_id_inclusive``); for a durable one
        the id itself comes next, and earlier indexes of its batch are skipped.
        """
        if isinstance(target, bool) or not isinstance(target, MessageId | int):
            raise ValueError(f"seek takes a MessageId or a publish time in ms, not {type(target).__name__}")
        conn = await self._attached_connection("seek")
        self.flush_acks()  # acks made before the seek reach the broker before it
        cmd: cmds.Request
        if isinstance(target, MessageId):
            ledger, entry = target.position
            if target.first_chunk is not None and (self._durable or self.config.start_message_id_inclusive):
                ledger, entry = target.first_chunk  # a chunked message is read again from its first chunk
            cmd = cmds.seek(self.consumer_id, [ledger, entry])
        else:
            cmd = cmds.seek_publish_time(self.consumer_id, target)
        dropped = self._discard_queued(self) or ()
        self.return_permits(sum(1 for m in dropped if m._info.epoch == self.epoch))
        self._dropped_by_seek = [m._info.position for m in dropped]
        # The new start holds from the broker's answer on, and entries pushed right behind it are
        # dispatched before this coroutine resumes: set it now (nothing is delivered until then).
        before = (self._start, self._start_inclusive, self._last_received)
        if isinstance(target, int):
            self._set_start(None, False)
        elif self._durable:
            self._set_start(target, True)
        else:
            self._set_start(target, self.config.start_message_id_inclusive)
        self._last_received = None
        self._chunks.clear()  # what was being assembled comes again from the new position
        # Nacks and ack timeouts are of messages from before the seek: they are not due any more
        # (unless the seek fails: then they are redelivered at once, below).
        pending = [*self.nacks.positions(), *(self.ack_timeouts.positions() if self.ack_timeouts else ())]
        self._forget_redeliveries()
        fut = conn.request_future(cmd)
        self._seek_fut = fut
        try:
            done, _ = await asyncio.wait([fut], timeout=self._resolver.operation_timeout)
            if not done:
                fut.cancel()
                raise Timeout(f"seek on {self.topic} got no answer within {self._resolver.operation_timeout}s")
            fut.result()
        except BaseException:
            # The subscription did not move: what we dropped is still unacknowledged there.
            self._set_start(before[0], before[1])
            self._last_received = before[2]
            again = sorted({*self._dropped_by_seek, *pending})
            if again:
                self._redeliver_now.update(again)
                self._schedule_flush()
            raise
        finally:
            self._seek_fut = None
            self._dropped_by_seek = []

    async def get_last_message_id(self) -> tuple[MessageId, tuple[int, int]]:
        """The topic's last message id (all -1 when empty) and the subscription's mark-delete position."""
        conn = await self._attached_connection("get_last_message_id")
        answer: cmds.LastMessageIdResponse = await conn.request(cmds.get_last_message_id(self.consumer_id))
        last = MessageId(self.partition, int(answer["ledger"]), int(answer["entry"]), int(answer["batch"]))
        md = answer["mark_delete"]
        return last, (int(md[0]), int(md[1]))

    # ---------------------------------------------------------------- closing

    async def close(self, *, unsubscribe: bool = False) -> None:
        """Close (or unsubscribe) on the broker, after acks made before it are durable.

        Everything is bounded by the operation timeout: with the broker gone, close gives up
        waiting (logging that acks may not be durable) instead of hanging; unsubscribe raises.
        Dead letters being published finish first, so that their acks are among those.
        """
        if self._closed is not None:
            if unsubscribe:
                raise self._closed
            return
        limit = self._resolver.operation_timeout
        deadline = self._loop.time() + limit
        self._stop_timers()
        if self._gate is not None:
            self._gate.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=limit)
        if not await self.wait_acks_durable(max(deadline - self._loop.time(), 0.001)):
            log.warning("closing consumer on %s: acknowledgements may not be durable (broker unreachable)", self.topic)
        kind = cmds.UNSUBSCRIBE if unsubscribe else cmds.CLOSE_CONSUMER
        attached = await self._wait_attached(deadline - self._loop.time())
        conn = self._conn
        self._closed = AlreadyClosed(f"consumer on {self.topic} is closed")
        for task in list(self._tasks):
            task.cancel()
        await self._stop_reattaching()
        self._conn = None
        try:
            if not attached or conn is None:
                raise NotConnected(f"{kind} on {self.topic}: not connected to its broker")
            cmd = cmds.unsubscribe(self.consumer_id) if unsubscribe else cmds.close_consumer(self.consumer_id)
            await conn.request(cmd, max(deadline - self._loop.time(), 0.001))
        except (NotConnected, Timeout) as exc:
            if unsubscribe:
                raise
            log.debug("%s on %s: %s", kind, self.topic, exc)
        finally:
            if conn is not None:
                conn.unregister_consumer(self.consumer_id)


class TopicTail:
    """Reads topics from their earliest message with non-durable partition consumers, on demand.

    The dead letter index (``dead_letter.TopicScanner``): ``catch_up`` asks each partition for its
    last message id and returns the properties of everything read up to there.
    """

    def __init__(self, resolver: Resolver, topics: Sequence[str]) -> None:
        self._resolver = resolver
        self._topics = list(topics)
        self._parts: list[PartitionConsumer] | None = None
        self._read: list[dict[str, str]] = []
        self._upto: dict[int, Position] = {}
        self._changed = asyncio.Event()
        self._error: MagnetarError | None = None

    async def _open(self) -> list[PartitionConsumer]:
        config = ConsumerConfig(subscription_name=f"reader-{secrets.token_hex(5)}")
        parts: list[PartitionConsumer] = []
        try:
            for topic in self._topics:
                part = PartitionConsumer(
                    self._resolver,
                    topic,
                    TopicName.parse(topic).partition_index,
                    config,
                    deliver=self._on_messages,
                    on_closed=self._on_closed,
                    discard_queued=lambda part: None,
                    durable=False,
                    start_message_id=EARLIEST,
                )
                await part.attach_first()
                parts.append(part)
        except BaseException:
            await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
            raise
        return parts

    def _on_messages(self, messages: list[Message]) -> None:
        for m in messages:
            self._read.append(dict(m.properties()))
        info = messages[-1]._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # (see _OWNER)
        if owner is not None:
            key = id(owner)
            if info.position > self._upto.get(key, (-1, -1)):
                self._upto[key] = info.position
            owner.return_permits(len(messages))
        self._changed.set()

    def _on_closed(self, exc: MagnetarError) -> None:
        self._error = exc
        self._changed.set()

    async def catch_up(self) -> list[dict[str, str]]:
        if self._parts is None:
            self._parts = await self._open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._resolver.operation_timeout
        for part in self._parts:
            last, _ = await part.get_last_message_id()
            if last.entry_id() < 0:
                continue
            target = last.position
            while self._upto.get(id(part), (-1, -1)) < target:
                if self._error is not None:
                    raise self._error
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise Timeout(f"reading {part.topic} up to {last} took longer than the operation timeout")
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    pass
        out, self._read = self._read, []
        return out

    async def close(self) -> None:
        parts, self._parts = self._parts or [], None
        await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)


class Consumer:
    """A subscription's consumer over one topic, every partition of a partitioned topic, or several topics.

    ``receive()`` and ``async for msg in consumer`` return messages in arrival order; across
    partitions the order is the interleaving in which they arrived. ``topic()`` returns the
    ``topic`` it was created with: the topic name for one topic; pulsar-client's multi-topic
    consumer reports a made-up name (``{last topic}-TopicsConsumerFakeName-{random}``) and a pattern
    consumer its pattern, which is for the client to pass.
    """

    def __init__(self, topic: str, config: ConsumerConfig) -> None:
        self._topic = topic
        self._config = config
        self._subscription = config.subscription_name
        self._type = config.consumer_type
        self._parts: list[PartitionConsumer] = []
        self._by_partition: dict[int, list[PartitionConsumer]] = {}
        # Partitioned topics subscribed as such (full name -> partitions subscribed): what the
        # client's partition updater re-reads, to subscribe partitions added later.
        self._partitioned: dict[str, int] = {}
        self._queue: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Threads of the blocking client in receive(), woken from here directly (blocked_receivers.py).
        self._blocked = BlockedReceivers()
        self._error: MagnetarError | None = None
        self._closing = False
        self._letters: DeadLetters | None = None
        if config.max_redeliver_count is not None:
            self._letters = DeadLetters(config, self._open_scanner)

    def _add_parts(self, parts: Sequence[PartitionConsumer]) -> None:
        """Take in partition consumers (of any topic; a multi-topic or pattern consumer adds more later)."""
        for part in parts:
            self._parts.append(part)
            self._by_partition.setdefault(part.partition, []).append(part)
            if self._letters is not None:
                part._use_dead_letters(self._letters, self._first_topic)

    async def _remove_parts(self, parts: Sequence[PartitionConsumer]) -> None:
        """Let go of partition consumers (their topic is gone): drop their queued messages, close them.

        Closing is bounded by the operation timeout and its errors are only logged: the topic may be
        gone with its broker state.
        """
        gone = set(map(id, parts))
        self._parts = [p for p in self._parts if id(p) not in gone]
        self._by_partition = {}
        for p in self._parts:
            self._by_partition.setdefault(p.partition, []).append(p)
        still = {str(TopicName.parse(p.topic).partitioned_base) for p in self._parts}
        self._partitioned = {t: n for t, n in self._partitioned.items() if t in still}
        for part in parts:
            self._discard_queued(part)
        for result in await asyncio.gather(*(p.close() for p in parts), return_exceptions=True):
            if isinstance(result, BaseException):
                log.debug("closing a removed partition consumer: %r", result)

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return self._config.consumer_name or ""

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    @property
    def partitions(self) -> list[PartitionConsumer]:
        return self._parts

    def is_connected(self) -> bool:
        return not self._closing and bool(self._parts) and all(p.connected for p in self._parts)

    def _first_topic(self) -> str | None:
        """The consumer's first topic (partitioned base name), not counting its retry topic: what the
        retry topic and, with retry, the dead letter topic are named after."""
        retry_suffix = f"-{self._subscription}{RETRY_GROUP_TOPIC_SUFFIX}"
        for part in self._parts:
            base = str(TopicName.parse(part.topic).partitioned_base)
            if not base.endswith(retry_suffix):
                return base
        try:
            return str(TopicName.parse(self._topic))
        except MagnetarError:
            return None

    def _open_scanner(self, topics: Sequence[str]) -> TopicTail:
        if not self._parts:
            raise AlreadyClosed("the consumer has no partition consumer to read with")
        return TopicTail(self._parts[0]._resolver, topics)

    # ---------------------------------------------------------------- delivery

    def _deliver(self, messages: list[Message]) -> None:
        self._queue.extend(messages)
        if self._waiters:
            self._wake_one()
        if self._blocked:
            self._blocked.wake(len(messages))

    def _discard_queued(self, part: PartitionConsumer) -> list[Message]:
        """Drop the queued, not yet received messages of ``part`` and return them, oldest first.

        Removes in place rather than rebuilding the deque: the blocking consumer pops from it on
        another thread, and a message it already took is the application's and must stay taken.
        """
        queue = self._queue
        drop = [m for m in queue if m._info.owner is part]
        if len(drop) == len(queue):
            queue.clear()
            return drop
        for m in drop:
            try:
                queue.remove(m)
            except ValueError:
                pass
        return drop

    def _on_partition_closed(self, exc: MagnetarError) -> None:
        if self._error is None:
            self._error = exc
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
        self._blocked.wake_all()

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    async def _wait(self, limit_seconds: float | None) -> None:
        loop = asyncio.get_running_loop()
        while not self._queue:
            if self._error is not None:
                raise self._error
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                if limit_seconds is None:
                    await fut
                else:
                    await asyncio.wait_for(fut, limit_seconds)
            except TimeoutError as exc:
                self._pass_on_wakeup(fut)
                raise Timeout(f"no message received within {limit_seconds}s") from exc
            except BaseException:
                self._pass_on_wakeup(fut)
                raise

    def _pass_on_wakeup(self, fut: asyncio.Future[None]) -> None:
        """A receiver that leaves after being woken hands its wake-up to the next one."""
        if not fut.done():
            fut.cancel()
        if self._queue:
            self._wake_one()

    @staticmethod
    def _handed_out(msg: Message) -> Message:
        """Bookkeeping for a message leaving the queue: its permit, and its ack timeout clock
        (``receive`` inlines the same, once per message; the reader's queue calls this)."""
        info = msg._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # (see _OWNER)
        if owner is not None and info.epoch == owner.epoch:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
            if owner.ack_timeouts is not None:
                owner.ack_timeouts.add(info.position, info.redelivery_count, owner._loop.time())
        return msg

    def queued(self) -> int:
        """How many messages ``receive`` would hand out without waiting (the listener pool's runs)."""
        return len(self._queue)

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        queue = self._queue
        if not queue:
            await self._wait(None if timeout_millis is None else timeout_millis / 1000.0)
        msg = queue.popleft()
        # Handed out: count its permit, start its ack timeout clock (inlined: once per message).
        info = msg._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # (see _OWNER)
        if owner is not None and info.epoch == owner.epoch:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
            if owner.ack_timeouts is not None:
                owner.ack_timeouts.add(info.position, info.redelivery_count, owner._loop.time())
        return msg

    async def batch_receive(self) -> list[Message]:
        """The next messages, as many as the ``batch_receive_policy`` allows (``batch_receive``)."""
        return await collect(self, self._config.batch_receive_policy)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        queue = self._queue
        if not queue:
            if self._closing:
                raise StopAsyncIteration
            try:
                await self._wait(None)
            except AlreadyClosed:
                raise StopAsyncIteration from None
        msg = queue.popleft()
        # Handed out: count its permit, start its ack timeout clock (inlined: once per message).
        info = msg._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # (see _OWNER)
        if owner is not None and info.epoch == owner.epoch:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
            if owner.ack_timeouts is not None:
                owner.ack_timeouts.add(info.position, info.redelivery_count, owner._loop.time())
        return msg

    # ---------------------------------------------------------------- acks

    def _locate(self, message: Message | MessageId) -> tuple[PartitionConsumer, Position, int]:
        """The partition consumer, entry position and batch index a message (id) belongs to.

        A ``Message`` knows its partition consumer. A bare ``MessageId`` carries only a partition
        index: on a consumer over several topics that can be ambiguous, and it is refused.
        """
        if isinstance(message, Message):
            info = message._info
            owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # (see _OWNER)
            if owner is None:
                raise ValueError("message does not belong to a consumer")
            return owner, info.position, message._index
        candidates = self._by_partition.get(message.partition())
        if candidates is not None and len(candidates) > 1 and message.topic is not None:
            # ``MessageId.deserialize(data, topic=...)`` says which topic, as in pulsar-client.
            candidates = [p for p in candidates if p.topic == message.topic] or candidates
        if candidates is not None and len(candidates) == 1:
            part = candidates[0]
        elif candidates is None and len(self._parts) == 1:
            part = self._parts[0]
        elif candidates:
            raise ValueError(
                f"message id {message} is ambiguous on a consumer of several topics: "
                "acknowledge the Message itself (it knows its topic)"
            )
        else:
            raise ValueError(f"message id {message} is not from a partition of {self._topic}")
        return part, message.position, message.batch_index()

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message; the entry is acked on the broker once all its messages are
        (with ``batch_index_ack_enabled``, each message's index is acked at once too)."""
        if type(message) is Message:
            # Hot path: discard from the entry's live set; no lookup until the entry completes.
            info = message._info
            owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # (see _OWNER)
            if owner is not None and not owner._batch_index_ack:
                owner._acked_msgs += 1
                unacked = info.unacked
                if unacked is not None:
                    unacked.discard(message._index)
                    if unacked:
                        return
                    owner.tracker.forget(info.position)
                owner.ack_entry(info.position)
                return
        owner, position, index = self._locate(message)
        owner.acknowledge(position, index)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to and including this one (not on Shared subscriptions)."""
        owner, position, index = self._locate(message)
        owner.acknowledge_cumulative(position, index)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Redeliver this message's entry (with its whole batch) after ``negative_ack_redelivery_delay_ms``
        (a coroutine, as ``pulsar.asyncio.Consumer.negative_acknowledge``; it completes at once)."""
        self._negative_acknowledge(message)

    def _negative_acknowledge(self, message: Message | MessageId) -> None:
        owner, position, _ = self._locate(message)
        count = message.redelivery_count() if isinstance(message, Message) else 0
        owner.negative_acknowledge(position, count)

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every message received and not acknowledged (queued ones included)."""
        for part in self._parts:
            part.redeliver_unacknowledged()

    # ---------------------------------------------------------------- seek, retry

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or to a publish time (an ``int``, ms since the epoch).

        As pulsar-client 3.x: a consumer over several partitions or topics seeks by publish time
        only (a message id raises ``Unsupported``), except to ``MessageId.earliest`` / ``latest``,
        which every partition takes (as newer pulsar-clients allow).
        """
        if isinstance(messageid, bool) or not isinstance(messageid, MessageId | int):
            raise ValueError(f"invalid seek_arg type {type(messageid)}")
        if self._closing:
            raise AlreadyClosed(f"consumer on {self._topic} is closed")
        parts = list(self._parts)
        if isinstance(messageid, MessageId) and not _is_sentinel(messageid) and len(parts) != 1:
            raise Unsupported(
                "seek by message id is not supported on a partitioned or multi-topic consumer; "
                "seek by publish time, or seek one partition's consumer"
            )
        await asyncio.gather(*(p.seek(messageid) for p in parts))

    async def get_last_message_id(self) -> MessageId:
        """The topic's last message id (a consumer of one, non-partitioned topic only, as pulsar-client 3.x)."""
        if len(self._parts) != 1:
            raise Unsupported("get_last_message_id is not supported on a partitioned or multi-topic consumer")
        last, _ = await self._parts[0].get_last_message_id()
        return last

    async def reconsume_later(
        self, message: Message, delay: timedelta | int, properties: dict[str, str] | None = None
    ) -> None:
        """Have ``message`` delivered again after ``delay`` (a ``timedelta``, or ms), via the retry topic.

        Needs ``retry_enable=True``. Java's ``reconsumeLater``: the message is published to
        ``{topic}-{subscription}-RETRY`` with ``RECONSUMETIMES`` one higher (``properties`` added),
        then acknowledged; past ``max_redeliver_count`` it goes to the dead letter topic instead.
        The broker holds the delay on Shared and Key_Shared subscriptions only (WIRE.md R20e): on
        Exclusive and Failover the retried message comes back at once, as in Pulsar.
        """
        letters = self._letters
        if not self._config.retry_enable or letters is None:
            raise Unsupported("reconsume_later needs retry_enable=True")
        if not isinstance(message, Message):
            raise ValueError("reconsume_later takes a received Message")
        delay_ms = delay_millis(delay)
        props = letter_properties(message)
        if properties:
            props.update(properties)
        times = int(props.get(RECONSUMETIMES, "0")) + 1
        props[RECONSUMETIMES] = str(times)
        props[DELAY_TIME] = str(delay_ms)
        first = self._first_topic()
        if first is None:
            raise ValueError(f"cannot name the retry topic of {self._topic}")
        if times > letters.max_redeliver_count:
            await letters.publish_dead_letter(letters.dead_letter_topic(message.topic_name(), first), message, props)
        else:
            await letters.publish_retry_letter(retry_letter_topic(first, self._subscription), message, props, delay_ms)
        await self.acknowledge(message)

    # ---------------------------------------------------------------- closing

    def _closed_now(self) -> None:
        self._closing = True
        self._queue.clear()
        self._on_partition_closed(AlreadyClosed(f"consumer on {self._topic} is closed"))

    async def _close_letters(self) -> None:
        if self._letters is not None:
            await self._letters.close()

    async def unsubscribe(self) -> None:
        """Delete the subscription (and its cursor) on the broker, then close."""
        try:
            await asyncio.gather(*(p.close(unsubscribe=True) for p in self._parts))
        finally:
            self._closed_now()
            await self._close_letters()

    async def close(self) -> None:
        """Close; returns once acknowledgements made before it are durable on the broker."""
        if self._closing:
            return
        self._closing = True
        try:
            await asyncio.gather(*(p.close() for p in self._parts))
        finally:
            self._closed_now()
            await self._close_letters()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
