"""The blocking ``Producer`` (``magnetar.Producer``), mirroring ``pulsar.Producer``.

A thin shell over the asyncio producer, which lives on the client's loop thread
(``blocking.loop_thread``). ``send_async`` must not cost a coroutine submission per message
(tens of microseconds, far too much at hundreds of thousands of messages per second): it checks
the message in the caller's thread, appends it to a thread-safe deque and wakes the loop (one
``call_soon_threadsafe``) only when no wake-up is already on its way, so a busy caller hands
messages over in bulk. ``send`` takes the same path and waits, so its order with earlier
``send_async`` calls holds. ``block_if_queue_full`` is applied here, before the loop: the asyncio
producer underneath always has room for what this one lets through.

Callbacks given to ``send_async`` run on the client's loop thread, as Pulsar's run on its
internal threads: keep them short and never call blocking client methods from them.
"""

from __future__ import annotations

import threading
from collections import deque
from datetime import timedelta
from typing import Any

from magnetar import write_batch
from magnetar.client.blocking.loop_thread import LoopThread
from magnetar.client.blocking.waiting import wait_event
from magnetar.client.config.arguments import check_message_arguments
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.options import Result
from magnetar.client.producer.batch_builder import SendCallback
from magnetar.client.producer.producer import MessageOptions, check_content, message_options
from magnetar.client.producer.producer import Producer as AsyncProducer
from magnetar.protocol.errors import AlreadyClosed
from magnetar.protocol.message_id import MessageId

__all__ = ["Producer"]

# A queued message: content, properties, partition key, event time, callback, and the rarely used
# options (``producer.message_options``) or None, so the common message stays a short tuple.
_Pending = tuple[bytes | None, dict[str, str] | None, str | None, int | None, SendCallback, MessageOptions | None]


def _ignore_outcome(result: Any, msg_id: MessageId | None) -> None:
    """The callback of a fire-and-forget ``send_async(content, None)``: the outcome is not wanted."""


