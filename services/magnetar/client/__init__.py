"""Magnetar's Python client, shaped like Apache Pulsar's (``pulsar-client`` 3.x).

``magnetar.client`` (and the top-level ``magnetar``) export the blocking flavour; the asyncio
flavour is ``magnetar.client.aio``, also importable as ``magnetar.asyncio``. The client depends on
``magnetar.protocol`` only (an import-linter contract), so it installs without the server extras.

Modules: ``connection`` (one per broker: reader task, rid table, coalesced writes), ``batch_builder``
and ``producer`` (batching, receipts, timeouts, partition routing via ``routing``), ``consumer``,
``message`` and ``acks`` (receive queue, batch-index acks, permits), ``aio`` (the asyncio
``Client``), ``sync`` (the blocking wrapper), ``options`` and ``errors``.

Where we differ from Pulsar, on purpose or for now:
- no automatic reconnection: when a connection drops, pending sends and requests fail with
  ``NotConnected`` and consumers raise it from ``receive`` once their queue is drained;
- ``negative_acknowledge`` asks for redelivery at once (no ``negative_ack_redelivery_delay_ms``);
- the asyncio producer waits for room when ``max_pending_messages`` are in flight
  (``block_if_queue_full=True``); the blocking one defaults to Pulsar's ``False`` and reports
  ``ProducerQueueIsFull``;
- ``send_async`` callbacks receive ``Result.Ok`` or the exception itself (``result_of(exc)`` gives
  the Pulsar ``Result`` name);
- ``receiver_queue_size=0`` behaves as 1 (no zero-queue consumer);
- a partition key is routed by ``crc32c(key) % partitions`` (Pulsar uses Murmur3): stable, but a
  Pulsar client would place keys differently.
"""

from magnetar.client.errors import (
    AlreadyClosed,
    ChecksumError,
    CumulativeAcknowledgementNotAllowedError,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    ProducerQueueIsFull,
    Timeout,
    TopicNotFound,
    Unsupported,
)
from magnetar.client.message import Message
from magnetar.client.options import CompressionType, ConsumerType, InitialPosition, Result, result_of
from magnetar.client.sync import Client, Consumer, Producer
from magnetar.protocol.message_id import MessageId

__all__ = [
    "AlreadyClosed",
    "ChecksumError",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerType",
    "CumulativeAcknowledgementNotAllowedError",
    "InitialPosition",
    "MagnetarError",
    "Message",
    "MessageId",
    "MessageTooLarge",
    "NotConnected",
    "Producer",
    "ProducerQueueIsFull",
    "Result",
    "Timeout",
    "TopicNotFound",
    "Unsupported",
    "result_of",
]
