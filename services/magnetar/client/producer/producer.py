"""Asyncio producers: ``Producer``, what users hold, over one ``PartitionProducer`` per (partition) topic.

For a partitioned topic ``Producer`` routes each message to a partition (``routing``:
``message_routing_mode``, ``hashing_scheme``, ``message_router``) and takes in partitions added
later (``_add_partitions``); otherwise it forwards to its single partition producer. The partition
producer (``partition.py``) is split by concern: its state (``partition_state.py``), the send path
and batching (``sending.py``), and receipts and timeouts (``receipts.py``); options are checked
in ``config.py``, and a message too large for one entry is cut in ``chunking.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from magnetar.client.producer.batch_builder import SendCallback, SendReceipt
from magnetar.client.producer.config import MessageOptions, ProducerConfig, check_content, message_options
from magnetar.client.producer.partition import PartitionProducer
from magnetar.client.producer.routing import CustomRouter, RoundRobinRouter, SinglePartitionRouter, make_router
from magnetar.protocol.errors import AlreadyClosed
from magnetar.protocol.message_id import MessageId

__all__ = ["MessageOptions", "PartitionProducer", "Producer", "ProducerConfig", "check_content", "message_options"]


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
        """Flush, then close the producer on the broker; ``AlreadyClosed`` if it was closed before
        (by ``close()`` or its client's), as pulsar-client's asyncio producer raises."""
        if self._closing:
            raise AlreadyClosed("producer is already closed")
        self._closing = True  # also stops taking in added partitions
        await asyncio.gather(*(p.close() for p in self._parts))

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
