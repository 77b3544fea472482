"""The asyncio client's consumers and readers: ``subscribe`` and ``create_reader``.

``ConsumerClient`` is the part of ``aio.Client`` that makes consumers. ``subscribe`` takes a topic,
a list of topics or a compiled pattern (``consumer.multi_topic``), checks the arguments
(``config.consumer.SUBSCRIBE_OPTIONS``) and builds the ``ConsumerConfig`` from them by name; one
``Consumer`` then holds a partition consumer for every partition of every topic, each subscribed
on its topic's owner, all at once. A pattern consumer re-lists its namespace every
``pattern_auto_discovery_period`` seconds and adds or drops topics as they come and go; a
partitioned one subscribes partitions added later from their earliest message. With a dead letter
policy or ``retry_enable`` the consumer gets its letter producers and the dead letter topic's
initial subscription from here (``_letter_producer``, ``_ensure_subscription``).

``create_reader`` makes a ``Reader`` (``readers.reader``): a non-durable Exclusive consumer that
starts at a given message id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from magnetar.client.aio_lookup import is_closing
from magnetar.client.aio_producers import ProducerClient
from magnetar.client.config.consumer import SUBSCRIBE_OPTIONS, ConsumerConfig
from magnetar.client.config.option_list import Flavour
from magnetar.client.consumer.acks import FlowPermits
from magnetar.client.consumer.consumer import Consumer, PartitionConsumer
from magnetar.client.consumer.dead_letter import retry_letter_topic
from magnetar.client.consumer.multi_topic import TOPICS_MODE_OF, PatternWatcher, TopicPattern
from magnetar.client.message import Message
from magnetar.client.options import (
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    RedeliveryBackoff,
    RegexSubscriptionMode,
)
from magnetar.client.producer.producer import Producer
from magnetar.client.readers.reader import Reader, reader_subscription_name, start_for_partition
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import TopicName

__all__ = ["ConsumerClient"]

log = logging.getLogger("magnetar.client.aio")


class ConsumerClient(ProducerClient):
    """``subscribe`` and ``create_reader`` of one asyncio client (see the module docstring)."""

    # Set by ``aio.Client.__init__``; closed by ``aio.Client.close``.
    _consumers: list[Consumer]
    _watchers: list[PatternWatcher]

    # ---------------------------------------------------------------- consumers

    async def subscribe(
        self,
        topic: str | Sequence[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        schema: Any = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        initial_position: InitialPosition = InitialPosition.Latest,
        crypto_key_reader: Any = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: Any = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        is_pattern_topic: bool = False,
        *,
        pattern_auto_discovery_period: int = 60,
        retry_enable: bool = False,
        negative_ack_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None,
        ack_timeout_tick_time_ms: int = 1000,
        priority_level: int = 0,
        expire_time_of_incomplete_chunked_message_ms: int = 60000,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a topic pattern as ``subscription_name``.

        The positional arguments are ``pulsar.asyncio.Client.subscribe``'s, in its order (``topic``
        may also be a compiled ``re.Pattern``, as for the blocking ``pulsar.Client``); the
        keyword-only ones are ``pulsar.Client``'s ``pattern_auto_discovery_period`` and Magnetar's
        extensions (``config.consumer.SUBSCRIBE_OPTIONS``). One ``Consumer`` serves every partition of
        every topic. A pattern lists its namespace now and every ``pattern_auto_discovery_period``
        seconds, adding the topics that appear and dropping those that go (``consumer.multi_topic``).
        With ``retry_enable`` the consumer also reads its retry topic,
        ``{first topic}-{subscription}-RETRY`` (not for a pattern, as in Pulsar's Java client).
        """
        arguments = locals()
        SUBSCRIBE_OPTIONS.check(arguments)  # pulsar-client's ValueErrors (config.consumer)
        pattern = _topic_pattern(topic, is_pattern_topic)
        config = ConsumerConfig(**SUBSCRIBE_OPTIONS.forward(arguments, to=Flavour.CONFIG))
        if dead_letter_policy is not None or retry_enable:
            config.producer_factory = self._letter_producer
            config.subscriber_factory = self._ensure_subscription
        if pattern is None:
            assert not isinstance(topic, re.Pattern)
            topics = _topic_list(topic)
            if retry_enable:
                retry = retry_letter_topic(topics[0], subscription_name)
                if retry not in topics:
                    topics.append(retry)
            # A list names its consumer as pulsar-client's multi-topic consumer does: made up.
            display = topic if isinstance(topic, str) else f"{topics[-1]}-TopicsConsumerFakeName-{secrets.token_hex(5)}"
            return await self._subscribe(
                str(TopicName.parse(display)) if isinstance(topic, str) else display, topics, config
            )
        return await self._subscribe_pattern(pattern, config)

    async def _subscribe(
        self,
        display_topic: str,
        topics: list[str],
        config: ConsumerConfig,
        *,
        register: bool = True,
    ) -> Consumer:
        """One ``Consumer`` over every partition of ``topics`` (full names), registered for ``close()``."""
        consumer = Consumer(display_topic, config)
        parts = await self._partition_consumers(consumer, topics, config)
        consumer._add_parts(parts)
        if register:
            self._consumers.append(consumer)
            self._start_partition_updates(display_topic, lambda: self._grow_consumer(consumer, config), consumer)
        return consumer

    async def _partition_consumers(
        self,
        consumer: Consumer,
        topics: Sequence[str],
        config: ConsumerConfig,
        *,
        durable: bool = True,
        start: Callable[[int], MessageId] | None = None,
    ) -> list[PartitionConsumer]:
        """Subscribe (and attach) a ``PartitionConsumer`` for each partition of each topic, all at once.

        ``durable=False`` and ``start`` make a reader's: ``start(i)`` is the start id of partition
        ``i``, ``start(-1)`` that of a topic that is not partitioned. If any of them fails, those
        that succeeded are closed and the first error is raised.
        """
        names = [TopicName.parse(t) for t in topics]
        counts = await asyncio.gather(*(self._partitions(n) for n in names))
        consumer._partitioned.update((str(name), n) for name, n in zip(names, counts, strict=True) if n > 0)
        inclusive = config.start_message_id_inclusive

        async def one(target: str, index: int, partitioned: bool) -> PartitionConsumer:
            part = PartitionConsumer(
                self,
                target,
                index,
                config,
                deliver=consumer._deliver,
                on_closed=consumer._on_partition_closed,
                discard_queued=consumer._discard_queued,
                durable=durable,
                start_message_id=None if start is None else start(index if partitioned else -1),
                start_inclusive=inclusive if start is not None else False,
                writer_schemas=self._writer_schemas,
            )
            part.permits = FlowPermits(config.queue_size_per_partition(len(consumer._parts) + len(targets)))
            await part.attach_first()
            return part

        targets = [(t, i, n > 0) for name, n in zip(names, counts, strict=True) for t, i in self._targets(name, n)]
        return await self._create_all([one(t, i, partitioned) for t, i, partitioned in targets])

    async def _subscribe_pattern(self, pattern: re.Pattern[str], config: ConsumerConfig) -> Consumer:
        mode = TOPICS_MODE_OF[config.regex_subscription_mode]
        topic_pattern = TopicPattern.parse(pattern, mode)
        topics = sorted(topic_pattern.filter(await self._topics_of_namespace(topic_pattern.namespace, mode)))
        consumer = await self._subscribe(pattern.pattern, topics, config)

        async def add(new: list[str]) -> list[str]:
            added: list[str] = []
            for t in new:
                if is_closing(consumer):
                    break
                try:
                    parts = await self._partition_consumers(consumer, [t], config)
                except MagnetarError as exc:
                    log.warning("pattern %s: cannot subscribe to %s yet: %s", pattern.pattern, t, exc)
                    continue
                if is_closing(consumer):
                    await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
                    break
                consumer._add_parts(parts)
                added.append(t)
            return added

        async def remove(gone: list[str]) -> None:
            gone_names = set(gone)
            parts = [p for p in consumer.partitions if str(TopicName.parse(p.topic).partitioned_base) in gone_names]
            if parts:
                await consumer._remove_parts(parts)  # closes them too

        watcher = PatternWatcher(
            topic_pattern,
            config.pattern_auto_discovery_period,
            topics,
            list_topics=lambda namespace: self._topics_of_namespace(namespace, mode),
            add_topics=add,
            remove_topics=remove,
            is_closed=lambda: is_closing(consumer),
        )
        watcher.start()
        self._watchers.append(watcher)
        return consumer

    async def _letter_producer(self, topic: str) -> Producer:
        """A dead letter / retry letter producer: unbatched, so each letter is alone in its entry."""
        return await self.create_producer(topic, batching_enabled=False)

    async def _ensure_subscription(self, topic: str, subscription: str) -> None:
        """Create ``subscription`` on ``topic`` (from its earliest message) if it does not exist yet."""
        config = ConsumerConfig(subscription, ConsumerType.Shared, initial_position=InitialPosition.Earliest)
        consumer = await self._subscribe(str(TopicName.parse(topic)), [topic], config, register=False)
        await consumer.close()

    async def _grow_consumer(self, consumer: Consumer, config: ConsumerConfig) -> None:
        """Subscribe the partitions added to the consumer's partitioned topics since it last looked.

        A new partition is subscribed from its earliest message whatever ``initial_position`` says:
        it was created empty after the consumer subscribed, so everything on it is new to this
        subscription (Pulsar gets the same by creating the subscription on added partitions when
        they are added).
        """
        earliest = dataclasses.replace(config, initial_position=InitialPosition.Earliest)
        for topic, known in list(consumer._partitioned.items()):
            name = TopicName.parse(topic)
            try:
                n = await self._partitions(name)
                if n <= known or is_closing(consumer):
                    continue
                log.info("%s: %d partitions (was %d); subscribing the new ones", topic, n, known)
                new = [str(name.partition(i)) for i in range(known, n)]
                parts = await self._partition_consumers(consumer, new, earliest)
            except MagnetarError as exc:  # one topic's trouble must not hold up the others
                log.warning("%s: cannot subscribe its added partitions yet: %s", topic, exc)
                continue
            if is_closing(consumer) or consumer._partitioned.get(topic) != known:
                await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
                continue
            consumer._add_parts(parts)
            consumer._partitioned[topic] = n

    # ---------------------------------------------------------------- readers

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        reader_listener: Callable[[Reader, Message], Any] | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: Any = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """A reader on ``topic`` from ``start_message_id``; arguments as ``pulsar.Client.create_reader``.

        ``reader_listener(reader, message)``, if given, is called on the client's loop for every
        message (``read_next`` is then not to be called), as Pulsar calls it on its listener thread.
        """
        if not isinstance(topic, str):
            raise ValueError(f"Argument topic is expected to be of type 'str' and not '{type(topic).__name__}'")
        if not isinstance(start_message_id, MessageId):
            raise ValueError(
                "Argument start_message_id is expected to be of type 'MessageId' and not "
                f"'{type(start_message_id).__name__}'"
            )
        name = TopicName.parse(topic)
        config = ConsumerConfig(
            reader_subscription_name(subscription_role_prefix),
            ConsumerType.Exclusive,
            schema=schema,
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            is_read_compacted=is_read_compacted,
            crypto_key_reader=crypto_key_reader,
            start_message_id_inclusive=start_message_id_inclusive,
            crypto_failure_action=crypto_failure_action,
        )
        consumer = Consumer(str(name), config)
        parts = await self._partition_consumers(
            consumer,
            [str(name)],
            config,
            durable=False,
            start=lambda index: start_for_partition(start_message_id, index),
        )
        consumer._add_parts(parts)
        self._consumers.append(consumer)
        partitioned = any(p.partition >= 0 for p in parts) and name.partition_index < 0
        reader = Reader(
            str(name),
            consumer,
            start_message_id,
            start_message_id_inclusive,
            partitioned=partitioned,
            on_close=self._forget_consumer,
        )
        if reader_listener is not None:
            reader.start_listener(reader_listener)
        return reader

    def _forget_consumer(self, consumer: Consumer) -> None:
        """A closed reader's consumer: ``close()`` has nothing left to do for it."""
        if consumer in self._consumers:
            self._consumers.remove(consumer)


