"""``create_producer``'s options, defined once (``option_list.py`` says how the table is used).

pulsar-client 3.x's arguments in its order, names and defaults, then Magnetar's keyword-only
``hashing_scheme``. Two defaults differ from pulsar-client on purpose (the README's "Coming from
Pulsar" gives the reasons): ``batching_enabled`` is True in both flavours (pulsar-client's blocking
``create_producer``: False; ``pulsar.asyncio``: True), and the asyncio producer waits for room when
``max_pending_messages`` are in flight (``block_if_queue_full=True``, the natural back-pressure of
``await``), where the blocking one keeps pulsar-client's False. The config object is
``producer.config.ProducerConfig``; the blocking facade always asks it for True and applies its own
``block_if_queue_full`` before the loop.
"""

from __future__ import annotations

from magnetar.client.config.arguments import of_type, of_type_or_none
from magnetar.client.config.option_list import REQUIRED, Option, OptionList, Place, extension
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    HashingScheme,
    PartitionsRoutingMode,
    ProducerAccessMode,
)

__all__ = ["PRODUCER_OPTIONS"]

_INT = of_type(int)
_BOOL = of_type(bool)

PRODUCER_OPTIONS = OptionList(
    "create_producer",
    [
        Option("topic", REQUIRED, of_type(str), config=Place.ABSENT),
        Option("producer_name", None, of_type_or_none(str)),
        Option("schema", None),  # checked by the config (``schema_codec``)
        Option("initial_sequence_id", None, of_type_or_none(int)),
        Option("send_timeout_millis", 30000, _INT),
        Option("compression_type", CompressionType.NONE, of_type(CompressionType)),
        Option("max_pending_messages", 1000, _INT),
        Option("max_pending_messages_across_partitions", 50000, _INT),
        Option("block_if_queue_full", False, _BOOL, asyncio_default=True),
        Option("batching_enabled", True, _BOOL),
        Option("batching_max_messages", 1000, _INT),
        Option("batching_max_allowed_size_in_bytes", 128 * 1024, _INT),
        Option("batching_max_publish_delay_ms", 10, of_type((int, float))),
        Option("chunking_enabled", False, _BOOL),
        Option("message_routing_mode", PartitionsRoutingMode.RoundRobinDistribution, of_type(PartitionsRoutingMode)),
        Option("lazy_start_partitioned_producers", False, _BOOL),
        Option("properties", None, of_type_or_none(dict)),
        Option("batching_type", BatchingType.Default, of_type(BatchingType)),
        Option("encryption_key", None, of_type_or_none(str)),
        Option("crypto_key_reader", None),
        Option("access_mode", ProducerAccessMode.Shared, of_type(ProducerAccessMode)),
        Option("message_router", None),
        # ---- beyond pulsar-client
        extension("hashing_scheme", HashingScheme.JavaStringHash),
    ],
)
