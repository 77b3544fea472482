"""Asyncio consumers: one ``PartitionConsumer`` per (partition) topic, merged by ``Consumer``.

``PartitionConsumer`` speaks to one broker: it subscribes, grants permits, verifies and decodes
each pushed entry (one ``decode_batch`` — CRC, decompress, one msgpack call — per entry), and
batches acknowledgements. ``Consumer`` is what users hold: one receive queue fed by every
partition, ``receive``/``async for``, and acks routed back to the partition the message came from.

Acks are coalesced: every ``acknowledge`` in one loop iteration lands in a list, and one ``ack``
frame (with a ``rid``) goes out at the end of the iteration. The broker answers ``ack_response``
once the acks are durable; ``close()`` waits for those answers, so acks made before ``close`` are
durable when it returns. Negative acks are coalesced the same way into one ``redeliver``; the
broker redelivers at once (Pulsar would wait ``negative_ack_redelivery_delay_ms``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any

from magnetar.client.acks import BatchAckTracker, FlowPermits, Position
from magnetar.client.connection import Connection
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError
from magnetar.client.message import EntryInfo, Message
from magnetar.client.options import ConsumerType, InitialPosition
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import META_BATCHED, META_COUNT, META_PUBLISH_TIME, decode_batch
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, NotConnected, Timeout
from magnetar.protocol.message_id import MessageId

log = logging.getLogger(__name__)


class PartitionConsumer:
    """A consumer on one (non-partitioned, or single partition) topic, over one connection."""

    def __init__(
        self,
        conn: Connection,
        topic: str,
        partition: int,
        consumer_id: int,
        *,
        subscription: str,
        consumer_type: ConsumerType,
        initial_position: InitialPosition,
        receiver_queue_size: int,
        consumer_name: str | None,
        deliver: Callable[[list[Message]], None],
        on_closed: Callable[[MagnetarError], None],
    ) -> None:
        self._conn = conn
        self.topic = topic
        self.partition = partition
        self.consumer_id = consumer_id
        self._subscription = subscription
        self._type = consumer_type
        self._initial_position = initial_position
        self._consumer_name = consumer_name
        self._deliver = deliver
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self.permits = FlowPermits(receiver_queue_size)
        self.tracker = BatchAckTracker()
        self._acks: list[Position] = []
        self._cumulative: Position | None = None
        self._nacks: set[Position] = set()
        self._flush_scheduled = False
        self._outstanding: set[asyncio.Future[dict[str, Any]]] = set()
        self.closed: MagnetarError | None = None

    async def subscribe(self) -> None:
        cmd: dict[str, Any] = {
            "t": cmds.SUBSCRIBE,
            "topic": self.topic,
            "subscription": self._subscription,
            "consumer_id": self.consumer_id,
            "sub_type": self._type.value,
            "initial_position": self._initial_position.value,
        }
        if self._consumer_name:
            cmd["consumer_name"] = self._consumer_name
        # Registered before asking, so an entry pushed right after `success` is not dropped.
        self._conn.register_consumer(self.consumer_id, self)
        try:
            await self._conn.request(cmd)
        except BaseException:
            self._conn.unregister_consumer(self.consumer_id)
            raise
        self._conn.write({"t": cmds.FLOW, "consumer_id": self.consumer_id, "permits": self.permits.initial()})

    # ---------------------------------------------------------------- incoming

    def _on_message(self, frame: dict[str, Any]) -> None:
        meta = frame["meta"]
        position = (frame["ledger"], frame["entry"])
        try:
            records = decode_batch(meta, frame["payload"])
        except Exception as exc:  # ChecksumError, or undecodable bytes behind a good CRC
            log.warning("dropping entry %s:%s of %s and asking for redelivery: %s", *position, self.topic, exc)
            self.negative_acknowledge(position)
            # The broker charged permits for it; the application will never consume it.
            self.return_permits(int(meta.get(META_COUNT, 1)) if isinstance(meta, dict) else 1)
            return
        batched = bool(meta.get(META_BATCHED, True))
        n = len(records)
        info = EntryInfo(position, n, meta.get(META_PUBLISH_TIME, 0), frame.get("redelivery_count", 0), self, batched)
        if batched:
            info.unacked = self.tracker.track(position, n)
            self._deliver(list(map(Message, records, repeat(info, n), range(n))))
        else:
            self._deliver([Message(r, info, -1) for r in records])

    def return_permits(self, n: int) -> None:
        """Count ``n`` messages as consumed; send a ``flow`` when half the queue has been."""
        grant = self.permits.consumed(n)
        if grant and self.closed is None:
            self._send({"t": cmds.FLOW, "consumer_id": self.consumer_id, "permits": grant})

    def _send(self, cmd: dict[str, Any]) -> None:
        try:
            self._conn.write(cmd)
        except MagnetarError as exc:
            log.debug("dropping %s for %s: %s", cmd["t"], self.topic, exc)

    def _on_connection_closed(self, exc: MagnetarError) -> None:
        self.closed = exc
        self._on_closed(exc)

    # ---------------------------------------------------------------- acks

    def acknowledge(self, position: Position, index: int) -> None:
        if index >= 0 and not self.tracker.ack(position, index):
            return
        self.ack_entry(position)

    def ack_entry(self, position: Position) -> None:
        """Queue an individual ack of a whole entry for the next coalesced ``ack`` frame."""
        self._acks.append(position)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush_acks)

    def acknowledge_cumulative(self, position: Position, index: int) -> None:
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgement is not allowed on a {self._type.value} subscription"
            )
        target = self.tracker.ack_cumulative(position, index)
        if target is None:
            return
        if self._cumulative is None or target > self._cumulative:
            self._cumulative = target
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush_acks)

    def negative_acknowledge(self, position: Position) -> None:
        self._nacks.add(position)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush_acks)

    def flush_acks(self) -> None:
        """Send what was acked (and nacked) since the last flush: at most one frame of each kind."""
        self._flush_scheduled = False
        if self.closed is not None:
            self._acks.clear()
            self._nacks.clear()
            self._cumulative = None
            return
        if self._acks:
            positions, self._acks = self._acks, []
            self._ack_request(
                {
                    "t": cmds.ACK,
                    "consumer_id": self.consumer_id,
                    "kind": cmds.ACK_INDIVIDUAL,
                    "positions": positions,
                }
            )
        if self._cumulative is not None:
            position, self._cumulative = self._cumulative, None
            self._ack_request(
                {
                    "t": cmds.ACK,
                    "consumer_id": self.consumer_id,
                    "kind": cmds.ACK_CUMULATIVE,
                    "positions": [position],
                }
            )
        if self._nacks:
            nacks, self._nacks = sorted(self._nacks), set()
            self._send({"t": cmds.REDELIVER, "consumer_id": self.consumer_id, "positions": nacks})

    def _ack_request(self, cmd: dict[str, Any]) -> None:
        try:
            fut = self._conn.request_future(cmd)
        except MagnetarError as exc:
            log.warning("acks for %s not sent: %s", self.topic, exc)
            return
        self._outstanding.add(fut)
        fut.add_done_callback(self._ack_done)

    def _ack_done(self, fut: asyncio.Future[dict[str, Any]]) -> None:
        self._outstanding.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            log.warning("acknowledgement on %s failed: %s", self.topic, fut.exception())

    async def wait_acks_durable(self, limit_seconds: float) -> None:
        """Flush pending acks, then wait (bounded) for the broker to confirm all of them."""
        self.flush_acks()
        if self._outstanding:
            await asyncio.wait(list(self._outstanding), timeout=limit_seconds)

    # ---------------------------------------------------------------- closing

    async def close(self, *, unsubscribe: bool = False) -> None:
        if self.closed is not None:
            if unsubscribe:
                raise self.closed
            return
        await self.wait_acks_durable(self._conn.operation_timeout)
        kind = cmds.UNSUBSCRIBE if unsubscribe else cmds.CLOSE_CONSUMER
        try:
            await self._conn.request({"t": kind, "consumer_id": self.consumer_id})
        except (NotConnected, Timeout) as exc:
            if unsubscribe:
                raise
            log.debug("%s on %s: %s", kind, self.topic, exc)
        finally:
            self.closed = AlreadyClosed(f"consumer on {self.topic} is closed")
            self._conn.unregister_consumer(self.consumer_id)


class Consumer:
    """A subscription's consumer over one topic or every partition of a partitioned topic.

    ``receive()`` and ``async for msg in consumer`` return messages in arrival order; across
    partitions the order is the interleaving in which they arrived.
    """

    def __init__(self, topic: str, subscription: str, consumer_type: ConsumerType) -> None:
        self._topic = topic
        self._subscription = subscription
        self._type = consumer_type
        self._parts: list[PartitionConsumer] = []
        self._by_partition: dict[int, PartitionConsumer] = {}
        self._queue: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._error: MagnetarError | None = None
        self._closing = False

    def _attach(self, parts: list[PartitionConsumer]) -> None:
        self._parts = parts
        self._by_partition = {p.partition: p for p in parts}

    def topic(self) -> str:
        return self._topic

    def subscription_name(self) -> str:
        return self._subscription

    @property
    def partitions(self) -> list[PartitionConsumer]:
        return self._parts

    # ---------------------------------------------------------------- delivery

    def _deliver(self, messages: list[Message]) -> None:
        self._queue.extend(messages)
        if self._waiters:
            self._wake_one()

    def _on_partition_closed(self, exc: MagnetarError) -> None:
        if self._error is None:
            self._error = exc
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)

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

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        queue = self._queue
        if not queue:
            await self._wait(None if timeout_millis is None else timeout_millis / 1000.0)
        msg = queue.popleft()
        owner = msg._info.owner
        if owner is not None:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
        return msg

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
        owner = msg._info.owner
        if owner is not None:
            permits = owner.permits
            permits.available += 1
            if permits.available >= permits.threshold:
                owner.return_permits(0)
        return msg

    # ---------------------------------------------------------------- acks

    def _locate(self, message: Message | MessageId) -> tuple[PartitionConsumer, Position, int]:
        if isinstance(message, Message):
            info = message._info
            owner = info.owner
            if owner is None:
                raise ValueError("message does not belong to a consumer")
            return owner, info.position, message._index
        part = self._by_partition.get(message.partition)
        if part is None:
            if len(self._parts) != 1:
                raise ValueError(f"message id {message} is not from a partition of {self._topic}")
            part = self._parts[0]
        return part, message.position, message.batch_index

    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message; the entry is acked on the broker once all its messages are."""
        if type(message) is Message:
            # Hot path: discard from the entry's live set; no lookup until the entry completes.
            info = message._info
            owner = info.owner
            if owner is not None:
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

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Ask the broker to redeliver this message's entry (with its whole batch)."""
        owner, position, _ = self._locate(message)
        owner.negative_acknowledge(position)

    def redeliver_unacknowledged_messages(self) -> None:
        for part in self._parts:
            part._send({"t": cmds.REDELIVER, "consumer_id": part.consumer_id})

    # ---------------------------------------------------------------- closing

    def _closed_now(self) -> None:
        self._closing = True
        self._queue.clear()
        self._on_partition_closed(AlreadyClosed(f"consumer on {self._topic} is closed"))

    async def unsubscribe(self) -> None:
        """Delete the subscription (and its cursor) on the broker, then close."""
        try:
            await asyncio.gather(*(p.close(unsubscribe=True) for p in self._parts))
        finally:
            self._closed_now()

    async def close(self) -> None:
        """Close; returns once acknowledgements made before it are durable on the broker."""
        if self._closing:
            return
        self._closing = True
        try:
            await asyncio.gather(*(p.close() for p in self._parts))
        finally:
            self._closed_now()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
