"""Every option of a consumer: ``subscribe``'s option list (``SUBSCRIBE_OPTIONS``) and the validated
dataclass the asyncio client builds from it (``ConsumerConfig``).

``SUBSCRIBE_OPTIONS`` is the one definition of ``subscribe``'s options (``option_list.py``):
pulsar-client 3.x's in its order, names and defaults, then Magnetar's keyword-only extensions. The
flavours differ where pulsar-client's do: only the blocking ``subscribe`` takes a
``message_listener`` (run on the listener threads, so the config never gets one), only the asyncio
one an ``is_pattern_topic``, and the asyncio one takes ``pattern_auto_discovery_period`` as a
keyword. ``ConsumerConfig``'s fields are the list's, in its order, without the topic. Options we implement are checked
as pulsar-client checks them (same exception type); options that would be harmless no-ops here are
accepted with any value; options we do not implement take their default only, and anything else
raises ``Unsupported`` at subscribe time instead of being silently ignored (``_unsupported``).

Beyond pulsar-client (keyword-only, Java's features under Python names): ``retry_enable``
(Java's ``enableRetry``), ``negative_ack_redelivery_backoff``, ``ack_timeout_redelivery_backoff``,
``ack_timeout_tick_time_ms``, ``priority_level``, ``expire_time_of_incomplete_chunked_message_ms``
(Java's ``expireTimeOfIncompleteChunkedMessage``, the C++ client's
``setExpireTimeOfIncompleteChunkedMessageMs``, default 60000; pulsar-client's Python ``subscribe``
has no such argument).

The consumer also needs its client to publish to the dead letter and retry topics and to create
the dead letter topic's initial subscription. It gets that through two callables that the client
sets (``aio.Client.subscribe`` does), typed with the small protocols below so that the consumer
modules need not import ``aio``:

- ``producer_factory(topic)`` returns a producer on ``topic`` (``aio.Client.create_producer(topic,
  batching_enabled=False)`` fits: each letter alone in its entry, as Pulsar's dead letter producer
  sends them, and a delayed retry letter must be alone anyway). The consumer closes it on close.
- ``subscriber_factory(topic, subscription)`` makes sure ``subscription`` exists on ``topic``:
  subscribe at ``InitialPosition.Earliest`` (``Shared``, so that it never collides with the
  subscription's live consumers) and close at once. ``ConsumerBusy`` from it means "it exists".

Both stay None for a reader or any consumer without ``dead_letter_policy`` / ``retry_enable``.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from magnetar.client.config.arguments import callable_or_none, check_topics, of_type, of_type_or_none
from magnetar.client.config.option_list import REQUIRED, Check, Option, OptionList, Place, extension
from magnetar.client.options import (
    ConsumerBatchReceivePolicy,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    RedeliveryBackoff,
    RegexSubscriptionMode,
)
from magnetar.client.schema_codec import check_schema
from magnetar.protocol.errors import Unsupported
from magnetar.protocol.message_id import MessageId

# pulsar-client (the C++ client under it) refuses a non-zero ack timeout below 10 s.
MIN_UNACKED_MESSAGES_TIMEOUT_MS = 10_000
# Java's minimum ``ackTimeoutTickTime``.
MIN_ACK_TIMEOUT_TICK_TIME_MS = 100


class PartitionProducerLike(Protocol):
    """One partition of a letter producer: only its topic name is read (to scan the dead letter topic)."""

    @property
    def topic(self) -> str: ...


class LetterProducer(Protocol):
    """What the dead letter and retry logic uses of a producer (``aio.Producer`` is one)."""

    def topic(self) -> str: ...

    @property
    def partitions(self) -> Sequence[PartitionProducerLike]: ...

    async def send(
        self,
        content: bytes | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        *,
        event_timestamp: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId: ...

    async def close(self) -> None: ...


ProducerFactory = Callable[[str], Awaitable[LetterProducer]]
SubscriberFactory = Callable[[str, str], Awaitable[None]]


@dataclass
class ConsumerConfig:
    """The options of one consumer (see the module docstring); validated on construction."""

    subscription_name: str
    consumer_type: ConsumerType = ConsumerType.Exclusive
    # A ``magnetar.schema`` schema; None or ``BytesSchema``: bytes (``schema_codec``).
    schema: Any = None
    message_listener: Callable[..., Any] | None = None
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50000
    consumer_name: str | None = None
    # None or 0: off. Otherwise >= 10000 (pulsar-client's rule, ValueError below it).
    unacked_messages_timeout_ms: int | None = None
    # No-op: there is no broker consumer stats call to cache.
    broker_consumer_stats_cache_time_ms: int = 30000
    negative_ack_redelivery_delay_ms: int = 60000
    # Sent in ``subscribe`` (WIRE.md R46b); the broker refuses it on Shared and Key_Shared.
    is_read_compacted: bool = False
    # Sent in ``subscribe`` (WIRE.md R106): the consumer's ``metadata`` in subscription stats.
    properties: dict[str, str] | None = None
    pattern_auto_discovery_period: int = 60
    initial_position: InitialPosition = InitialPosition.Latest
    crypto_key_reader: Any = None
    # No-op: there is no geo-replication, so no subscription state to replicate (as on a Pulsar
    # cluster without replication).
    replicate_subscription_state_enabled: bool = False
    # Chunked messages (``consumer.chunks.ChunkAssembler``): incomplete ones buffered at most (0: no limit),
    # and whether the oldest is acknowledged (else left for redelivery) when one more arrives.
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    start_message_id_inclusive: bool = False
    # ``batch_receive``'s bounds (None: the C++ client's default policy).
    batch_receive_policy: ConsumerBatchReceivePolicy | None = None
    key_shared_policy: ConsumerKeySharedPolicy | None = None
    batch_index_ack_enabled: bool = False
    regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly
    dead_letter_policy: ConsumerDeadLetterPolicy | None = None
    # What to do with an entry that cannot be decrypted (``encryption.decryption``).
    crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL
    # ---- beyond pulsar-client
    retry_enable: bool = field(default=False, kw_only=True)
    negative_ack_redelivery_backoff: RedeliveryBackoff | None = field(default=None, kw_only=True)
    ack_timeout_redelivery_backoff: RedeliveryBackoff | None = field(default=None, kw_only=True)
    ack_timeout_tick_time_ms: int = field(default=1000, kw_only=True)
    priority_level: int = field(default=0, kw_only=True)
    # An incomplete chunked message is dropped (its chunks acknowledged) this long after its first
    # chunk arrived; 0: never.
    expire_time_of_incomplete_chunked_message_ms: int = field(default=60_000, kw_only=True)
    # ---- set by the client (see the module docstring)
    producer_factory: ProducerFactory | None = field(default=None, kw_only=True, repr=False, compare=False)
    subscriber_factory: SubscriberFactory | None = field(default=None, kw_only=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.consumer_type = ConsumerType(self.consumer_type)
        self.initial_position = InitialPosition(self.initial_position)
        self.regex_subscription_mode = RegexSubscriptionMode(self.regex_subscription_mode)
        self.crypto_failure_action = ConsumerCryptoFailureAction(self.crypto_failure_action)
        if self.crypto_key_reader is not None and not callable(getattr(self.crypto_key_reader, "private_key", None)):
            raise ValueError("Argument crypto_key_reader is expected to be of type 'CryptoKeyReader'")
        if not isinstance(self.subscription_name, str) or not self.subscription_name:
            raise ValueError("subscription_name must be a non-empty string")
        if self.consumer_name is not None and not isinstance(self.consumer_name, str):
            raise ValueError("Argument consumer_name is expected to be either None or of type 'str'")
        if not self.consumer_name:  # as Pulsar's clients: a random name of five hex digits, sent to the broker
            self.consumer_name = secrets.token_hex(3)[:5]
        timeout = self.unacked_messages_timeout_ms
        if timeout and timeout < MIN_UNACKED_MESSAGES_TIMEOUT_MS:
            raise ValueError(
                "Consumer Config Exception: Unacknowledged message timeout should be greater than 10 seconds."
            )
        if self.negative_ack_redelivery_delay_ms < 0:
            raise ValueError("negative_ack_redelivery_delay_ms must be >= 0")
        if self.ack_timeout_tick_time_ms < MIN_ACK_TIMEOUT_TICK_TIME_MS:
            raise ValueError(f"ack_timeout_tick_time_ms must be >= {MIN_ACK_TIMEOUT_TICK_TIME_MS}")
        if self.priority_level < 0:
            raise ValueError("priority_level must be >= 0")
        if type(self.max_pending_chunked_message) is bool or not isinstance(self.max_pending_chunked_message, int):
            raise ValueError("Argument max_pending_chunked_message is expected to be of type 'int'")
        if self.max_pending_chunked_message < 0:
            raise ValueError("max_pending_chunked_message must be >= 0")
        if self.expire_time_of_incomplete_chunked_message_ms < 0:
            raise ValueError("expire_time_of_incomplete_chunked_message_ms must be >= 0")
        if self.receiver_queue_size < 0:
            raise ValueError("receiver_queue_size must be >= 0")
        if self.key_shared_policy is not None and not isinstance(self.key_shared_policy, ConsumerKeySharedPolicy):
            raise ValueError("key_shared_policy must be a ConsumerKeySharedPolicy")
        if self.properties is not None and (
            not isinstance(self.properties, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in self.properties.items())
        ):
            raise ValueError("Argument properties is expected to be either None or a dict of str to str")
        if self.batch_receive_policy is not None and not isinstance(
            self.batch_receive_policy, ConsumerBatchReceivePolicy
        ):
            raise ValueError(
                "Argument batch_receive_policy is expected to be either None or of type 'ConsumerBatchReceivePolicy'"
            )
        if self.dead_letter_policy is not None and not isinstance(self.dead_letter_policy, ConsumerDeadLetterPolicy):
            raise ValueError("dead_letter_policy must be a ConsumerDeadLetterPolicy")
        check_schema(self.schema)
        problem = self._unsupported()
        if problem:
            raise Unsupported(f"{problem} is not supported by the Magnetar client")

    def _unsupported(self) -> str | None:
        """The first option set to something we do not implement (None: all fine).

        The client API layer may implement some of these itself (a message listener, say): it then
        clears the option before building the config.
        """
        if self.message_listener is not None:
            return "message_listener"
        return None

    def queue_size_per_partition(self, partitions: int) -> int:
        """Each partition consumer's receiver queue when one consumer has ``partitions`` of them: the C++
        client's ``min(receiver_queue_size, max_total_receiver_queue_size_across_partitions // partitions)``."""
        if partitions <= 1:
            return self.receiver_queue_size
        return max(1, min(self.receiver_queue_size, self.max_total_receiver_queue_size_across_partitions // partitions))

    @property
    def ack_timeout_enabled(self) -> bool:
        return bool(self.unacked_messages_timeout_ms)

    @property
    def max_redeliver_count(self) -> int | None:
        """Redeliveries before the dead letter topic; with ``retry_enable`` and no policy, Java's 16."""
        if self.dead_letter_policy is not None:
            return self.dead_letter_policy.max_redeliver_count
        if self.retry_enable:
            return MAX_RECONSUMETIMES
        return None


# Java's RetryMessageUtil.MAX_RECONSUMETIMES: the retry limit when retry is enabled without a policy.
MAX_RECONSUMETIMES = 16


_INT = of_type(int)
_BOOL = of_type(bool)


def _option(name: str, default: Any, check: Check | None = None, *, asyncio: Place = Place.POSITIONAL) -> Option:
    """pulsar-client's option: positional in the blocking flavour and in ``ConsumerConfig``."""
    return Option(name, default, check, asyncio=asyncio, config=Place.POSITIONAL)


SUBSCRIBE_OPTIONS = OptionList(
    "subscribe",
    [
        Option("topic", REQUIRED, check_topics, config=Place.ABSENT),  # the client's, not the config's
        _option("subscription_name", REQUIRED, of_type(str)),
        _option("consumer_type", ConsumerType.Exclusive, of_type(ConsumerType)),
        _option("schema", None),  # checked by the config (``schema_codec``)
        _option(
            "message_listener",
            None,
            callable_or_none("(consumer, message)"),
            asyncio=Place.ABSENT,
        ),
        _option("receiver_queue_size", 1000, _INT),
        _option("max_total_receiver_queue_size_across_partitions", 50000, _INT),
        _option("consumer_name", None, of_type_or_none(str)),
        _option("unacked_messages_timeout_ms", None, of_type_or_none(int)),
        _option("broker_consumer_stats_cache_time_ms", 30000, _INT),
        _option("negative_ack_redelivery_delay_ms", 60000, of_type_or_none(int)),
        _option("is_read_compacted", False, _BOOL),
        _option("properties", None, of_type_or_none(dict)),
        _option("pattern_auto_discovery_period", 60, _INT, asyncio=Place.KEYWORD),
        _option("initial_position", InitialPosition.Latest, of_type(InitialPosition)),
        _option("crypto_key_reader", None),
        _option("replicate_subscription_state_enabled", False),
        _option("max_pending_chunked_message", 10),
        _option("auto_ack_oldest_chunked_message_on_queue_full", False),
        _option("start_message_id_inclusive", False),
        _option("batch_receive_policy", None),
        _option("key_shared_policy", None),
        _option("batch_index_ack_enabled", False, _BOOL),
        _option(
            "regex_subscription_mode",
            RegexSubscriptionMode.PersistentOnly,
            of_type(RegexSubscriptionMode),
        ),
        _option("dead_letter_policy", None),
        _option(
            "crypto_failure_action",
            ConsumerCryptoFailureAction.FAIL,
            of_type(ConsumerCryptoFailureAction),
        ),
        # pulsar.asyncio's: a string topic is a pattern (the blocking flavour takes a compiled one).
        Option("is_pattern_topic", False, blocking=Place.ABSENT, config=Place.ABSENT),
        # ---- beyond pulsar-client
        extension("retry_enable", False),
        extension("negative_ack_redelivery_backoff", None),
        extension("ack_timeout_redelivery_backoff", None),
        extension("ack_timeout_tick_time_ms", 1000),
        extension("priority_level", 0),
        extension("expire_time_of_incomplete_chunked_message_ms", 60000),
    ],
)
