"""The synchronous client (``magnetar.Client``), mirroring ``pulsar.Client``'s blocking API.

It is a thin shell over the asyncio client: the ``Client`` owns one background thread running one
event loop, and every producer and consumer lives on that loop. Blocking calls submit a coroutine
with ``run_coroutine_threadsafe`` and wait. The per-message calls are the exception, because a
coroutine submission costs tens of microseconds, far too much at hundreds of thousands of messages
per second: ``send_async``, ``acknowledge`` and the consumed-message bookkeeping of ``receive``
append to a thread-safe deque, and the loop is woken (one ``call_soon_threadsafe``) only when no
wake-up is already on its way, so a busy caller hands over messages in bulk.

Callbacks given to ``send_async`` run on the client's loop thread, as Pulsar's run on its
internal threads: keep them short and never call blocking client methods from them.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.client import aio
from magnetar.client.batch_builder import SendCallback
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError, ProducerQueueIsFull
from magnetar.client.message import Message
from magnetar.client.options import CompressionType, ConsumerType, InitialPosition, Result
from magnetar.client.producer import check_content
from magnetar.protocol.errors import AlreadyClosed, MagnetarError
from magnetar.protocol.message_id import MessageId

T = TypeVar("T")
_Pending = tuple[bytes, dict[str, str] | None, str | None, int | None, SendCallback]


class _LoopThread:
    """A daemon thread running the event loop that every object of one ``Client`` lives on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="magnetar-client-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("blocking client calls cannot be made from a client callback")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
            self.loop.close()


class Client:
    """Blocking client; ``close()`` closes every producer and consumer it created."""

    def __init__(
        self,
        service_url: str = aio.DEFAULT_SERVICE_URL,
        operation_timeout_seconds: float = 30,
        connection_timeout_ms: int = 10000,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 30000,
        keep_alive_interval_seconds: float = 30,
    ) -> None:
        self._lt = _LoopThread()
        self._client = aio.Client(
            service_url,
            operation_timeout_seconds=operation_timeout_seconds,
            connection_timeout_ms=connection_timeout_ms,
            initial_backoff_interval_ms=initial_backoff_interval_ms,
            max_backoff_interval_ms=max_backoff_interval_ms,
            keep_alive_interval_seconds=keep_alive_interval_seconds,
        )
        self._closed = False

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10,
    ) -> Producer:
        """Create a producer; options and defaults are those of ``pulsar.Client.create_producer``."""
        producer = self._lt.run(
            self._client.create_producer(
                topic,
                producer_name=producer_name,
                send_timeout_millis=send_timeout_millis,
                compression_type=compression_type,
                max_pending_messages=max_pending_messages,
                block_if_queue_full=True,
                batching_enabled=batching_enabled,
                batching_max_messages=batching_max_messages,
                batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
                batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            )
        )
        return Producer(self._lt, producer, max_pending_messages, block_if_queue_full)

    def subscribe(
        self,
        topic: str,
        subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
        initial_position: InitialPosition = InitialPosition.Latest,
    ) -> Consumer:
        """Subscribe; options and defaults are those of ``pulsar.Client.subscribe``."""
        consumer = self._lt.run(
            self._client.subscribe(
                topic,
                subscription_name,
                consumer_type=consumer_type,
                initial_position=initial_position,
                receiver_queue_size=receiver_queue_size,
                consumer_name=consumer_name,
            )
        )
        return Consumer(self._lt, consumer, ConsumerType(consumer_type))

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._lt.run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._lt.run(self._client.close())
        finally:
            self._lt.stop()

    shutdown = close


