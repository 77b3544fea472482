"""Magnetar's Python client, shaped like Apache Pulsar's (``pulsar-client`` 3.x).

``magnetar.client`` (and the top-level ``magnetar``) export the blocking flavour; the asyncio
flavour is ``magnetar.client.aio``, also importable as ``magnetar.asyncio``. The client depends on
``magnetar.protocol`` only (an import-linter contract), so it installs without the server extras.

Where things live, top to bottom (each layer imports only those below it: an import-linter
contract):

- ``sync`` (the blocking facade: ``Client``), ``sync_producer``, ``sync_consumer``, ``sync_reader``
  (the blocking ``Producer``, ``Consumer``, ``Reader``): thin shells over the asyncio client;
- ``aio`` (the asyncio ``Client``: its constructor, closing, and ``pulsar.asyncio``'s names),
  assembled from ``aio_consumers`` (``subscribe``, patterns, ``create_reader``), ``aio_producers``
  (``create_producer``) and ``aio_lookup`` (connections, the cluster in use, topic lookup,
  partition counts);
- ``blocking/``: the loop thread the blocking client runs its asyncio client on
  (``loop_thread``), how a blocking call waits (``waiting``) and the listener threads
  (``listener_pool``); only the blocking facade imports it (an import-linter contract);
- ``readers/``: ``reader`` (``create_reader``) and ``table_view`` (``create_table_view``);
- ``consumer/``: the consumer and its partition consumers, split by concern (permits, acks,
  redelivery and dead letters, chunked messages, seek), ``batch_receive``, topic lists and
  patterns (``multi_topic``), the receivers blocked on a consumer's queue;
- ``producer/``: the producer and its partition producers (the send path and batching, receipts
  and timeouts), its config, chunking, routing (``routing``) and lazy start (``start``);
- ``net/``: connections, reconnection (``reconnect``), connect deadlines, ``http://`` lookup,
  ``ServiceInfoProvider`` and ``AutoClusterFailover`` (``service_info``), TLS and authentication;
- ``lifecycle/``: the statistics report (``stats``) and ``shutdown``;
- ``config/``: every option list (``Client``, ``create_producer``, ``subscribe``,
  ``create_reader``, ``create_table_view``), each defined once with its names, order, defaults and
  pulsar-client's checks (``option_list``; the blocking facade hands options to the asyncio client
  by name), the consumer's config and the client-wide settings (``io_threads``...);
- ``message``, ``logger`` (``ConsoleLogger``, ``FileLogger``) and ``partition_updates``
  (partitions added to a topic);
- ``encryption/`` (``CryptoKeyReader``, ``EncryptionContext``, decrypting) and ``schema_codec``;
- ``options`` (pulsar-client's enums and option classes), ``errors`` and ``tasks``.

Reconnection works as Pulsar's (``net.reconnect``): when a connection drops, the broker pushes
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
- ``send_async`` callbacks receive ``Result.Ok`` or the exception itself (``exc.error()`` or
  ``result_of(exc)`` gives the Pulsar ``Result``); on a closed producer ``send_async`` raises
  ``AlreadyClosed`` at the call (Pulsar: the callback gets it); every accepted one gets its callback
  exactly once, also when the client is closed or shut down;
- ``connection_timeout_ms`` ends the attempts to reach an unreachable broker with ``ConnectError``
  even when the operation timeout is longer (``net.connect_deadline``);
- ``receiver_queue_size=0`` behaves as 1 (no zero-queue consumer);
- a partition key is routed by ``JavaStringHash`` by default (the Java client's default; the
  Python client's ``BoostHash`` is refused), ``Murmur3_32Hash`` with the keyword-only
  ``hashing_scheme``: both put a key on the partition a Java producer puts it on;
- ``create_producer`` takes pulsar-client's arguments in its order, but batches by default
  (``batching_enabled=True``), turns batching off for ``chunking_enabled=True`` instead of
  refusing the pair; ``access_mode`` is
  enforced by the broker (``broker.topics.producer_access``), and with
  ``lazy_start_partitioned_producers`` partition 0 starts at creation even under
  ``UseSinglePartition`` (``producer.start``);
- partitions added to a topic are picked up every ``partitions_update_interval`` seconds (a
  keyword-only ``Client`` option, the C++ client's setting; pulsar-client's Python API has none),
  and a consumer subscribes an added partition from its earliest message;
- a custom ``sequence_id`` reaches consumers (``Message.sequence_id()``) and is what deduplication
  keys on; with deduplication on, a producer created again under the same name continues from the
  broker's ``last_sequence_id()``; ``replication_clusters`` / ``disable_replication`` are accepted
  and ignored (no geo-replication);
- a default batch of messages with different keys is routed (Key_Shared) by the first key in it,
  even when its first message has none;
- ``schema=`` (``magnetar.schema``: ``AvroSchema``, ``JsonSchema``, ``StringSchema``, ...) defaults
  to None (bytes) on every call, as in ``pulsar.asyncio``; objects are encoded at ``send`` and
  ``Message.value()`` decodes with the version each message was written with, for ``AvroSchema``
  fetched (``Client.get_schema_info``) before the message is handed out, so ``value()`` never
  blocks (``schema_codec``); ``send(None)`` stays a null value with a schema too (``value()``:
  None); a ``TableView`` with a schema holds decoded values and tells listeners None for a deletion;
- ``replicate_subscription_state_enabled`` and ``broker_consumer_stats_cache_time_ms`` are accepted
  and have no effect (no geo-replication, no consumer stats call); ``batch_receive`` and
  ``get_last_message_id`` are on the asyncio consumer too (``consumer.batch_receive``);
- beyond pulsar-client, ``subscribe`` takes the keyword-only ``retry_enable`` (also reading
  ``{topic}-{subscription}-RETRY``, as Java's client; not for a pattern),
  ``negative_ack_redelivery_backoff``, ``ack_timeout_redelivery_backoff``,
  ``ack_timeout_tick_time_ms`` and ``priority_level``; the asyncio ``subscribe`` also takes a
  compiled pattern and ``pattern_auto_discovery_period`` (keyword-only), and has ``create_reader``;
- ``message_listener`` / ``reader_listener`` run on the client's shared ``message_listener_threads``
  as in Pulsar (``blocking.listener_pool``); a paused listener may be called once more, for a message
  already handed to its thread;
- a reader of a partitioned topic started at a concrete message id starts that id's partition there
  and every other partition at ``MessageId.latest``;
- ``Client`` takes pulsar-client's arguments in its order (``net.auth``, ``net.tls``, ``config.client``):
  ``io_threads`` is checked but one event loop serves every connection, ``log_conf_file_path`` has
  no effect (deprecated in pulsar-client too), the ``logger`` option redirects the process-wide
  ``magnetar.client`` logger (``logger``), the statistics lines carry fewer counters than the C++
  client's (``lifecycle.stats``), ``AutoClusterFailover`` probes with a TCP connection and is a
  ``ServiceInfoProvider`` subclass (``net.service_info``); a failed TLS handshake raises
  ``ConnectError`` and refused credentials ``AuthenticationError`` at once; ``AuthenticationTLS``
  presents a client certificate whose CN is
  the role (the broker's ``tls`` provider), ``AuthenticationBasic`` speaks to the broker's ``basic``
  provider, ``Authentication(name, params)`` knows the built-in plugins by name and loads no shared
  library, and ``AuthenticationOauth2`` / ``AuthenticationAthenz`` raise ``Unsupported``;
- end-to-end encryption uses Magnetar's cipher suite (AES-256-GCM, RSA-OAEP / ECDH+HKDF key
  wrapping) on Pulsar's PEM key files, so entries are not readable by Pulsar clients, and an
  encrypted message is never republished to a dead letter or retry topic (it would go in plaintext);
- ``MessageId.serialize()`` is Magnetar's text form, not Pulsar's protobuf; ``send(None)`` is a
  null value (pulsar-client's bytes schema refuses it); ``MessageBatch`` is absent.

The documentation's "Coming from Pulsar" page keeps the complete list, each difference with its reason.
"""

