"""What a producer, and each message it sends, may be given: checked once, at the call.

``ProducerConfig`` is ``create_producer``'s options validated (the option list itself, with
pulsar-client's names, order and defaults, is ``config/producer.py``); ``message_options`` checks
the rarely used options of one message. Both raise what pulsar-client raises for a bad argument.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from magnetar.client.encryption.crypto import Encryptor
from magnetar.client.options import BatchingType, HashingScheme, PartitionsRoutingMode, ProducerAccessMode
from magnetar.client.producer.routing import DEFAULT_HASHING_SCHEME, MessageRouter, key_hasher
from magnetar.client.schema_codec import producer_schema
from magnetar.protocol.compression import CompressionType
from magnetar.protocol.errors import Unsupported


def check_content(content: object) -> None:
    """Refuse message content that is not bytes at the call, as pulsar-client's bytes schema does
    (``TypeError``), rather than later on the client's loop thread. None is a null value (a tombstone)."""
    if type(content) is not bytes and content is not None and not isinstance(content, bytearray | memoryview):
        raise TypeError(f"Invalid record obj of type {type(content)} - expected type is {bytes}")


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
    """The options of ``create_producer``, validated once (names, order and defaults as pulsar-client 3.x's).

    Deliberate differences: ``batching_enabled`` defaults to True (pulsar-client: False) and
    ``block_if_queue_full`` to True here, which the asyncio producer keeps (the blocking one passes
    pulsar-client's False); ``chunking_enabled=True`` turns batching off (pulsar-client raises
    ``ValueError`` when both are on, but cannot be asked to here, where batching is on by default);
    ``hashing_scheme`` is an extension (pulsar-client's Python API has none and always hashes with
    ``BoostHash``). A ``schema`` (``magnetar.schema``; None or ``BytesSchema``: bytes) is registered
    by every partition producer, encodes objects at ``send`` and names its version in every entry
    (``schema_codec``).
    ``encryption_key`` with ``crypto_key_reader`` encrypts every entry (``crypto``; its public key
    loads here, ``CryptoError`` if it cannot; without a reader: ``ValueError``, never plaintext).
    ``access_mode`` is enforced by the broker (WIRE.md R102-R103), ``properties`` go to it as the
    producer's metadata (R104), and ``lazy_start_partitioned_producers`` (in Shared mode only, as
    Pulsar) registers each partition producer but the first with its first batch (``producer_start``).
    """

    __slots__ = (
        "access_mode",
        "batching_enabled",
        "batching_max_allowed_size_in_bytes",
        "batching_max_messages",
        "batching_max_publish_delay_ms",
        "batching_type",
        "block_if_queue_full",
        "chunking_enabled",
        "compression_type",
        "encryptor",
        "hashing_scheme",
        "initial_sequence_id",
        "lazy_start_partitioned_producers",
        "max_pending_messages",
        "max_pending_messages_across_partitions",
        "message_router",
        "message_routing_mode",
        "producer_name",
        "properties",
        "schema",
        "schema_codec",
        "send_timeout_millis",
    )

    def __init__(
        self,
        *,
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
        hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME,
    ) -> None:
        compression_type = CompressionType(compression_type)
        batching_type = BatchingType(batching_type)
        message_routing_mode = PartitionsRoutingMode(message_routing_mode)
        access_mode = ProducerAccessMode(access_mode)
        hashing_scheme = HashingScheme(hashing_scheme)
        if compression_type == CompressionType.SNAPPY:
            raise Unsupported("CompressionType.SNAPPY is not supported by the Magnetar client; use LZ4, ZLib or ZSTD")
        if batching_max_messages < 1 or batching_max_allowed_size_in_bytes < 1:
            raise ValueError("batching limits must be positive")
        if max_pending_messages < 1:
            raise ValueError("max_pending_messages must be positive")
        if max_pending_messages_across_partitions < 1:
            raise ValueError("max_pending_messages_across_partitions must be positive")
        if initial_sequence_id is not None and (
            type(initial_sequence_id) is bool or not isinstance(initial_sequence_id, int)
        ):
            raise ValueError("Argument initial_sequence_id is expected to be either None or of type 'int'")
        if properties is not None and (
            not isinstance(properties, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items())
        ):
            raise ValueError("Argument properties is expected to be either None or a dict of str to str")
        # The schema's wire form, encoder and registry version; None for bytes (``schema_codec``).
        self.schema_codec = producer_schema(schema)
        # End-to-end encryption (``client.crypto``): the public keys load now, so a bad key file fails here.
        self.encryptor = Encryptor([encryption_key], crypto_key_reader) if encryption_key is not None else None
        if message_router is not None:
            if not callable(message_router):
                raise ValueError("message_router must be callable(message, num_partitions) -> partition index")
            message_routing_mode = PartitionsRoutingMode.CustomPartition  # as pulsar's setMessageRouter does
        elif message_routing_mode is PartitionsRoutingMode.CustomPartition:
            raise ValueError("message_routing_mode=PartitionsRoutingMode.CustomPartition needs a message_router")
        key_hasher(hashing_scheme)  # BoostHash: Unsupported, now rather than at the first keyed send
        if chunking_enabled:
            batching_enabled = False  # chunks go one per entry: Pulsar's rule, batching and chunking exclude
        self.producer_name = producer_name
        self.schema = schema
        # pulsar-client passes it on only when truthy (``if initial_sequence_id:``): 0 is "not given".
        self.initial_sequence_id = initial_sequence_id or None
        self.send_timeout_millis = send_timeout_millis
        self.compression_type = compression_type
        self.max_pending_messages = max_pending_messages
        self.max_pending_messages_across_partitions = max_pending_messages_across_partitions
        self.block_if_queue_full = block_if_queue_full
        self.batching_enabled = batching_enabled
        self.batching_max_messages = batching_max_messages if batching_enabled else 1
        self.batching_max_allowed_size_in_bytes = batching_max_allowed_size_in_bytes
        self.batching_max_publish_delay_ms = batching_max_publish_delay_ms
        self.chunking_enabled = bool(chunking_enabled)
        self.message_routing_mode = message_routing_mode
        self.lazy_start_partitioned_producers = bool(lazy_start_partitioned_producers)
        self.properties = dict(properties) if properties else {}
        self.batching_type = batching_type
        self.access_mode = access_mode
        self.message_router = message_router
        self.hashing_scheme = hashing_scheme

    def max_pending_per_partition(self, partitions: int) -> int:
        """Each partition producer's queue on a topic of ``partitions`` partitions (Pulsar's rule):
        ``min(max_pending_messages, max_pending_messages_across_partitions // partitions)``, at least 1."""
        if partitions <= 0:
            return self.max_pending_messages
        return max(1, min(self.max_pending_messages, self.max_pending_messages_across_partitions // partitions))