class Producer:
    """Blocking producer; ``send_async`` hands messages to the loop in bulk."""

    def __init__(self, lt: _LoopThread, producer: aio.Producer, max_pending: int, block: bool) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._p = producer
        self._max_pending = max_pending
        self._block = block
        self._queue: deque[tuple[bytes, dict[str, str] | None, str | None, int | None, SendCallback]] = deque()
        self._wakeup_pending = False
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        for part in producer.partitions:
            part.completion_listener = self._completed

    def topic(self) -> str:
        return self._p.topic()

    def producer_name(self) -> str:
        return self._p.producer_name()

    def last_sequence_id(self) -> int:
        return self._p.last_sequence_id()

    def send_async(
        self,
        content: bytes,
        callback: SendCallback,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> None:
        """Queue a message; ``callback(result, msg_id)`` gets ``Result.Ok`` or the error."""
        # Refused here, not later on the client's loop thread where the queue behind it would stall.
        check_content(content)
        if not callable(callback):
            raise TypeError(f"send_async needs a callable callback(result, msg_id), not {type(callback).__name__}")
        if not self._reserve(self._block):
            callback(ProducerQueueIsFull(f"{self._max_pending} messages pending"), None)
            return
        self._queue.append((content, properties, partition_key, event_timestamp, callback))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)

    def send(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
    ) -> MessageId:
        """Publish one message and block until it is durable."""
        if self._lt.in_loop_thread():
            raise RuntimeError("blocking send cannot be called from a client callback; use send_async")
        done = threading.Event()
        outcome: list[Any] = []

        def callback(result: Any, msg_id: MessageId | None) -> None:
            outcome.append((result, msg_id))
            done.set()

        check_content(content)
        # Same path as send_async, so a send after some send_asyncs keeps their order.
        if not self._reserve(self._block):
            raise ProducerQueueIsFull(f"{self._max_pending} messages pending")
        self._queue.append((content, properties, partition_key, event_timestamp, callback))
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)
        done.wait()
        result, msg_id = outcome[0]
        if result is not Result.Ok:
            raise result
        assert isinstance(msg_id, MessageId)
        return msg_id

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
        queue = self._queue
        send = self._p.send_nowait
        while queue:
            content, properties, key, ts, callback = queue.popleft()
            try:
                send(content, properties, key, ts, callback)
            except MagnetarError as exc:
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
        self._lt.run(self._flush())

    def close(self) -> None:
        """Flush, then close the producer."""
        if self._closed:
            return
        try:
            self._lt.run(self._close())
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()


_CONSUMED, _ACK, _ACK_CUMULATIVE, _NACK = range(4)


class Consumer:
    """Blocking consumer. ``acknowledge`` returns at once; ``close`` waits until acks are durable."""

    def __init__(self, lt: _LoopThread, consumer: aio.Consumer, consumer_type: ConsumerType) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._c = consumer
        self._type = consumer_type
        self._ops: deque[tuple[int, Message | MessageId]] = deque()
        self._wakeup_pending = False

    def topic(self) -> str:
        return self._c.topic()

    def subscription_name(self) -> str:
        return self._c.subscription_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        try:
            # Fast path: take a message already queued without a round trip to the loop; its
            # permit bookkeeping is handed over with the next batch of operations.
            msg = self._c._queue.popleft()
        except IndexError:
            return self._lt.run(self._c.receive(timeout_millis))
        self._op(_CONSUMED, msg)
        return msg

    def acknowledge(self, message: Message | MessageId) -> None:
        self._op(_ACK, message)

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgement is not allowed on a {self._type.value} subscription"
            )
        self._op(_ACK_CUMULATIVE, message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._op(_NACK, message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._loop.call_soon_threadsafe(self._c.redeliver_unacknowledged_messages)

    def _op(self, kind: int, item: Message | MessageId) -> None:
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
            owner, position, index = c._locate(item)
            if kind == _ACK:
                owner.acknowledge(position, index)
            elif kind == _ACK_CUMULATIVE:
                owner.acknowledge_cumulative(position, index)
            else:
                owner.negative_acknowledge(position)

    async def _close(self, unsubscribe: bool) -> None:
        self._drain()
        if unsubscribe:
            await self._c.unsubscribe()
        else:
            await self._c.close()

    def unsubscribe(self) -> None:
        self._lt.run(self._close(True))

    def close(self) -> None:
        """Close; returns once acknowledgements made before it are durable."""
        self._lt.run(self._close(False))