from magnetar import exceptions as _exceptions
from magnetar.client.encryption.crypto import CryptoKeyReader, EncryptionContext, EncryptionKey
from magnetar.client.errors import MagnetarError, MessageTooLarge, Unsupported  # older names
from magnetar.client.logger import ConsoleLogger, FileLogger, LoggerLevel
from magnetar.client.message import Message
from magnetar.client.net.auth import (
    Authentication,
    AuthenticationAthenz,
    AuthenticationBasic,
    AuthenticationOauth2,
    AuthenticationTLS,
    AuthenticationToken,
)
from magnetar.client.net.service_info import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    ConsumerBatchReceivePolicy,
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
from magnetar.client.readers.table_view import TableView
from magnetar.client.sync import Client, Consumer, Producer, Reader
from magnetar.exceptions import *  # noqa: F403 (every pulsar.exceptions class, as below)
from magnetar.protocol.message_id import MessageId

__all__ = [
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AutoClusterFailover",
    "BatchingType",
    "Client",
    "CompressionType",
    "ConsoleLogger",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "FileLogger",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "LoggerLevel",
    "MagnetarError",
    "Message",
    "MessageId",
    "MessageTooLarge",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "ServiceInfo",
    "ServiceInfoProvider",
    "Unsupported",
    "result_of",
]

# pulsar.exceptions: every Pulsar exception class is also a top-level name, as in pulsar-client;
# ``magnetar.exceptions`` is the one list of them.
__all__ += _exceptions.__all__

# End-to-end encryption (``encryption.crypto``).
__all__ += ["CryptoKeyReader", "EncryptionContext", "EncryptionKey"]

# The latest value per key of a topic (``readers.table_view``).
__all__ += ["TableView"]