class Producer:
    """Blocking producer; ``send_async`` hands messages to the loop in bulk."""

    def __init__(self, lt: LoopThread, producer: AsyncProducer, max_pending: int, block: bool) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._p = producer
        self._max_pending = max_pending
        self._block = block
        self._queue: deque[_Pending] = deque()
        self._wakeup_pending = False
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        for part in producer.partitions:
            part.completion_listener = self._completed
        lt.owned.add(self)

    def _client_closed(self) -> None:
        """The client closed: refuse later sends, and fail those still queued here (each callback once)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        while self._queue:
            try:
                callback = self._queue.popleft()[4]
            except IndexError:  # the loop took the last one meanwhile
                break
            callback(AlreadyClosed("the client was closed before the message was sent"), None)

    def topic(self) -> str:
        return self._p.topic()

    def producer_name(self) -> str:
        return self._p.producer_name()

    def last_sequence_id(self) -> int:
        return self._p.last_sequence_id()

    def is_connected(self) -> bool:
        """Whether the producer is registered on its broker(s) now (the asyncio producer's ``is_connected``)."""
        return self._p.is_connected()

    def send_async(
        self,
        content: Any,
        callback: SendCallback | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> None:
        """Queue a message; ``callback(result, msg_id)`` gets ``Result.Ok`` or the error.

        Arguments as ``pulsar.Producer.send_async``; ``replication_clusters`` and
        ``disable_replication`` are accepted and ignored (Magnetar has no geo-replication).
        ``callback=None`` sends without being told the outcome (fire and forget), as
        pulsar-client allows; anything else that cannot be called is a ``TypeError`` at the call.
        """
        content = self._checked(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
        )
        if callback is None:
            callback = _ignore_outcome
        elif not callable(callback):
            kind = type(callback).__name__
            raise TypeError(f"send_async needs a callable callback(result, msg_id) or None, not {kind}")
        extra = message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        if not self._reserve(self._block):
            callback(ProducerQueueIsFull(f"{self._max_pending} messages pending"), None)
            return
        self._enqueue((content, properties, partition_key, event_timestamp, callback, extra))

    def send(
        self,
        content: Any,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: timedelta | None = None,
    ) -> MessageId:
        """Publish one message and block until it is durable (arguments as ``pulsar.Producer.send``)."""
        if self._lt.in_loop_thread():
            raise RuntimeError("blocking send cannot be called from a client callback; use send_async")
        done = threading.Event()
        outcome: list[Any] = []

        def callback(result: Any, msg_id: MessageId | None) -> None:
            outcome.append((result, msg_id))
            done.set()

        content = self._checked(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            replication_clusters,
            disable_replication,
            event_timestamp,
        )
        extra = message_options(ordering_key, sequence_id, deliver_at, deliver_after)
        # Same path as send_async, so a send after some send_asyncs keeps their order.
        if not self._reserve(self._block):
            raise ProducerQueueIsFull(f"{self._max_pending} messages pending")
        self._enqueue((content, properties, partition_key, event_timestamp, callback, extra))
        wait_event(done, self._lt.alive)
        result, msg_id = outcome[0]
        if result is not Result.Ok:
            raise result
        assert isinstance(msg_id, MessageId)
        return msg_id

    def _checked(
        self,
        content: Any,
        properties: dict[str, str] | None,
        partition_key: str | None,
        ordering_key: str | None,
        sequence_id: int | None,
        replication_clusters: list[str] | None,
        disable_replication: bool,
        event_timestamp: int | None,
    ) -> bytes | None:
        """The payload of ``content`` (encoded by the producer's schema, if it has one), its arguments
        checked: refused at the call, as pulsar-client does, not later on the client's loop thread
        where the queue behind it would stall. Nothing is queued when this raises."""
        encode = self._p._encode
        if encode is None:
            check_content(content)
            payload: bytes | None = content
        else:
            payload = encode(content)  # the schema's TypeError for a wrong type
        check_message_arguments(
            properties=properties,
            partition_key=partition_key,
            ordering_key=ordering_key,
            sequence_id=sequence_id,
            replication_clusters=replication_clusters,
            disable_replication=disable_replication,
            event_timestamp=event_timestamp,
        )
        return payload

    def _enqueue(self, item: _Pending) -> None:
        """Hand one reserved message to the loop thread (``_drain``), waking it once per burst."""
        self._queue.append(item)
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)

    def _reserve(self, block: bool) -> bool:
        with self._cond:
            if self._closed:
                raise AlreadyClosed("producer is closed")
            while self._inflight >= self._max_pending:
                if not block:
                    return False
                self._cond.wait()
                if self._closed:
                    raise AlreadyClosed("producer is closed")
            self._inflight += 1
        return True

    def _completed(self, n: int) -> None:
        with self._cond:
            self._inflight -= n
            self._cond.notify_all()

    def _drain(self) -> None:
        """On the loop: move every queued message into the asyncio producer's batches."""
        self._wakeup_pending = False  # cleared first: anything appended from now on re-arms it
        with write_batch.flushed_at_end():  # the sends go out now, not a turn later (write_batch.py)
            self._drain_queued()

    def _drain_queued(self) -> None:
        queue = self._queue
        send = self._p._enqueue
        while queue:
            content, properties, key, ts, callback, extra = queue.popleft()
            try:
                send(content, properties, key, ts, callback, extra)
            except Exception as exc:  # any error, not only ours: a callback must never be left hanging
                self._completed(1)
                callback(exc, None)

    async def _flush(self) -> None:
        self._drain()
        await self._p.flush()

    async def _close(self) -> None:
        self._drain()
        await self._p.close()

    def flush(self) -> None:
        """Send buffered messages now and block until all pending ones have an outcome."""
        if self._closed:
            raise AlreadyClosed("producer is already closed")
        self._lt.run(self._flush())

    def close(self) -> None:
        """Flush, then close the producer; ``AlreadyClosed`` if it (or its client) already is."""
        if self._closed:
            raise AlreadyClosed("producer is already closed")
        try:
            self._lt.run(self._close())
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
