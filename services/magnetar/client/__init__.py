"""Magnetar's Python client, shaped like Apache Pulsar's (``pulsar-client`` 3.x).

``magnetar.client`` (and the top-level ``magnetar``) export the blocking flavour; the asyncio
flavour is ``magnetar.client.aio``, also importable as ``magnetar.asyncio``. The client depends on
``magnetar.protocol`` only (an import-linter contract), so it installs without the server extras.

Modules: ``connection`` (one per broker: reader task, rid table, coalesced writes), ``batch_builder``
and ``producer`` (batching, receipts, timeouts, partition routing via ``routing``), ``consumer``,
``message`` and ``acks`` (receive queue, batch-index acks, permits), ``aio`` (the asyncio
``Client``), ``sync`` (the blocking wrapper), ``options`` and ``errors``.

Reconnection works as Pulsar's (``reconnect``): when a connection drops, the broker pushes
``close_producer`` / ``close_consumer``, or a ``producer`` / ``subscribe`` is answered
``ServiceNotReady``, the producer or consumer looks its topic up again (through any broker of a
multi-host service URL, following redirects) and re-creates itself on the owner, with jittered
exponential backoff (100 ms doubling to 30 s by default). Unacknowledged messages are resent in
order with their sequence ids and producer name; sends made meanwhile queue up; each message still
fails with ``Timeout`` once ``send_timeout_millis`` have passed since it was sent. A consumer
re-subscribes, drops the messages it had queued but not yet handed out (the broker redelivers them)
and sends acknowledgements made before or during the outage on the new registration.

Where we differ from Pulsar, on purpose or for now:
- producer and consumer creation retry only retryable errors and give up at the operation timeout
  with the last one; later reconnection keeps trying until ``close()``;
- ``close()`` waits at most the operation timeout for outstanding receipts and ack answers;
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
