"""Argument checks of pulsar-client, with its exception (``ValueError``) and its messages.

pulsar-client checks the type of every argument of ``create_producer``, ``subscribe``,
``create_reader`` and ``send`` before it does anything (its ``_check_type`` and
``_check_type_or_none``), so that ``subscribe(topic, None)`` fails at the call instead of creating
a subscription named "None", and ``producer_name=5`` is not silently turned into "5". Programs
and tests written for it expect that ``ValueError``, so the checks and their wording are the same
here. As in pulsar-client, ``bool`` passes for ``int`` (it is one in Python).

The service URL is checked as the C++ client's ``ServiceURI`` does: a missing or unknown scheme is
a ``ValueError`` when the ``Client`` is built, not a connection failure at the first lookup.
"""

from __future__ import annotations

import re
from typing import Any

from magnetar.client.options import (
    BatchingType,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
)

__all__ = [
    "check_message_arguments",
    "check_producer_arguments",
    "check_reader_arguments",
    "check_service_url",
    "check_subscribe_arguments",
    "check_type",
    "check_type_or_none",
]

SERVICE_URL_SCHEMES = ("pulsar", "pulsar+ssl", "magnetar", "magnetar+ssl", "http", "https")


def check_type(var_type: type | tuple[type, ...], var: object, name: str) -> None:
    """``ValueError`` unless ``var`` is a ``var_type`` (pulsar-client's ``_check_type``)."""
    if not isinstance(var, var_type):
        raise ValueError(
            f"Argument {name} is expected to be of type '{_name(var_type)}' and not '{type(var).__name__}'"
        )


def check_type_or_none(var_type: type | tuple[type, ...], var: object, name: str) -> None:
    """``ValueError`` unless ``var`` is None or a ``var_type`` (pulsar-client's ``_check_type_or_none``)."""
    if var is not None and not isinstance(var, var_type):
        raise ValueError(f"Argument {name} is expected to be either None or of type '{_name(var_type)}'")


def _name(var_type: type | tuple[type, ...]) -> str:
    return var_type.__name__ if isinstance(var_type, type) else var_type[0].__name__


def check_service_url(url: str) -> None:
    """``ValueError`` for a service URL without a known scheme, worded as the C++ client's.

    Only the start is checked: in ``pulsar://h1:6650,h2:6650`` the scheme covers every host.
    """
    if "://" not in url:
        raise ValueError(f"The scheme part is missing: {url}")
    scheme = url.split("://", 1)[0]
    if not scheme:
        raise ValueError(f"Expected scheme name at index 0: {url}")
    if scheme not in SERVICE_URL_SCHEMES:
        raise ValueError(f"Invalid scheme: {scheme}")


def check_message_arguments(
    properties: Any,
    partition_key: Any,
    ordering_key: Any,
    sequence_id: Any,
    replication_clusters: Any,
    disable_replication: Any,
    event_timestamp: Any,
) -> None:
    """The checks of ``Producer.send`` / ``send_async`` (the content is checked by ``check_content``)."""
    check_type_or_none(dict, properties, "properties")
    check_type_or_none(str, partition_key, "partition_key")
    check_type_or_none(str, ordering_key, "ordering_key")
    check_type_or_none(int, sequence_id, "sequence_id")
    check_type_or_none(list, replication_clusters, "replication_clusters")
    check_type(bool, disable_replication, "disable_replication")
    check_type_or_none(int, event_timestamp, "event_timestamp")


def check_producer_arguments(arguments: dict[str, Any]) -> None:
    """The checks of ``Client.create_producer``, on its arguments by name (``locals()`` of the call)."""
    check_type(str, arguments["topic"], "topic")
    check_type_or_none(str, arguments["producer_name"], "producer_name")
    check_type_or_none(int, arguments["initial_sequence_id"], "initial_sequence_id")
    for name in ("send_timeout_millis", "max_pending_messages", "max_pending_messages_across_partitions"):
        check_type(int, arguments[name], name)
    for name in ("batching_max_messages", "batching_max_allowed_size_in_bytes"):
        check_type(int, arguments[name], name)
    check_type((int, float), arguments["batching_max_publish_delay_ms"], "batching_max_publish_delay_ms")
    for name in ("block_if_queue_full", "batching_enabled", "chunking_enabled", "lazy_start_partitioned_producers"):
        check_type(bool, arguments[name], name)
    check_type_or_none(dict, arguments["properties"], "properties")
    check_type_or_none(str, arguments["encryption_key"], "encryption_key")
    check_type(CompressionType, arguments["compression_type"], "compression_type")
    check_type(PartitionsRoutingMode, arguments["message_routing_mode"], "message_routing_mode")
    check_type(BatchingType, arguments["batching_type"], "batching_type")
    check_type(ProducerAccessMode, arguments["access_mode"], "access_mode")


def check_subscribe_arguments(arguments: dict[str, Any]) -> None:
    """The checks of ``Client.subscribe``, on its arguments by name."""
    topic = arguments["topic"]
    if not isinstance(topic, str | list | tuple | re.Pattern):
        raise ValueError("Argument 'topic' is expected to be of a type between (str, list, re.pattern)")
    check_type(str, arguments["subscription_name"], "subscription_name")
    check_type(ConsumerType, arguments["consumer_type"], "consumer_type")
    check_type(InitialPosition, arguments["initial_position"], "initial_position")
    check_type(RegexSubscriptionMode, arguments["regex_subscription_mode"], "regex_subscription_mode")
    check_type(ConsumerCryptoFailureAction, arguments["crypto_failure_action"], "crypto_failure_action")
    for name in ("receiver_queue_size", "max_total_receiver_queue_size_across_partitions"):
        check_type(int, arguments[name], name)
    check_type_or_none(str, arguments["consumer_name"], "consumer_name")
    check_type_or_none(int, arguments["unacked_messages_timeout_ms"], "unacked_messages_timeout_ms")
    check_type(int, arguments["broker_consumer_stats_cache_time_ms"], "broker_consumer_stats_cache_time_ms")
    check_type_or_none(int, arguments["negative_ack_redelivery_delay_ms"], "negative_ack_redelivery_delay_ms")
    check_type(int, arguments["pattern_auto_discovery_period"], "pattern_auto_discovery_period")
    for name in ("is_read_compacted", "batch_index_ack_enabled"):
        check_type(bool, arguments[name], name)
    check_type_or_none(dict, arguments["properties"], "properties")


def check_reader_arguments(arguments: dict[str, Any]) -> None:
    """The checks of ``Client.create_reader``, on its arguments by name (the start id by the caller)."""
    check_type(str, arguments["topic"], "topic")
    check_type(int, arguments["receiver_queue_size"], "receiver_queue_size")
    check_type_or_none(str, arguments["reader_name"], "reader_name")
    check_type_or_none(str, arguments["subscription_role_prefix"], "subscription_role_prefix")
    check_type(bool, arguments["is_read_compacted"], "is_read_compacted")
    check_type(ConsumerCryptoFailureAction, arguments["crypto_failure_action"], "crypto_failure_action")
