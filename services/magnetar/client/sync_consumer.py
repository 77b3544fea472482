"""The blocking ``Consumer`` (``magnetar.Consumer``), mirroring ``pulsar.Consumer``.

A thin shell over the asyncio consumer, which lives on the client's loop thread
(``blocking.loop_thread``). ``receive`` takes a message already queued without a round trip to the
loop, and waits on the consumer's delivery only when the queue is empty. Acknowledgements and the
consumed-message bookkeeping of ``receive`` are appended to a thread-safe deque and handed to the
loop in bulk (one ``call_soon_threadsafe`` per burst), so ``acknowledge`` returns at once; calls
that must reach the broker after them (``seek``, ``close``...) hand the deque over first.
A ``message_listener`` runs on the client's listener threads (``blocking.listener_pool``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from magnetar.client.blocking.listener_pool import ListenerPool, Pump
from magnetar.client.blocking.loop_thread import LoopThread
from magnetar.client.consumer.consumer import Consumer as AsyncConsumer
from magnetar.client.consumer.consumer import PartitionConsumer
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError
from magnetar.client.message import Message
from magnetar.client.options import ConsumerType
from magnetar.protocol.errors import AlreadyClosed, InvalidConfiguration, MagnetarError, OperationNotSupported
from magnetar.protocol.message_id import MessageId

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

_CONSUMED, _ACK, _ACK_CUMULATIVE, _NACK = range(4)
# A queued operation's target: a message, or a message id already resolved (in the caller's thread,
# so that an id that belongs to no partition raises there) to (partition consumer, position, index).
_Target = Message | tuple[PartitionConsumer, tuple[int, int], int]


class Consumer:
    """Blocking consumer. ``acknowledge`` returns at once; ``close`` waits until acks are durable."""

    def __init__(self, lt: LoopThread, consumer: AsyncConsumer, consumer_type: ConsumerType) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._c = consumer
        self._type = consumer_type
        self._ops: deque[tuple[int, _Target]] = deque()
        self._wakeup_pending = False
        self._listener: Pump | None = None
        self._closed = False
        lt.owned.add(self)

    def _client_closed(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        """Every call on a closed consumer (or one of a closed client) raises ``AlreadyClosed`` at once."""
        if self._closed:
            raise AlreadyClosed("consumer is already closed")

    def topic(self) -> str:
        return self._c.topic()

    def subscription_name(self) -> str:
        return self._c.subscription_name()

    def consumer_name(self) -> str:
        return self._c.consumer_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be called on a consumer with a message_listener")
        return self._receive(timeout_millis)

    def batch_receive(self) -> list[Message]:
        """The next messages, bounded by the ``batch_receive_policy`` (count, bytes, timeout)."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("batch_receive() cannot be called on a consumer with a message_listener")
        return self._lt.run(self._c.batch_receive())

    def _receive(self, timeout_millis: int | None = None) -> Message:
        try:
            # Fast path: take a message already queued without a round trip to the loop; its
            # permit bookkeeping is handed over with the next batch of operations.
            msg = self._c._queue.popleft()
        except IndexError:
            msg = self._lt.take(self._c, timeout_millis)
        self._op(_CONSUMED, msg)
        return msg

    def acknowledge(self, message: Message | MessageId) -> None:
        self._op(_ACK, self._target(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgement is not allowed on a {self._type.value} subscription"
            )
        self._op(_ACK_CUMULATIVE, self._target(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        try:
            target = self._target(message)
        except OperationNotSupported as exc:
            # pulsar-client's multi-topic consumer ignores a negative ack of an id it cannot place.
            log.warning("negative_acknowledge ignored: %s", exc)
            return
        self._op(_NACK, target)

    def redeliver_unacknowledged_messages(self) -> None:
        self._check_open()
        self._loop.call_soon_threadsafe(self._c.redeliver_unacknowledged_messages)

    def _target(self, message: Message | MessageId) -> _Target:
        self._check_open()  # every acknowledgement passes here
        if isinstance(message, Message):
            return message
        return self._c._locate(message)

    def _op(self, kind: int, item: _Target) -> None:
        self._ops.append((kind, item))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._wakeup_pending = False
        ops = self._ops
        c = self._c
        while ops:
            kind, item = ops.popleft()
            if kind == _CONSUMED:
                assert isinstance(item, Message)
                owner = item._info.owner
                if owner is not None:
                    owner.message_consumed(item._info)
                continue
            if kind == _NACK and isinstance(item, Message):
                c._negative_acknowledge(item)  # it knows the redelivery count (for a back-off)
                continue
            try:
                owner, position, index = c._locate(item) if isinstance(item, Message) else item
                if kind == _ACK:
                    owner.acknowledge(position, index)
                elif kind == _ACK_CUMULATIVE:
                    owner.acknowledge_cumulative(position, index)
                else:
                    owner.negative_acknowledge(position)
            except (MagnetarError, ValueError) as exc:  # e.g. a message of a consumer since closed
                log.warning("dropping an acknowledgement on %s: %s", c.topic(), exc)

    def seek(self, messageid: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms since the epoch), as ``pulsar.Consumer.seek``."""
        self._drain_in_loop()
        self._lt.run(self._c.seek(messageid))

    def reconsume_later(
        self, message: Message, delay: timedelta | int, properties: dict[str, str] | None = None
    ) -> None:
        """Deliver ``message`` again after ``delay`` via the retry topic (needs ``retry_enable=True``)."""
        self._drain_in_loop()
        self._lt.run(self._c.reconsume_later(message, delay, properties))

    def get_last_message_id(self) -> MessageId:
        return self._lt.run(self._c.get_last_message_id())

    def is_connected(self) -> bool:
        return self._c.is_connected()

    def pause_message_listener(self) -> None:
        """Stop handing messages to the ``message_listener`` until ``resume_message_listener``."""
        if self._listener is not None:
            self._listener.pause()

    def resume_message_listener(self) -> None:
        if self._listener is not None:
            self._listener.resume()

    def _start_listener(self, pool: ListenerPool, listener: Callable[[Consumer, Message], Any]) -> None:
        self._listener = pool.start(self._c.receive, lambda msg: listener(self, msg), self._c.queued)

    def _drain_in_loop(self) -> None:
        """Hand queued acks to the loop before a blocking call (they must reach the broker first)."""
        if self._ops:
            self._loop.call_soon_threadsafe(self._drain)

    async def _close(self, unsubscribe: bool) -> None:
        self._drain()
        if self._listener is not None:
            self._listener.stop()  # a paused listener's pump is not waiting for a message
        if unsubscribe:
            await self._c.unsubscribe()
        else:
            await self._c.close()

    def unsubscribe(self) -> None:
        self._check_open()
        self._lt.run(self._close(True))
        self._closed = True

    def close(self) -> None:
        """Close; returns once acknowledgements made before it are durable (``AlreadyClosed`` if closed)."""
        self._check_open()
        self._closed = True
        self._lt.run(self._close(False))
