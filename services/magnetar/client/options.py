"""Enums and option classes named after Pulsar's Python client, so that code written for ``pulsar`` reads the same.

``ConsumerType`` values are the wire names of subscription types (WIRE.md ``subscribe.sub_type``),
``InitialPosition`` values the wire names of ``subscribe.initial_position`` and ``KeySharedMode``
values those of ``subscribe.key_shared_mode``, so no mapping table sits between the public API and
the frames. ``CompressionType`` is the protocol's own enum: one definition, shared by the producer
that compresses and the consumer that decompresses.

The option classes (``ConsumerKeySharedPolicy``, ``ConsumerDeadLetterPolicy``,
``ConsumerBatchReceivePolicy``) take pulsar-client 3.x's arguments, defaults and checks; they hold
plain attributes instead of wrapping a C++ policy. They live here, below the config and the
consumer, so that both can name them (``consumer.batch_receive`` applies the batch policy).
``MultiplierRedeliveryBackoff`` is Java's (the Python client has no redelivery back-off): the
delays of negative acks and ack timeouts can grow with a message's redelivery count.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from enum import Enum
from typing import Protocol

from magnetar.protocol.compression import CompressionType
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.result import Result

__all__ = [
    "BatchingType",
    "CompressionType",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "ProducerAccessMode",
    "RedeliveryBackoff",
    "RegexSubscriptionMode",
    "Result",
    "check_disjoint",
    "result_of",
]


class ConsumerType(Enum):
    """Subscription type; the value is what the ``subscribe`` command carries."""

    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    KeyShared = "Key_Shared"
    # Pulsar spells it ``KeyShared``; the wire spells it ``Key_Shared``: accept both (an alias).
    Key_Shared = "Key_Shared"


class InitialPosition(Enum):
    """Where a new subscription's cursor starts."""

    Latest = "Latest"
    Earliest = "Earliest"


class KeySharedMode(Enum):
    """How a Key_Shared consumer gets its hash ranges; the value is ``subscribe.key_shared_mode``."""

    AutoSplit = "AUTO_SPLIT"
    Sticky = "STICKY"


class BatchingType(Enum):
    """How a producer groups messages into batches (``create_producer(batching_type=...)``)."""

    Default = 0
    KeyBased = 1


class PartitionsRoutingMode(Enum):
    """Which partition an unkeyed message of a partitioned topic goes to (``client.routing``).

    Pulsar's names and values (C++ ``ProducerConfiguration::PartitionsRoutingMode``). A keyed
    message always goes by the hash of its key, except under ``CustomPartition``, where the
    ``message_router`` decides every message.
    """

    UseSinglePartition = 0
    RoundRobinDistribution = 1
    CustomPartition = 2


class HashingScheme(Enum):
    """The hash a keyed message is routed by: ``hash(partition_key) % partitions``.

    The C++ client's names and values (``ProducerConfiguration::HashingScheme``); pulsar-client's
    Python API does not expose it (it always uses ``BoostHash``, which depends on the Boost
    version and platform, so Magnetar refuses it). ``JavaStringHash`` (the Java client's default,
    and Magnetar's) and ``Murmur3_32Hash`` put a key on the partition a Java producer would.
    """

    Murmur3_32Hash = 0
    BoostHash = 1
    JavaStringHash = 2


