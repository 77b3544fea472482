"""``create_producer``'s options, defined once (``option_list.py`` says how the table is used).

pulsar-client 3.x's arguments in its order, names and defaults, then Magnetar's keyword-only
``hashing_scheme``. Two defaults differ from pulsar-client on purpose (the README's "Coming from
Pulsar" gives the reasons): ``batching_enabled`` is True in both flavours (pulsar-client's blocking
``create_producer``: False; ``pulsar.asyncio``: True), and the asyncio producer waits for room when
``max_pending_messages`` are in flight (``block_if_queue_full=True``, the natural back-pressure of
``await``), where the blocking one keeps pulsar-client's False. The config object is
``producer.config.ProducerConfig``; the blocking facade always asks it for True and applies its own
``block_if_queue_full`` before the loop.

Batching and chunking exclude each other. pulsar-client refuses ``batching_enabled=True`` with
``chunking_enabled=True`` (``ValueError``), and so does Magnetar when the caller passes both; but
batching is on here by default, where pulsar-client's blocking ``create_producer`` has it off, so a
pulsar-client program that asks only for chunking must still get a producer: the default gives way
(``ProducerConfig``). Only the call can tell a default from a value given, so both flavours'
``create_producer`` are wrapped in ``refuses_batching_with_chunking``, which looks at what the
caller passed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from magnetar.client.config.arguments import of_type, of_type_or_none
from magnetar.client.config.option_list import REQUIRED, Option, OptionList, Place, extension
from magnetar.client.options import (
    BatchingType,
    CompressionType,
    HashingScheme,
    PartitionsRoutingMode,
    ProducerAccessMode,
)

__all__ = ["PRODUCER_OPTIONS", "refuses_batching_with_chunking", "refuses_batching_with_chunking_async"]

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


P = ParamSpec("P")
R = TypeVar("R")


def _check_given(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """pulsar-client's ``ValueError`` when the caller passed ``batching_enabled=True`` and ``chunking_enabled=True``."""
    try:
        given = signature.bind(*args, **kwargs).arguments  # only what the caller passed, no defaults
    except TypeError:
        return  # a wrong call: the function itself raises Python's TypeError
    if given.get("batching_enabled") is True and given.get("chunking_enabled") is True:
        raise ValueError("Batching and chunking of messages can't be enabled together.")


def refuses_batching_with_chunking(create: Callable[P, R]) -> Callable[P, R]:
    """The blocking ``create_producer``, refusing batching given with chunking (see the module docstring)."""
    signature = inspect.signature(create)

    @functools.wraps(create)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        _check_given(signature, args, kwargs)
        return create(*args, **kwargs)

    return checked


def refuses_batching_with_chunking_async(
    create: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """The asyncio ``create_producer``, refusing batching given with chunking (see the module docstring)."""
    signature = inspect.signature(create)

    @functools.wraps(create)
    async def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        _check_given(signature, args, kwargs)
        return await create(*args, **kwargs)

    return checked
