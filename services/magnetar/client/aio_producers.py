"""The asyncio client's producers: ``create_producer`` and the partitions a producer grows into.

``ProducerClient`` is the part of ``aio.Client`` that makes producers: it checks the arguments
(``config.producer.PRODUCER_OPTIONS``), builds the ``ProducerConfig`` from them by name, looks the
topic's partitions up and attaches one ``PartitionProducer`` per partition to its owner, all at
once (a failed one closes those that succeeded). With ``lazy_start_partitioned_producers`` the
partitions but the first register with their first batch (``producer.start``). A partitioned
producer attaches to partitions added later, within ``partitions_update_interval``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from magnetar.client.aio_lookup import LookupClient
from magnetar.client.config.option_list import Flavour
from magnetar.client.config.producer import PRODUCER_OPTIONS, refuses_batching_with_chunking_async
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    HashingScheme,
    PartitionsRoutingMode,
    ProducerAccessMode,
)
from magnetar.client.producer.producer import PartitionProducer, Producer, ProducerConfig
from magnetar.client.producer.routing import MessageRouter
from magnetar.client.producer.start import starts_lazily
from magnetar.protocol.topic_name import TopicName

__all__ = ["ProducerClient"]

log = logging.getLogger("magnetar.client.aio")


class ProducerClient(LookupClient):
    """``create_producer`` of one asyncio client (see the module docstring)."""

    # Set by ``aio.Client.__init__``; closed by ``aio.Client.close``.
    _producers: list[Producer]

    # ---------------------------------------------------------------- producers

    @refuses_batching_with_chunking_async
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
        Python API has none. ``config.producer`` lists what differs from Pulsar. Unlike
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
                part.lazy = True  # registers on its first batch (producer.start)
                return part
            await part.attach_first()
            return part

        parts: list[PartitionProducer] = await self._create_all([one(t, i) for t, i in targets])
        return parts

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