class ProducerAccessMode(Enum):
    """Access a producer requires on its topic, enforced by the broker (WIRE.md R102,
    ``broker.topics.producer_access``)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class RegexSubscriptionMode(Enum):
    """Which topics a pattern subscription matches: persistent ones, non-persistent ones, or both."""

    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


class ConsumerCryptoFailureAction(Enum):
    """What a consumer does with a message it cannot decrypt (``encryption.decryption``)."""

    FAIL = 0
    DISCARD = 1
    CONSUME = 2


def check_disjoint(ranges: Sequence[tuple[int, int]]) -> None:
    """``ValueError`` if two of the inclusive hash ranges share a hash."""
    ordered = sorted(ranges)
    for (start, end), (next_start, next_end) in itertools.pairwise(ordered):
        if next_start <= end:
            raise ValueError(f"Ranges for KeyShared policy overlap: {(start, end)} and {(next_start, next_end)}")


class ConsumerKeySharedPolicy:
    """Key_Shared options, as ``pulsar.ConsumerKeySharedPolicy``.

    ``sticky_ranges`` are inclusive ``(start, end)`` hash ranges within 0..65535 and are required
    with ``KeySharedMode.Sticky`` (pulsar-client raises ``ValueError`` without them). Ranges that
    overlap are refused here, with ``ValueError``, as pulsar-client's policy refuses them when it is
    built: a key in two ranges of one consumer is a mistake, which the broker would otherwise
    report only as a conflict with the consumer itself.
    """

    __slots__ = ("_allow_out_of_order_delivery", "_key_shared_mode", "_sticky_ranges")

    def __init__(
        self,
        key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit,
        allow_out_of_order_delivery: bool = False,
        sticky_ranges: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        key_shared_mode = KeySharedMode(key_shared_mode)
        if key_shared_mode == KeySharedMode.Sticky and sticky_ranges is None:
            raise ValueError("When using key_shared_mode = KeySharedMode.Sticky you must also provide sticky_ranges")
        ranges: list[tuple[int, int]] = []
        for item in sticky_ranges or ():
            start, end = (int(x) for x in item)
            if not 0 <= start <= end < 65536:
                raise ValueError(f"sticky range {(start, end)} must satisfy 0 <= start <= end < 65536")
            ranges.append((start, end))
        check_disjoint(ranges)
        self._key_shared_mode = key_shared_mode
        self._allow_out_of_order_delivery = bool(allow_out_of_order_delivery)
        self._sticky_ranges = ranges

    @property
    def key_shared_mode(self) -> KeySharedMode:
        return self._key_shared_mode

    @property
    def allow_out_of_order_delivery(self) -> bool:
        return self._allow_out_of_order_delivery

    @property
    def sticky_ranges(self) -> list[tuple[int, int]]:
        return list(self._sticky_ranges)

    def policy(self) -> ConsumerKeySharedPolicy:
        """The policy itself (pulsar-client returns its C++ object here)."""
        return self

    def __repr__(self) -> str:
        return (
            f"ConsumerKeySharedPolicy({self._key_shared_mode}, allow_out_of_order_delivery="
            f"{self._allow_out_of_order_delivery}, sticky_ranges={self._sticky_ranges})"
        )


class ConsumerDeadLetterPolicy:
    """Dead letter options, as ``pulsar.ConsumerDeadLetterPolicy``.

    A message redelivered more than ``max_redeliver_count`` times goes to ``dead_letter_topic``
    (default ``{topic}-{subscription}-DLQ``) instead of back to the application; with
    ``initial_subscription_name`` that subscription is created on the dead letter topic before the
    first message is published there, so retention keeps them. ``dead_letter.py`` has the rules.
    """

    __slots__ = ("_dead_letter_topic", "_initial_subscription_name", "_max_redeliver_count")

    def __init__(
        self,
        max_redeliver_count: int,
        dead_letter_topic: str | None = None,
        initial_subscription_name: str | None = None,
    ) -> None:
        if max_redeliver_count is None or max_redeliver_count < 1:
            raise ValueError("max_redeliver_count must be greater than 0")
        self._max_redeliver_count = int(max_redeliver_count)
        self._dead_letter_topic = dead_letter_topic or ""
        self._initial_subscription_name = initial_subscription_name or ""

    @property
    def max_redeliver_count(self) -> int:
        return self._max_redeliver_count

    @property
    def dead_letter_topic(self) -> str:
        """The topic given, or "" for the default name (``{topic}-{subscription}-DLQ``, which
        depends on the consumer's topic, so the consumer works it out), as pulsar-client's getter."""
        return self._dead_letter_topic

    @property
    def initial_subscription_name(self) -> str:
        """The subscription to create on the dead letter topic, or "" for none (pulsar-client's getter)."""
        return self._initial_subscription_name

    def policy(self) -> ConsumerDeadLetterPolicy:
        """The policy itself (pulsar-client returns its C++ object here)."""
        return self

    def __repr__(self) -> str:
        return (
            f"ConsumerDeadLetterPolicy(max_redeliver_count={self._max_redeliver_count}, "
            f"dead_letter_topic={self._dead_letter_topic!r}, "
            f"initial_subscription_name={self._initial_subscription_name!r})"
        )


# The C++ client's BatchReceivePolicy defaults (pulsar-client has no Python-side defaults).
DEFAULT_MAX_NUM_MESSAGE = -1
DEFAULT_MAX_NUM_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 100


def _int_arg(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


class ConsumerBatchReceivePolicy:
    """How ``batch_receive`` bounds a batch, as ``pulsar.ConsumerBatchReceivePolicy``.

    ``max_num_message`` and ``max_num_bytes`` below 1 mean no limit; if both are, they are reset
    to the defaults (no count limit, 10 MiB), as the C++ client does. ``timeout_ms`` below 1 means
    wait until the batch is full. All three below 1 is refused (``ValueError``).
    """

    __slots__ = ("_max_num_bytes", "_max_num_message", "_timeout_ms")

    def __init__(self, max_num_message: int, max_num_bytes: int, timeout_ms: int) -> None:
        count = _int_arg(max_num_message, "max_num_message")
        size = _int_arg(max_num_bytes, "max_num_bytes")
        timeout = _int_arg(timeout_ms, "timeout_ms")
        if count <= 0 and size <= 0 and timeout <= 0:
            raise ValueError("At least one of max_num_message, max_num_bytes and timeout_ms must be greater than 0")
        if count <= 0 and size <= 0:
            count, size = DEFAULT_MAX_NUM_MESSAGE, DEFAULT_MAX_NUM_BYTES
        self._max_num_message = count
        self._max_num_bytes = size
        self._timeout_ms = timeout

    @property
    def max_num_message(self) -> int:
        return self._max_num_message

    @property
    def max_num_bytes(self) -> int:
        return self._max_num_bytes

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    def policy(self) -> ConsumerBatchReceivePolicy:
        """The policy itself (pulsar-client returns its C++ object here)."""
        return self

    def full(self, count: int, size: int) -> bool:
        """Whether a batch of ``count`` messages and ``size`` bytes is complete."""
        return (0 < self._max_num_message <= count) or (0 < self._max_num_bytes <= size)

    def fits(self, count: int, size: int, more: int) -> bool:
        """Whether one more message of ``more`` bytes may join a batch of ``count`` and ``size``."""
        if count == 0:
            return True
        if 0 < self._max_num_message <= count:
            return False
        return not (self._max_num_bytes > 0 and size + more > self._max_num_bytes)

    def __repr__(self) -> str:
        return (
            f"ConsumerBatchReceivePolicy(max_num_message={self._max_num_message}, "
            f"max_num_bytes={self._max_num_bytes}, timeout_ms={self._timeout_ms})"
        )


class RedeliveryBackoff(Protocol):
    """A redelivery delay that depends on how often the message was delivered already (Java's ``RedeliveryBackoff``)."""

    def next(self, redelivery_count: int) -> int:
        """The delay in milliseconds before redelivering a message delivered ``redelivery_count`` times before."""
        ...


class MultiplierRedeliveryBackoff:
    """Java's ``MultiplierRedeliveryBackoff``: ``min(max_delay_ms, min_delay_ms * multiplier ** redelivery_count)``.

    For ``negative_ack_redelivery_backoff`` (the delay of a negative ack, instead of the fixed
    ``negative_ack_redelivery_delay_ms``) and ``ack_timeout_redelivery_backoff`` (added to
    ``unacked_messages_timeout_ms``). Defaults and checks are the Java builder's.
    """

    __slots__ = ("max_delay_ms", "min_delay_ms", "multiplier")

    def __init__(self, min_delay_ms: int = 1000, max_delay_ms: int = 60000, multiplier: float = 2.0) -> None:
        if min_delay_ms < 0:
            raise ValueError("min_delay_ms must be >= 0")
        if max_delay_ms < min_delay_ms:
            raise ValueError("max_delay_ms must be >= min_delay_ms")
        if multiplier < 1:
            raise ValueError("multiplier must be >= 1")
        self.min_delay_ms = int(min_delay_ms)
        self.max_delay_ms = int(max_delay_ms)
        self.multiplier = float(multiplier)

    def next(self, redelivery_count: int) -> int:
        if redelivery_count <= 0 or self.min_delay_ms <= 0:
            return self.min_delay_ms
        # Capped before the power can overflow a float for large counts.
        exponent = min(redelivery_count, 64)
        return int(min(self.max_delay_ms, self.min_delay_ms * self.multiplier**exponent))

    def __repr__(self) -> str:
        return f"MultiplierRedeliveryBackoff({self.min_delay_ms}, {self.max_delay_ms}, {self.multiplier})"


def result_of(exc: BaseException | Result) -> Result:
    """The Pulsar-style ``Result`` member for an outcome (``Result.Ok`` passes through)."""
    if isinstance(exc, Result):
        return exc
    if isinstance(exc, MagnetarError):
        return exc.error()
    return Result.UnknownError
