"""The asyncio client (``magnetar.asyncio``): ``Client``, producers, consumers.

    async with Client("magnetar://127.0.0.1:6650") as client:
        producer = await client.create_producer("my-topic")
        receipt = await producer.send_async(b"hello")     # pipelined: queued, not yet durable
        msg_id = await receipt                              # durable
        consumer = await client.subscribe("my-topic", "my-sub")
        async for msg in consumer:
            await consumer.acknowledge(msg)

The client keeps one connection per broker URL (the service URL's brokers and every broker a
lookup points to), shared by all its producers and consumers. Before a producer or consumer is
created the topic is looked up (following ``redirect`` answers for a bounded number of hops) and,
for a partitioned topic, one partition producer/consumer is created per partition on the broker
that owns it. Each of them stays attached to its topic's owner on its own (``reconnect``): when
a connection drops or the broker hands the topic over, it looks the topic up again and re-creates
itself there, with backoff, while the application keeps sending and receiving.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.client.connection import Connection, normalize_url, service_urls
from magnetar.client.consumer import Consumer, PartitionConsumer
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.message import Message
from magnetar.client.options import CompressionType, ConsumerType, InitialPosition, Result
from magnetar.client.producer import PartitionProducer, Producer, ProducerConfig
from magnetar.client.reconnect import Backoff
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import (
    AlreadyClosed,
    MagnetarError,
    NotConnected,
    RetryableError,
    ServiceNotReady,
    Timeout,
)
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.topic_name import TopicName

__all__ = [
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerType",
    "InitialPosition",
    "MagnetarError",
    "Message",
    "MessageId",
    "Producer",
    "ProducerQueueIsFull",
    "Result",
]

log = logging.getLogger(__name__)

DEFAULT_SERVICE_URL = "magnetar://127.0.0.1:6650"
MAX_LOOKUP_REDIRECTS = 8


class Client:
    """Entry point: creates producers and consumers, owns the connections to brokers.

    ``service_url`` may list several brokers (``magnetar://h1:6650,h2:6650``); lookups go to the
    first that answers, starting from the last one that did. Backoff between reconnection
    attempts starts at ``initial_backoff_interval_ms`` and doubles up to ``max_backoff_interval_ms``
    (Pulsar's C++ client options). ``keep_alive_interval_seconds`` (0 disables) is how long a
    silent connection is trusted before a ``ping``; one more interval without an answer and it is
    closed as dead.
    """

    def __init__(
        self,
        service_url: str = DEFAULT_SERVICE_URL,
        *,
        operation_timeout_seconds: float = 30,
        connection_timeout_ms: int = 10000,
        max_lookup_redirects: int = MAX_LOOKUP_REDIRECTS,
        initial_backoff_interval_ms: int = 100,
        max_backoff_interval_ms: int = 30000,
        keep_alive_interval_seconds: float = 30,
    ) -> None:
        self._service_urls = service_urls(service_url)
        self._service_index = 0
        self._op_timeout = float(operation_timeout_seconds)
        self._connect_timeout = connection_timeout_ms / 1000.0
        self._max_redirects = max_lookup_redirects
        self._backoff = (initial_backoff_interval_ms / 1000.0, max_backoff_interval_ms / 1000.0)
        Backoff(*self._backoff)  # validate now, not at the first reconnection
        self._keep_alive = float(keep_alive_interval_seconds)
        self._conns: dict[str, asyncio.Future[Connection]] = {}
        self._ids = itertools.count(1)
        self._producers: list[Producer] = []
        self._consumers: list[Consumer] = []
        self._closed = False
        # The wait between attempts; tests swap in a recorder instead of sleeping for real.
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- what producers and consumers use

    @property
    def operation_timeout(self) -> float:
        return self._op_timeout

    def next_id(self) -> int:
        """A producer/consumer id, unique on every connection of this client (one per registration)."""
        return next(self._ids)

    def new_backoff(self) -> Backoff:
        return Backoff(*self._backoff)

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    # ---------------------------------------------------------------- connections and lookup

    async def _connection(self, url: str) -> Connection:
        """The pooled connection to ``url``, opened (once, even if many ask at once) when needed."""
        if self._closed:
            raise AlreadyClosed("client is closed")
        key = normalize_url(url)
        fut = self._conns.get(key)
        if fut is not None:
            if not fut.done():
                return await asyncio.shield(fut)
            if not fut.cancelled() and fut.exception() is None and not fut.result().closed:
                return fut.result()
        fut = asyncio.get_running_loop().create_future()
        self._conns[key] = fut
        try:
            conn = await Connection.open(
                key,
                operation_timeout=self._op_timeout,
                connect_timeout=self._connect_timeout,
                keep_alive_interval=self._keep_alive,
            )
        except asyncio.CancelledError:
            fut.cancel()
            self._conns.pop(key, None)
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: the caller gets it raised below
            self._conns.pop(key, None)
            raise
        fut.set_result(conn)
        return conn

    async def _service_connection(self) -> Connection:
        """A connection to any broker of the service URL: the last one that worked first, then the others."""
        urls = self._service_urls
        last: MagnetarError | None = None
        for i in range(len(urls)):
            index = (self._service_index + i) % len(urls)
            try:
                conn = await self._connection(urls[index])
            except (NotConnected, Timeout) as exc:
                last = exc
                continue
            self._service_index = index
            return conn
        assert last is not None
        raise last

    async def lookup(self, topic: str) -> Connection:
        """Find the broker serving ``topic``: ask, follow redirects (a bounded number), return its connection.

        ``redirect: true`` names a broker to ask again; ``redirect: false`` names the owner. A
        redirect loop longer than ``max_lookup_redirects`` raises ``ServiceNotReady``, which is
        retryable: ownership may be moving, and the caller's backoff loop asks again later.
        """
        conn = await self._service_connection()
        for _ in range(self._max_redirects + 1):
            answer: cmds.LookupResponse = await conn.request(cmds.lookup(topic))
            target = await self._connection(str(answer.get("broker_url") or conn.url))
            if not answer.get("redirect"):
                return target
            conn = target
        raise ServiceNotReady(f"lookup of {topic} was redirected more than {self._max_redirects} times")

    async def _partitions(self, topic: TopicName) -> int:
        """How many partitions ``topic`` has, retrying retryable errors until the operation timeout."""
        if topic.partition_index >= 0:
            return 0  # a single partition named directly
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._op_timeout
        backoff = self.new_backoff()
        while True:
            try:
                conn = await self._service_connection()
                answer: cmds.PartitionedMetadataResponse = await conn.request(cmds.partitioned_metadata(str(topic)))
                return int(answer.get("partitions") or 0)
            except RetryableError as exc:
                delay = backoff.next()
                if loop.time() + delay >= deadline:
                    raise
                log.info("partition metadata of %s: %s; retrying in %.3fs", topic, exc, delay)
                await self.sleep(delay)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition topic names of ``topic`` (itself when it is not partitioned)."""
        name = TopicName.parse(topic)
        n = await self._partitions(name)
        return [str(name.partition(i)) for i in range(n)] if n else [str(name)]

    def _targets(self, name: TopicName, partitions: int) -> list[tuple[str, int]]:
        if partitions == 0:
            return [(str(name), name.partition_index)]
        return [(str(name.partition(i)), i) for i in range(partitions)]

    # ---------------------------------------------------------------- producers

    async def create_producer(
        self,
        topic: str,
        *,
        producer_name: str | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000,
        block_if_queue_full: bool = True,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10,
    ) -> Producer:
        """Create a producer on ``topic`` (short names expand to ``persistent://public/default/…``).

        Unlike Pulsar's callback API, the asyncio producer waits for room when
        ``max_pending_messages`` are pending (``block_if_queue_full=True``), which is the natural
        back-pressure for ``await send_async(...)``.
        """
        config = ProducerConfig(
            producer_name=producer_name,
            send_timeout_millis=send_timeout_millis,
            compression_type=compression_type,
            max_pending_messages=max_pending_messages,
            block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled,
            batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
        )
        name = TopicName.parse(topic)
        partitions = await self._partitions(name)

        async def one(target: str, index: int) -> PartitionProducer:
            part = PartitionProducer(self, target, index, config)
            await part.attach_first()
            return part

        parts = await self._create_all([one(t, i) for t, i in self._targets(name, partitions)])
        producer = Producer(str(name), parts, partitioned=partitions > 0)
        self._producers.append(producer)
        return producer

    # ---------------------------------------------------------------- consumers

    async def subscribe(
        self,
        topic: str,
        subscription_name: str,
        *,
        consumer_type: ConsumerType = ConsumerType.Exclusive,
        initial_position: InitialPosition = InitialPosition.Latest,
        receiver_queue_size: int = 1000,
        consumer_name: str | None = None,
    ) -> Consumer:
        """Subscribe to ``topic`` (every partition of it, if partitioned) as ``subscription_name``."""
        name = TopicName.parse(topic)
        consumer_type = ConsumerType(consumer_type)
        initial_position = InitialPosition(initial_position)
        partitions = await self._partitions(name)
        consumer = Consumer(str(name), subscription_name, consumer_type)

        async def one(target: str, index: int) -> PartitionConsumer:
            part = PartitionConsumer(
                self,
                target,
                index,
                subscription=subscription_name,
                consumer_type=consumer_type,
                initial_position=initial_position,
                receiver_queue_size=receiver_queue_size,
                consumer_name=consumer_name,
                deliver=consumer._deliver,
                on_closed=consumer._on_partition_closed,
                discard_queued=consumer._discard_queued,
            )
            await part.attach_first()
            return part

        parts = await self._create_all([one(t, i) for t, i in self._targets(name, partitions)])
        consumer._attach(parts)
        self._consumers.append(consumer)
        return consumer

    @staticmethod
    async def _create_all(coros: list[Any]) -> list[Any]:
        """Run per-partition creations together; if any fails, close those that succeeded."""
        results = await asyncio.gather(*coros, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for r in results:
                if not isinstance(r, BaseException):
                    try:
                        await r.close()
                    except MagnetarError as exc:
                        log.debug("cleanup after failed create: %s", exc)
            raise errors[0]
        return list(results)

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Close every producer (flushing) and consumer (acks durable), then the connections."""
        if self._closed:
            return
        producers, self._producers = self._producers, []
        consumers, self._consumers = self._consumers, []
        results = await asyncio.gather(
            *(p.close() for p in producers), *(c.close() for c in consumers), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                log.debug("error while closing: %r", r)
        self._closed = True
        conns = [f.result() for f in self._conns.values() if f.done() and not f.cancelled() and f.exception() is None]
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()
