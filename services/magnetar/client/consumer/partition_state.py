"""What one partition consumer holds, and the position it subscribes from.

``PartitionConsumer`` (``partition.py``) is one class assembled from concerns, each a mixin over
this state in a module of its own: flow permits (``permits.py``), acknowledgements
(``ack_sender.py``), redelivery and dead letters (``redelivery_requests.py``), chunked messages
(``chunk_receipt.py``) and seek (``seek.py``); ``partition.py`` itself subscribes, takes in pushed
entries and closes. Mixins rather than collaborator objects because the per-message paths read
and write this state directly, as attributes of ``self``: splitting the class by concern adds no
call and no indirection per message.

Every attribute is set here, once, with what it is for. A concern that calls a method of another
one finds it declared at the end of the class, for the type checker only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from magnetar.client.config.consumer import ConsumerConfig
from magnetar.client.consumer.acks import BatchAckTracker, FlowPermits, Position
from magnetar.client.consumer.chunks import ChunkAssembler
from magnetar.client.consumer.dead_letter import DeadLetters
from magnetar.client.consumer.redelivery import AckTimeoutTracker, NegativeAckTracker
from magnetar.client.message import EntryInfo, Message
from magnetar.client.net.reconnect import Attachment, Resolver
from magnetar.client.schema_codec import MessageDecoder, WriterSchemaGate, WriterSchemas, message_decoder
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId

log = logging.getLogger(__name__)


def is_sentinel(mid: MessageId) -> bool:
    """Whether ``mid`` is ``MessageId.earliest`` or ``latest`` (a place, not a message)."""
    return mid == EARLIEST or mid == LATEST


class PartitionConsumerState(Attachment):
    """The state of one partition consumer; ``partition.PartitionConsumer`` says how it behaves."""

    def __init__(
        self,
        resolver: Resolver,
        topic: str,
        partition: int,
        config: ConsumerConfig,
        *,
        deliver: Callable[[list[Message]], None],
        on_closed: Callable[[MagnetarError], None],
        discard_queued: Callable[[PartitionConsumerState], Sequence[Message] | None],
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
        # Where (re-)subscribing starts; what arrives before it is dropped (``PartitionConsumer``).
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
        self._skip_before = None if start is None or is_sentinel(start) else start

    def _send(self, cmd: cmds.Flow | cmds.Redeliver) -> None:
        """Write a fire-and-forget command; detached, it is dropped (the re-subscribe resets that state)."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.write(cmd)
        except MagnetarError as exc:
            log.debug("dropping %s for %s: %s", cmd["t"], self.topic, exc)

    if TYPE_CHECKING:
        # Provided by the concerns that ``PartitionConsumer`` combines (see the module docstring);
        # with ``topic``, ``partition`` and ``decoder`` above, they make it a ``message.MessageOwner``.

        def return_permits(self, n: int) -> None: ...

        def message_consumed(self, info: EntryInfo) -> None: ...

        def acknowledge(self, position: Position, index: int) -> None: ...

        def acknowledge_cumulative(self, position: Position, index: int) -> None: ...

        def negative_acknowledge(self, position: Position, redelivery_count: int = 0) -> None: ...

        def ack_entry(self, position: Position) -> None: ...

        def _schedule_flush(self) -> None: ...

        def flush_acks(self) -> None: ...

        def _forget_redeliveries(self) -> None: ...

        def _reset(self, exc: MagnetarError) -> None: ...
