"""Dead letter and retry letter topics: where a message goes when processing it keeps failing.

Semantics of Pulsar's clients (``ConsumerImpl`` of the C++ client that pulsar-client wraps, and
Java's ``doReconsumeLater`` / ``processPossibleToDLQ``):

- With a ``dead_letter_policy``, an entry delivered with ``redelivery_count >= max_redeliver_count``
  is remembered as a dead letter candidate; it still reaches the application that once. When it is
  then negatively acknowledged, times out unacknowledged or is redelivered on request, it is
  published to the dead letter topic instead of being redelivered, and acknowledged once the dead
  letter topic's receipt came back. An entry arriving with a count above the maximum (another
  consumer failed it last) goes to the dead letter topic without reaching the application.
- The dead letter topic defaults to ``{topic}-{subscription}-DLQ`` where ``topic`` is the full name
  of the topic the consumer read the message from: for a partitioned topic, the *partition*, as the
  C++ client (and Java's, without retry) name it. With ``retry_enable`` it is the first topic's
  ``{topic}-{subscription}-DLQ`` for every partition, as Java's ``ConsumerBuilderImpl`` sets it.
- With ``initial_subscription_name``, that subscription is created on the dead letter topic before
  the first message is published there, so that retention keeps the letters.
- ``reconsume_later`` (``retry_enable``) publishes the message to ``{topic}-{subscription}-RETRY``
  (the first topic's full name) to be delivered after the delay, with ``RECONSUMETIMES`` one
  higher and ``DELAY_TIME`` in ms, then acknowledges the original. Once ``RECONSUMETIMES`` would
  exceed ``max_redeliver_count`` (16 without a policy, Java's ``MAX_RECONSUMETIMES``) the message
  goes to the dead letter topic instead. The retry topic is consumed by the same consumer.
- A letter keeps the message's payload, properties, partition key and event time; ``REAL_TOPIC``
  (the topic it was first read from) and ``ORIGIN_MESSAGE_ID`` (its id there) are added when not
  already present, so they survive a chain of retries.

Exactly one copy in the dead letter topic. Pulsar does not promise it: a crash (of the client, or
of the broker before the acknowledgement is durable) between the publish and the acknowledgement
brings the message back and it is published again. Broker deduplication, where enabled, goes by
producer name and sequence id, which a copy published again after a crash (by a new producer) does
not share, so the client does it, keyed by the letter's origin (``REAL_TOPIC`` +
``ORIGIN_MESSAGE_ID``, which every copy and every retry of one message share):

- the letters of each dead letter topic are indexed by origin: on first use the consumer reads the
  whole topic from the earliest message (a non-durable reader per partition, ``TopicScanner``),
  and before each publish it reads on up to the topic's last message id (``get_last_message_id``),
  so letters published meanwhile by this consumer's earlier life or by another consumer of the
  subscription are seen;
- publishes to one dead letter topic are serialized (a lock), and the origin is looked up just
  before publishing: a message whose origin is already there is only acknowledged.

What is left: two consumers of one Shared subscription publishing the same origin at the same
instant (which needs the broker to hand one message to both, i.e. to have dropped the first
consumer's connection while it was still publishing), and letters removed from the dead letter
topic by retention before a duplicate arrives. If the broker cannot serve the scan (no
non-durable subscriptions or ``get_last_message_id``) the index covers this consumer's life only
and a warning says so; if it cannot serve it *now* (a broker moving or restarting), the letter is
not published and the message is redelivered (or ``reconsume_later`` raises) to be tried again.
Retry letters are at least once, as in Pulsar: a duplicate retry letter means one more attempt,
and its dead letter is still published once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from magnetar.client.config.consumer import ConsumerConfig, LetterProducer
from magnetar.protocol.errors import ConsumerBusy, CryptoError, MagnetarError, RetryableError, Unsupported
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.client.message import Message

log = logging.getLogger(__name__)

# Property names, as Pulsar's RetryMessageUtil (the C++ client sets REAL_TOPIC and
# ORIGIN_MESSAGE_ID only; Java also sets the misspelt legacy ORIGIN_MESSAGE_IDY_TIME, we do not).
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RETRY_GROUP_TOPIC_SUFFIX = "-RETRY"
DLQ_GROUP_TOPIC_SUFFIX = "-DLQ"


def retry_letter_topic(topic: str, subscription: str) -> str:
    """``{topic}-{subscription}-RETRY``, ``topic`` as its full name (Java's default retry topic)."""
    return f"{TopicName.parse(topic)}-{subscription}{RETRY_GROUP_TOPIC_SUFFIX}"


def default_dead_letter_topic(topic: str, subscription: str) -> str:
    """``{topic}-{subscription}-DLQ``, ``topic`` as its full name (Pulsar's default dead letter topic)."""
    return f"{TopicName.parse(topic)}-{subscription}{DLQ_GROUP_TOPIC_SUFFIX}"


def letter_properties(message: Message) -> dict[str, str]:
    """The message's properties plus ``REAL_TOPIC`` / ``ORIGIN_MESSAGE_ID`` when not there yet."""
    props = dict(message.properties())
    props.setdefault(REAL_TOPIC, message.topic_name())
    props.setdefault(ORIGIN_MESSAGE_ID, str(message.message_id()))
    return props


def origin_key(properties: dict[str, str]) -> str | None:
    """What identifies a letter's original message (None for a message that is no letter)."""
    topic = properties.get(REAL_TOPIC)
    origin = properties.get(ORIGIN_MESSAGE_ID)
    if topic is None or origin is None:
        return None
    return f"{topic} {origin}"


def refuse_encrypted(message: Message, what: str) -> None:
    """End-to-end encrypted messages are never republished: the letter producer would send the
    decrypted payload in plaintext (it has no public key). ``CryptoError`` instead (WIRE.md R117):
    a dead letter stays on its subscription, ``reconsume_later`` raises."""
    if message.encryption_context() is not None:
        raise CryptoError(f"{what} of an end-to-end encrypted message refused: it would be republished decrypted")


def delay_millis(delay: timedelta | int) -> int:
    """A ``reconsume_later`` delay as whole milliseconds (an ``int`` is milliseconds); negative is 0."""
    if isinstance(delay, bool) or not isinstance(delay, timedelta | int):
        raise ValueError(f"delay must be a timedelta or an int of milliseconds, not {type(delay).__name__}")
    ms = int(delay / timedelta(milliseconds=1)) if isinstance(delay, timedelta) else delay
    return max(0, ms)


class TopicScanner(Protocol):
    """Reads a topic from its earliest message, in steps (``topic_tail.TopicTail`` is one)."""

    async def catch_up(self) -> list[dict[str, str]]:
        """Read on up to the topic's last message now; return the properties of what was read."""
        ...

    async def close(self) -> None: ...


ScannerFactory = Callable[[Sequence[str]], TopicScanner]


class _DeadLetterTopic:
    """One dead letter topic: its producer, and the origins of the letters already in it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = asyncio.Lock()
        self.producer: LetterProducer | None = None
        self.topics: list[str] = [name]  # what the scanner reads: the producer's partitions
        self.scanner: TopicScanner | None = None
        self.scan_broken = False
        self.origins: set[str] = set()

    def learn(self, letters: Iterable[dict[str, str]]) -> None:
        for props in letters:
            key = origin_key(props)
            if key is not None:
                self.origins.add(key)


class DeadLetters:
    """A consumer's dead letter and retry producers (see the module docstring); created lazily."""

    def __init__(self, config: ConsumerConfig, open_scanner: ScannerFactory) -> None:
        limit = config.max_redeliver_count
        if limit is None:
            raise ValueError("DeadLetters needs a dead_letter_policy or retry_enable")
        if config.producer_factory is None:
            raise ValueError(
                "dead_letter_policy and retry_enable need the client's producer_factory on the ConsumerConfig"
            )
        self.max_redeliver_count = limit
        self._config = config
        self._subscription = config.subscription_name
        self._producer_factory = config.producer_factory
        self._open_scanner = open_scanner
        self._dlqs: dict[str, _DeadLetterTopic] = {}
        self._retry: asyncio.Future[LetterProducer] | None = None
        self._closed = False

    # ---------------------------------------------------------------- names

    def dead_letter_topic(self, topic: str, first_topic: str | None) -> str:
        """Where dead letters of messages read from ``topic`` go (``first_topic``: the consumer's first topic)."""
        policy = self._config.dead_letter_policy
        if policy is not None and policy.dead_letter_topic:
            return str(TopicName.parse(policy.dead_letter_topic))
        if self._config.retry_enable and first_topic is not None:
            return default_dead_letter_topic(first_topic, self._subscription)
        return default_dead_letter_topic(topic, self._subscription)

    # ---------------------------------------------------------------- dead letters

    async def publish_dead_letter(self, dlq_topic: str, message: Message, properties: dict[str, str]) -> bool:
        """Publish one dead letter (once per origin; see the module docstring).

        Returns False when the origin was already in the dead letter topic (nothing published):
        either way the caller may now acknowledge the original. Raises when publishing failed.
        """
        refuse_encrypted(message, "dead letter")
        dlq = await self._topic(dlq_topic)
        key = origin_key(properties)
        async with dlq.lock:
            await self._refresh(dlq)
            if key is not None and key in dlq.origins:
                log.info("dead letter for %s already in %s: acknowledging only", key, dlq_topic)
                return False
            assert dlq.producer is not None
            await dlq.producer.send(
                None if message.has_null_value() else message.data(),  # a null value stays one
                properties,
                message.partition_key() if message.has_partition_key() else None,
                message.ordering_key() or None,  # kept, as pulsar-client's C++ dead letter producer does
                event_timestamp=message.event_timestamp() or None,
            )
            if key is not None:
                dlq.origins.add(key)
        return True

    async def _topic(self, name: str) -> _DeadLetterTopic:
        """The dead letter topic ``name``, set up on first use: initial subscription, producer, index."""
        if self._closed:
            raise Unsupported("the consumer is closed")
        dlq = self._dlqs.get(name)
        if dlq is None:
            dlq = self._dlqs[name] = _DeadLetterTopic(name)
        if dlq.producer is not None:
            return dlq
        async with dlq.lock:
            if dlq.producer is None:
                await self._create_initial_subscription(name)
                producer = await self._producer_factory(name)
                if self._closed:
                    await producer.close()
                    raise Unsupported("the consumer is closed")
                dlq.producer = producer
                dlq.topics = [p.topic for p in producer.partitions] or [name]
                dlq.scanner = self._open_scanner(dlq.topics)
        return dlq

    async def _create_initial_subscription(self, topic: str) -> None:
        policy = self._config.dead_letter_policy
        name = policy.initial_subscription_name if policy is not None else None
        if not name:
            return
        factory = self._config.subscriber_factory
        if factory is None:
            raise ValueError("initial_subscription_name needs the client's subscriber_factory on the ConsumerConfig")
        try:
            await factory(topic, name)
        except ConsumerBusy:
            pass  # a consumer of that subscription is connected: it exists

    async def _refresh(self, dlq: _DeadLetterTopic) -> None:
        """Read the dead letter topic on to its current end.

        A retryable failure (the broker is moving or restarting) fails this publish, so that the
        message is tried again later rather than risk a duplicate; the scanner starts over next
        time. A broker that cannot serve the scan at all leaves us with this consumer's own record.
        """
        scanner = dlq.scanner
        if scanner is None or dlq.scan_broken:
            return
        try:
            dlq.learn(await scanner.catch_up())
        except RetryableError:
            dlq.scanner = self._open_scanner(dlq.topics)
            await scanner.close()
            raise
        except MagnetarError as exc:
            dlq.scan_broken = True
            log.warning(
                "cannot read dead letter topic %s (%s): duplicates after a crash are no longer "
                "detected, only within this consumer's life",
                dlq.name,
                exc,
            )

    # ---------------------------------------------------------------- retry letters

    async def publish_retry_letter(
        self, retry_topic: str, message: Message, properties: dict[str, str], delay_ms: int
    ) -> None:
        """Publish ``message`` to the retry topic, to be delivered ``delay_ms`` from now."""
        refuse_encrypted(message, "reconsume_later")
        producer = await self._retry_producer(retry_topic)
        await producer.send(
            None if message.has_null_value() else message.data(),  # a null value stays one
            properties,
            message.partition_key() if message.has_partition_key() else None,
            event_timestamp=message.event_timestamp() or None,
            deliver_after=timedelta(milliseconds=delay_ms) if delay_ms > 0 else None,
        )

    async def _retry_producer(self, retry_topic: str) -> LetterProducer:
        if self._closed:
            raise Unsupported("the consumer is closed")
        fut = self._retry
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
            fut = self._retry = asyncio.ensure_future(self._producer_factory(retry_topic))
        return await asyncio.shield(fut)

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Close the letter producers and scanners (after the consumer stopped producing letters)."""
        self._closed = True
        closers = []
        for dlq in self._dlqs.values():
            if dlq.producer is not None:
                closers.append(dlq.producer.close())
            if dlq.scanner is not None:
                closers.append(dlq.scanner.close())
        fut = self._retry
        if fut is not None:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                closers.append(fut.result().close())
            elif not fut.done():
                fut.cancel()
        for result in await asyncio.gather(*closers, return_exceptions=True):
            if isinstance(result, BaseException):
                log.debug("closing a letter producer: %r", result)
