"""Magnetar's Python client, shaped like Apache Pulsar's (``pulsar-client`` 3.x).

``magnetar.client`` (and the top-level ``magnetar``) export the blocking flavour; the asyncio
flavour is ``magnetar.client.aio``, also importable as ``magnetar.asyncio``. The client depends on
``magnetar.protocol`` only (an import-linter contract), so it installs without the server extras.

Modules: ``connection`` (one per broker: reader task, rid table, coalesced writes), ``batch_builder``
and ``producer`` (batching, key-based batching, delayed messages, receipts, timeouts, partition
routing via ``routing``), ``consumer``, ``message`` and ``acks`` (receive queue, batch-index acks,
permits), ``consumer_config`` (every ``subscribe`` option), ``redelivery`` (negative acks, ack
timeouts) and ``dead_letter`` (dead letter and retry topics), ``reader`` (``create_reader``),
``multi_topic`` (topic lists and pattern subscriptions), ``aio`` (the asyncio ``Client``), ``sync``
(the blocking wrapper), ``options`` and ``errors``.

Reconnection works as Pulsar's (``reconnect``): when a connection drops, the broker pushes
``close_producer`` / ``close_consumer``, or a ``producer`` / ``subscribe`` is answered
``ServiceNotReady``, the producer or consumer looks its topic up again (through any broker of a
multi-host service URL, following redirects) and re-creates itself on the owner, with jittered
exponential backoff (100 ms doubling to 30 s by default). Unacknowledged messages are resent in
order with their sequence ids and producer name; sends made meanwhile queue up; each message still
fails with ``Timeout`` once ``send_timeout_millis`` have passed since it was sent. A consumer
re-subscribes, drops the messages it had queued but not yet handed out (the broker redelivers them)
and sends acknowledgements made before or during the outage on the new registration; a reader
re-subscribes from the first message it had not handed out yet.

Where we differ from Pulsar, on purpose or for now:
- producer and consumer creation retry only retryable errors and give up at the operation timeout
  with the last one; later reconnection keeps trying until ``close()``;
- ``close()`` waits at most the operation timeout for outstanding receipts and ack answers;
- negative acks and ack timeouts redeliver the entries that are due, on every subscription type
  (Pulsar redelivers everything unacknowledged on Exclusive and Failover, to keep order);
- the asyncio producer waits for room when ``max_pending_messages`` are in flight
  (``block_if_queue_full=True``); the blocking one defaults to Pulsar's ``False`` and reports
  ``ProducerQueueIsFull``;
- ``send_async`` callbacks receive ``Result.Ok`` or the exception itself (``result_of(exc)`` gives
  the Pulsar ``Result`` name);
- ``receiver_queue_size=0`` behaves as 1 (no zero-queue consumer);
- a partition key is routed by ``JavaStringHash`` by default (the Java client's default; the
  Python client's ``BoostHash`` is refused), ``Murmur3_32Hash`` with the keyword-only
  ``hashing_scheme``: both put a key on the partition a Java producer puts it on;
- ``create_producer`` takes pulsar-client's arguments in its order, but batches by default
  (``batching_enabled=True``), turns batching off for ``chunking_enabled=True`` instead of
  refusing the pair, keeps ``properties`` on the client only and starts every partition producer
  at once (``lazy_start_partitioned_producers`` is accepted); ``schema`` other than bytes,
  ``encryption_key``, ``crypto_key_reader`` and ``access_mode`` other than ``Shared`` raise
  ``Unsupported``;
- partitions added to a topic are picked up every ``partitions_update_interval`` seconds (a
  keyword-only ``Client`` option, the C++ client's setting; pulsar-client's Python API has none),
  and a consumer subscribes an added partition from its earliest message;
- a custom ``sequence_id`` reaches consumers (``Message.sequence_id()``), but the broker does not
  deduplicate by it (it has no deduplication yet) and ``last_sequence_id()`` counts the producer's
  own sequence; ``replication_clusters`` / ``disable_replication`` are accepted and ignored (no
  geo-replication);
- a default batch of messages with different keys is routed (Key_Shared) by the first key in it,
  even when its first message has none;
- ``subscribe`` options that Magnetar does not implement (a schema other than bytes,
  ``max_total_receiver_queue_size_across_partitions``, ``crypto_key_reader``,
  ``replicate_subscription_state_enabled``, ``batch_receive_policy``, a ``regex_subscription_mode``
  other than ``PersistentOnly``) raise ``Unsupported`` unless left at their defaults;
- beyond pulsar-client, ``subscribe`` takes the keyword-only ``retry_enable`` (also reading
  ``{topic}-{subscription}-RETRY``, as Java's client; not for a pattern),
  ``negative_ack_redelivery_backoff``, ``ack_timeout_redelivery_backoff``,
  ``ack_timeout_tick_time_ms`` and ``priority_level``; the asyncio ``subscribe`` also takes a
  compiled pattern and ``pattern_auto_discovery_period`` (keyword-only), and has ``create_reader``;
- ``message_listener`` / ``reader_listener`` run on a thread of each consumer's / reader's own
  (Pulsar shares ``message_listener_threads``), and ``receive`` / ``read_next`` then raise
  ``Unsupported`` (Pulsar: ``InvalidConfiguration``);
- a reader of a partitioned topic started at a concrete message id starts that id's partition there
  and every other partition at ``MessageId.latest``;
- ``Client`` takes pulsar-client's arguments in its order (``auth``, ``tls``): ``io_threads``,
  ``message_listener_threads``, ``concurrent_lookup_requests``, ``log_conf_file_path``,
  ``stats_interval_in_seconds`` and ``logger`` have no effect, ``listener_name`` raises
  ``Unsupported``; a failed TLS handshake raises ``ConnectError`` and refused credentials
  ``AuthenticationError`` at once; ``AuthenticationTLS`` presents a client certificate whose CN is
  the role (the broker's ``tls`` provider), and ``AuthenticationOauth2`` /
  ``AuthenticationBasic`` / ``AuthenticationAthenz`` / ``Authentication`` raise ``Unsupported``.
"""

from magnetar.client.auth import (
    Authentication,
    AuthenticationAthenz,
    AuthenticationBasic,
    AuthenticationOauth2,
    AuthenticationTLS,
    AuthenticationToken,
)
from magnetar.client.errors import (
    AlreadyClosed,
    ChecksumError,
    ConsumerBusy,
    CumulativeAcknowledgementNotAllowedError,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerQueueIsFull,
    Timeout,
    TopicNotFound,
    Unsupported,
)
from magnetar.client.message import Message
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    MultiplierRedeliveryBackoff,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    Result,
    result_of,
)
from magnetar.client.sync import Client, Consumer, Producer, Reader
from magnetar.client.tls import ConnectError
from magnetar.protocol.errors import AuthenticationError, AuthorizationError
from magnetar.protocol.message_id import MessageId

__all__ = [
    "AlreadyClosed",
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AuthorizationError",
    "BatchingType",
    "ChecksumError",
    "Client",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerBusy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "CumulativeAcknowledgementNotAllowedError",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "MagnetarError",
    "Message",
    "MessageId",
    "MessageTooLarge",
    "MultiplierRedeliveryBackoff",
    "NotConnected",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerQueueIsFull",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "Timeout",
    "TopicNotFound",
    "Unsupported",
    "result_of",
]