def _topic_pattern(topic: object, is_pattern_topic: bool) -> re.Pattern[str] | None:
    """The pattern of a pattern subscription (None for a topic or a list of topics).

    A compiled pattern is one (``pulsar.Client.subscribe``); so is a string with
    ``is_pattern_topic=True`` (``pulsar.asyncio.Client.subscribe``). Anything else that is not a
    string or a list of strings is refused with pulsar-client's ``ValueError``.
    """
    if isinstance(topic, re.Pattern):
        if not isinstance(topic.pattern, str):
            raise ValueError("a topic pattern must be a str pattern, not bytes")
        return topic
    if isinstance(topic, str):
        return re.compile(topic) if is_pattern_topic else None
    if isinstance(topic, list | tuple):
        if is_pattern_topic:
            raise ValueError(
                "Argument 'topic' must be a string when 'is_pattern_topic' is True; "
                "lists of topics do not support pattern subscriptions"
            )
        return None
    raise ValueError("Argument 'topic' is expected to be of a type between (str, list, re.pattern)")


def _topic_list(topic: str | Sequence[str]) -> list[str]:
    """Full names of the topics to subscribe to, each once, in the order given."""
    names = [topic] if isinstance(topic, str) else list(topic)
    if not names:
        raise ValueError("subscribe needs at least one topic")
    for t in names:
        if not isinstance(t, str):
            raise ValueError(f"Argument 'topic' must list topic names (str), not {type(t).__name__}")
    return list(dict.fromkeys(str(TopicName.parse(t)) for t in names))
