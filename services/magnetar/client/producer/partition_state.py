"""What one partition producer holds.

``PartitionProducer`` (``partition.py``) is one class assembled from concerns, each a mixin over
this state in a module of its own: the send path, batching and sealing (``sending.py``), and the
outcomes of what was sent: receipts, send errors, timeouts (``receipts.py``); ``partition.py``
itself registers with the broker, flushes and closes. Mixins rather than collaborator objects
because the per-message path reads and writes this state directly, as attributes of ``self``:
splitting the class by concern adds no call and no indirection per message.

Every attribute is set here, once, with what it is for. A concern that calls a method of another
one finds it declared at the end of the class, for the type checker only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.client.net.reconnect import Attachment, Resolver
from magnetar.client.options import BatchingType
from magnetar.client.producer.batch_builder import Batch, KeyedBatches
from magnetar.client.producer.config import ProducerConfig
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE


class PartitionProducerState(Attachment):
    """The state of one partition producer; ``partition.PartitionProducer`` says how it behaves."""

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
        # The broker's last retryable refusal since the last receipt (a send timeout names it).
        self._last_refusal: MagnetarError | None = None
        # Told how many messages completed (either way); the sync layer counts in-flight with it.
        self.completion_listener: Callable[[int], None] | None = None
        # Told when a batch is sealed; the partitioned producer moves round robin on with it.
        self.seal_listener: Callable[[int], None] | None = None

    if TYPE_CHECKING:
        # Provided by the concerns that ``PartitionProducer`` combines (see the module docstring).

        def start_lazily(self) -> None: ...

        def _registration_broken(self, exc: MagnetarError) -> None: ...

        def _complete(self, batch: Batch, exc: MagnetarError | None, ledger: int = -1, entry: int = -1) -> None: ...

        def _check_timeouts(self) -> None: ...
