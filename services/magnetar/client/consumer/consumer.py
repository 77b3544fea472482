"""Asyncio consumers: ``Consumer``, what users hold, over one ``PartitionConsumer`` per (partition) topic.

``Consumer`` has one receive queue fed by every partition (of one topic, or of several for
multi-topic and pattern subscriptions: ``_add_parts``), ``receive``/``async for``/``batch_receive``,
and routes acks, negative acks, seeks and redeliveries back to the partition a message came from.
The partition consumer (``partition.py``) is split by concern: its state (``partition_state.py``),
flow permits (``permits.py``), acknowledgements (``ack_sender.py``), redelivery and dead letters
(``redelivery_requests.py``), chunked messages (``chunk_receipt.py``) and seek (``seek.py``); the
pure bookkeeping those drive is in ``acks.py``, ``redelivery.py`` and ``chunks.py``.

A message knows its partition consumer as a ``message.MessageOwner`` (the message module does not
import the consumer); every owner is a ``PartitionConsumer``, and the per-message paths here read
its internals through a local annotated as one (``# type: ignore[assignment]``): no cast call,
nothing at run time.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from datetime import timedelta

from magnetar.client.config.consumer import ConsumerConfig
from magnetar.client.consumer.acks import Position
from magnetar.client.consumer.batch_receive import collect
from magnetar.client.consumer.blocked_receivers import BlockedReceivers
from magnetar.client.consumer.dead_letter import (
    DELAY_TIME,
    RECONSUMETIMES,
    RETRY_GROUP_TOPIC_SUFFIX,
    DeadLetters,
    delay_millis,
    letter_properties,
    retry_letter_topic,
)
from magnetar.client.consumer.partition import PartitionConsumer
from magnetar.client.consumer.partition_state import PartitionConsumerState, is_sentinel
from magnetar.client.consumer.topic_tail import TopicTail
from magnetar.client.message import Message
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, OperationNotSupported, Timeout, Unsupported
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import TopicName

__all__ = ["Consumer", "PartitionConsumer"]

log = logging.getLogger(__name__)


class Consumer:
    """A subscription's consumer over one topic, every partition of a partitioned topic, or several topics.

    ``receive()`` and ``async for msg in consumer`` return messages in arrival order; across
    partitions the order is the interleaving in which they arrived. ``topic()`` returns the
    ``topic`` it was created with: the topic name for one topic; pulsar-client's multi-topic
    consumer reports a made-up name (``{last topic}-TopicsConsumerFakeName-{random}``) and a pattern
    consumer its pattern, which is for the client to pass.
    """

    def __init__(self, topic: str, config: ConsumerConfig) -> None:
        self._topic = topic
        self._config = config
        self._subscription = config.subscription_name
        self._type = config.consumer_type
        self._parts: list[PartitionConsumer] = []
        self._by_partition: dict[int, list[PartitionConsumer]] = {}
        # Partitioned topics subscribed as such (full name -> partitions subscribed): what the
        # client's partition updater re-reads, to subscribe partitions added later.
        self._partitioned: dict[str, int] = {}
        self._queue: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Threads of the blocking client in receive(), woken from here directly (blocked_receivers.py).
        self._blocked = BlockedReceivers()
        self._error: MagnetarError | None = None
        self._closing = False
        self._letters: DeadLetters | None = None
        if config.max_redeliver_count is not None:
            self._letters = DeadLetters(config, self._open_scanner)

    def _add_parts(self, parts: Sequence[PartitionConsumer]) -> None:
        """Take in partition consumers (of any topic; a multi-topic or pattern consumer adds more later)."""
        for part in parts:
            self._parts.append(part)
            self._by_partition.setdefault(part.partition, []).append(part)
            if self._letters is not None:
                part._use_dead_letters(self._letters, self._first_topic)

    async def _remove_parts(self, parts: Sequence[PartitionConsumer]) -> None:
        """Let go of partition consumers (their topic is gone): drop their queued messages, close them.

        Closing is bounded by the operation timeout and its errors are only logged: the topic may be
        gone with its broker state.
        """
        gone = set(map(id, parts))
        self._parts = [p for p in self._parts if id(p) not in gone]
        self._by_partition = {}
        for p in self._parts:
            self._by_partition.setdefault(p.partition, []).append(p)
        still = {str(TopicName.parse(p.topic).partitioned_base) for p in self._parts}
        self._partitioned = {t: n for t, n in self._partitioned.items() if t in still}
        for part in parts:
            self._discard_queued(part)
        for result in await asyncio.gather(*(p.close() for p in parts), return_exceptions=True):
            if isinstance(result, BaseException):
                log.debug("closing a removed partition consumer: %r", result)

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    def consumer_name(self) -> str:
        return self._config.consumer_name or ""

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    @property
    def partitions(self) -> list[PartitionConsumer]:
        return self._parts

    def is_connected(self) -> bool:
        return not self._closing and bool(self._parts) and all(p.connected for p in self._parts)

    def _first_topic(self) -> str | None:
        """The consumer's first topic (partitioned base name), not counting its retry topic: what the
        retry topic and, with retry, the dead letter topic are named after."""
        retry_suffix = f"-{self._subscription}{RETRY_GROUP_TOPIC_SUFFIX}"
        for part in self._parts:
            base = str(TopicName.parse(part.topic).partitioned_base)
            if not base.endswith(retry_suffix):
                return base
        try:
            return str(TopicName.parse(self._topic))
        except MagnetarError:
            return None

    def _open_scanner(self, topics: Sequence[str]) -> TopicTail:
        if not self._parts:
            raise AlreadyClosed("the consumer has no partition consumer to read with")
        return TopicTail(self._parts[0]._resolver, topics)

    # ---------------------------------------------------------------- delivery

    def _deliver(self, messages: list[Message]) -> None:
        self._queue.extend(messages)
        if self._waiters:
            self._wake_one()
        if self._blocked:
            self._blocked.wake(len(messages))

    def _discard_queued(self, part: PartitionConsumerState) -> list[Message]:
        """Drop the queued, not yet received messages of ``part`` and return them, oldest first.

        Removes in place rather than rebuilding the deque: the blocking consumer pops from it on
        another thread, and a message it already took is the application's and must stay taken.
        """
        queue = self._queue
        drop = [m for m in queue if m._info.owner is part]
        if len(drop) == len(queue):
            queue.clear()
            return drop
        for m in drop:
            try:
                queue.remove(m)
            except ValueError:
                pass
        return drop

    def _on_partition_closed(self, exc: MagnetarError) -> None:
        if self._error is None:
            self._error = exc
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
        self._blocked.wake_all()

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    async def _wait(self, limit_seconds: float | None) -> None:
        loop = asyncio.get_running_loop()
        while not self._queue:
            if self._error is not None:
                raise self._error
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                if limit_seconds is None:
                    await fut
                else:
                    await asyncio.wait_for(fut, limit_seconds)
            except TimeoutError as exc:
                self._pass_on_wakeup(fut)
                raise Timeout(f"no message received within {limit_seconds}s") from exc
            except BaseException:
                self._pass_on_wakeup(fut)
                raise

    def _pass_on_wakeup(self, fut: asyncio.Future[None]) -> None:
        """A receiver that leaves after being woken hands its wake-up to the next one."""
        if not fut.done():
            fut.cancel()
        if self._queue:
            self._wake_one()

    @staticmethod
    def _handed_out(msg: Message) -> Message:
        """Bookkeeping for a message leaving the queue: its permit, and its ack timeout clock
        (``receive`` inlines the same, once per message; the reader's queue calls this)."""
        info = msg._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # every MessageOwner is one
        if owner is not None and info.epoch == owner.epoch:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
            if owner.ack_timeouts is not None:
                owner.ack_timeouts.add(info.position, info.redelivery_count, owner._loop.time())
        return msg

    def queued(self) -> int:
        """How many messages ``receive`` would hand out without waiting (the listener pool's runs)."""
        return len(self._queue)

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        queue = self._queue
        if not queue:
            await self._wait(None if timeout_millis is None else timeout_millis / 1000.0)
        msg = queue.popleft()
        # Handed out: count its permit, start its ack timeout clock (inlined: once per message).
        info = msg._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # every MessageOwner is one
        if owner is not None and info.epoch == owner.epoch:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
            if owner.ack_timeouts is not None:
                owner.ack_timeouts.add(info.position, info.redelivery_count, owner._loop.time())
        return msg

    async def batch_receive(self) -> list[Message]:
        """The next messages, as many as the ``batch_receive_policy`` allows (``batch_receive``)."""
        return await collect(self, self._config.batch_receive_policy)

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Message:
        queue = self._queue
        if not queue:
            if self._closing:
                raise StopAsyncIteration
            try:
                await self._wait(None)
            except AlreadyClosed:
                raise StopAsyncIteration from None
        msg = queue.popleft()
        # Handed out: count its permit, start its ack timeout clock (inlined: once per message).
        info = msg._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # every MessageOwner is one
        if owner is not None and info.epoch == owner.epoch:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
            if owner.ack_timeouts is not None:
                owner.ack_timeouts.add(info.position, info.redelivery_count, owner._loop.time())
        return msg

    # ---------------------------------------------------------------- acks

    def _locate(self, message: Message | MessageId) -> tuple[PartitionConsumer, Position, int]:
        """The partition consumer, entry position and batch index a message (id) belongs to.

        A ``Message`` knows its partition consumer, and a received message's id its topic (as in
        pulsar-client), which picks the partition consumer. An id without a topic (built by hand, or
        deserialized without ``topic=``) is located by its partition index when that is unambiguous
        (one topic); on a consumer of several topics it raises ``OperationNotSupported``, as
        pulsar-client's multi-topic consumer does, and so does an id of a topic not subscribed here.
        """
        if isinstance(message, Message):
            info = message._info
            owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # every MessageOwner is one
            if owner is None:
                raise ValueError("message does not belong to a consumer")
            return owner, info.position, message._index
        return self._part_of(message), message.position, message.batch_index()

    def _part_of(self, message: MessageId) -> PartitionConsumer:
        """The partition consumer a message id names (see ``_locate``)."""
        parts = self._parts
        topic = message.topic
        if topic is not None:
            found = [p for p in parts if p.topic == topic]
            if not found:
                found = [p for p in parts if p.topic == _full_topic_name(topic, message.partition())]
            if len(found) == 1:
                return found[0]
            raise OperationNotSupported(f"message id {message} is of topic {topic}, which {self._topic} does not read")
        if len(parts) == 1:
            return parts[0]
        candidates = self._by_partition.get(message.partition(), [])
        if len(candidates) == 1 and len({str(TopicName.parse(p.topic).partitioned_base) for p in parts}) == 1:
            return candidates[0]  # one partitioned topic: the partition index says which
        raise OperationNotSupported(
            f"message id {message} has no topic, and {self._topic} reads several: use the received message's "
            "own id, or MessageId.deserialize(data, topic=...)"
        )

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message; the entry is acked on the broker once all its messages are
        (with ``batch_index_ack_enabled``, each message's index is acked at once too)."""
        if type(message) is Message:
            # Hot path: discard from the entry's live set; no lookup until the entry completes.
            info = message._info
            owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # every MessageOwner is one
            if owner is not None and not owner._batch_index_ack:
                owner._acked_msgs += 1
                unacked = info.unacked
                if unacked is not None:
                    unacked.discard(message._index)
                    if unacked:
                        return
                    owner.tracker.forget(info.position)
                owner.ack_entry(info.position)
                return
        owner, position, index = self._locate(message)
        owner.acknowledge(position, index)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge every message up to and including this one (not on Shared subscriptions)."""
        owner, position, index = self._locate(message)
        owner.acknowledge_cumulative(position, index)

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Redeliver this message's entry (with its whole batch) after ``negative_ack_redelivery_delay_ms``
        (a coroutine, as ``pulsar.asyncio.Consumer.negative_acknowledge``; it completes at once)."""
        self._negative_acknowledge(message)

    def _negative_acknowledge(self, message: Message | MessageId) -> None:
        try:
            owner, position, _ = self._locate(message)
        except OperationNotSupported as exc:
            # pulsar-client's multi-topic consumer ignores a negative ack of an id it cannot place.
            log.warning("negative_acknowledge ignored: %s", exc)
            return
        count = message.redelivery_count() if isinstance(message, Message) else 0
        owner.negative_acknowledge(position, count)

    def redeliver_unacknowledged_messages(self) -> None:
        """Redeliver every message received and not acknowledged (queued ones included)."""
        for part in self._parts:
            part.redeliver_unacknowledged()

    # ---------------------------------------------------------------- seek, retry

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or to a publish time (an ``int``, ms since the epoch).

        As pulsar-client 3.x: a consumer over several partitions or topics seeks every partition to
        a publish time, ``MessageId.earliest`` or ``latest``; a message id moves the one partition
        its topic names (a received message's id carries it), and an id without a topic there
        raises ``OperationNotSupported``.
        """
        if isinstance(messageid, bool) or not isinstance(messageid, MessageId | int):
            raise ValueError(f"invalid seek_arg type {type(messageid)}")
        if self._closing:
            raise AlreadyClosed(f"consumer on {self._topic} is closed")
        parts = list(self._parts)
        if isinstance(messageid, MessageId) and not is_sentinel(messageid) and len(parts) != 1:
            if messageid.topic is None:
                raise OperationNotSupported(
                    f"seek by a message id without a topic is not supported on {self._topic}, a consumer of "
                    "several partitions or topics: seek by a received message's id, or by publish time"
                )
            parts = [self._part_of(messageid)]
        await asyncio.gather(*(p.seek(messageid) for p in parts))

    async def get_last_message_id(self) -> MessageId:
        """The topic's last message id (a consumer of one, non-partitioned topic only, as pulsar-client 3.x)."""
        if len(self._parts) != 1:
            raise Unsupported("get_last_message_id is not supported on a partitioned or multi-topic consumer")
        last, _ = await self._parts[0].get_last_message_id()
        return last

    async def reconsume_later(
        self, message: Message, delay: timedelta | int, properties: dict[str, str] | None = None
    ) -> None:
        """Have ``message`` delivered again after ``delay`` (a ``timedelta``, or ms), via the retry topic.

        Needs ``retry_enable=True``. Java's ``reconsumeLater``: the message is published to
        ``{topic}-{subscription}-RETRY`` with ``RECONSUMETIMES`` one higher (``properties`` added),
        then acknowledged; past ``max_redeliver_count`` it goes to the dead letter topic instead.
        The broker holds the delay on Shared and Key_Shared subscriptions only (WIRE.md R20e): on
        Exclusive and Failover the retried message comes back at once, as in Pulsar.
        """
        letters = self._letters
        if not self._config.retry_enable or letters is None:
            raise Unsupported("reconsume_later needs retry_enable=True")
        if not isinstance(message, Message):
            raise ValueError("reconsume_later takes a received Message")
        delay_ms = delay_millis(delay)
        props = letter_properties(message)
        if properties:
            props.update(properties)
        times = int(props.get(RECONSUMETIMES, "0")) + 1
        props[RECONSUMETIMES] = str(times)
        props[DELAY_TIME] = str(delay_ms)
        first = self._first_topic()
        if first is None:
            raise ValueError(f"cannot name the retry topic of {self._topic}")
        if times > letters.max_redeliver_count:
            await letters.publish_dead_letter(letters.dead_letter_topic(message.topic_name(), first), message, props)
        else:
            await letters.publish_retry_letter(retry_letter_topic(first, self._subscription), message, props, delay_ms)
        await self.acknowledge(message)

    # ---------------------------------------------------------------- closing

    def _closed_now(self) -> None:
        self._closing = True
        self._queue.clear()
        self._on_partition_closed(AlreadyClosed(f"consumer on {self._topic} is closed"))

    async def _close_letters(self) -> None:
        if self._letters is not None:
            await self._letters.close()

    async def unsubscribe(self) -> None:
        """Delete the subscription (and its cursor) on the broker, then close."""
        try:
            await asyncio.gather(*(p.close(unsubscribe=True) for p in self._parts))
        finally:
            self._closed_now()
            await self._close_letters()

    async def close(self) -> None:
        """Close; returns once acknowledgements made before it are durable on the broker."""
        if self._closing:
            return
        self._closing = True
        try:
            await asyncio.gather(*(p.close() for p in self._parts))
        finally:
            self._closed_now()
            await self._close_letters()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _full_topic_name(topic: str, partition: int) -> str | None:
    """``topic`` in full form (the partition's name when it names a partitioned topic and the id a
    partition), or None when it is no topic name at all."""
    try:
        name = TopicName.parse(topic)
    except MagnetarError:
        return None
    if partition >= 0 and name.partition_index < 0:
        name = name.partition(partition)
    return str(name)
