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

Each ``PartitionConsumer`` re-subscribes on its own when its broker goes away or hands the topic
over (``reconnect.Attachment``; what is kept and what is dropped is in its class docstring), so a
partitioned consumer keeps receiving from the partitions that were not affected.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from itertools import repeat

from magnetar.client.acks import BatchAckTracker, FlowPermits, Position
from magnetar.client.connection import Connection
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError
from magnetar.client.message import EntryInfo, Message
from magnetar.client.options import ConsumerType, InitialPosition
from magnetar.client.reconnect import Attachment, Resolver
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import META_BATCHED, META_COUNT, META_PUBLISH_TIME, decode_batch
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, NotConnected, Timeout
from magnetar.protocol.message_id import MessageId

log = logging.getLogger(__name__)


class PartitionConsumer(Attachment):
    """A consumer on one (non-partitioned, or single partition) topic, attached to its owner's connection.

    On every re-attach (``reconnect.Attachment``) it subscribes again with the same subscription,
    type and consumer name, and starts afresh as Pulsar's consumer does: the messages still queued
    for the application are dropped (the broker redelivers them, they were never acknowledged),
    the permit count restarts at ``receiver_queue_size``, and ``epoch`` moves on so that messages
    handed out before the reconnect no longer count towards permits of the new registration.
    Acknowledgements are never dropped: those made while detached, and those whose answer was lost
    with the old connection, are sent on the new registration (an ack for an entry the broker
    already has acked is ignored by it).
    """

    def __init__(
        self,
        resolver: Resolver,
        topic: str,
        partition: int,
        *,
        subscription: str,
        consumer_type: ConsumerType,
        initial_position: InitialPosition,
        receiver_queue_size: int,
        consumer_name: str | None,
        deliver: Callable[[list[Message]], None],
        on_closed: Callable[[MagnetarError], None],
        discard_queued: Callable[[PartitionConsumer], None],
    ) -> None:
        super().__init__(resolver)
        self.topic = topic
        self.partition = partition
        self.consumer_id = -1
        self.epoch = 0
        self._subscription = subscription
        self._type = consumer_type
        self._initial_position = initial_position
        self._consumer_name = consumer_name
        self._deliver = deliver
        self._on_closed = on_closed
        self._discard_queued = discard_queued
        self.permits = FlowPermits(receiver_queue_size)
        self.tracker = BatchAckTracker()
        self._acks: list[Position] = []
        self._cumulative: Position | None = None
        self._nacks: set[Position] = set()
        self._flush_scheduled = False
        # Ack requests awaiting their answer, with the command (resent if the answer is lost).
        self._outstanding: dict[asyncio.Future[cmds.AckResponse], cmds.Ack] = {}

    @property
    def closed(self) -> MagnetarError | None:
        return self._closed

    # ---------------------------------------------------------------- attaching

    async def _attach(self, conn: Connection) -> None:
        cid = self._resolver.next_id()
        cmd = cmds.subscribe(
            self.topic,
            self._subscription,
            cid,
            self._type.value,
            self._initial_position.value,
            self._consumer_name,
        )
        # Registered before asking, so an entry pushed right after `success` is not dropped.
        conn.register_consumer(cid, self)
        try:
            await conn.request(cmd)
        except BaseException as exc:
            conn.unregister_consumer(cid)
            if isinstance(exc, Timeout):  # it may exist late, and an exclusive one would lock us out
                conn.request_nowait(cmds.close_consumer(cid))
            raise
        if self._closed is not None:
            conn.unregister_consumer(cid)
            conn.request_nowait(cmds.close_consumer(cid))
            return
        try:
            conn.write(cmds.flow(cid, self.permits.initial()))
        except MagnetarError as exc:
            conn.unregister_consumer(cid)
            raise NotConnected(f"connection to {conn.url} lost while subscribing: {exc}") from exc
        self.consumer_id = cid
        self._conn = conn
        self._attached.set()
        if self._acks or self._cumulative is not None:
            self._schedule_flush()

    def _connection_lost(self, conn: Connection, exc: MagnetarError) -> None:
        if conn is self._conn:
            self._reset(exc)

    def _closed_by_broker(self, conn: Connection) -> None:
        if conn is self._conn:
            self._reset(NotConnected(f"broker {conn.url} closed the consumer on {self.topic}"))

    def _reset(self, exc: MagnetarError) -> None:
        """Detached: forget what the broker will redeliver anyway, keep the acks, re-attach."""
        self.epoch += 1
        self.permits = FlowPermits(self.permits.queue_size)
        self._nacks.clear()  # every unacknowledged entry comes back after the re-subscribe
        self._discard_queued(self)
        self._detach(exc)

    def _give_up(self, exc: MagnetarError) -> None:
        self._closed = exc
        self._on_closed(exc)

    # ---------------------------------------------------------------- incoming

    def _on_message(self, frame: cmds.Message) -> None:
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
        info = EntryInfo(
            position, n, meta.get(META_PUBLISH_TIME, 0), frame.get("redelivery_count", 0), self, batched, self.epoch
        )
        if batched:
            info.unacked = self.tracker.track(position, n)
            self._deliver(list(map(Message, records, repeat(info, n), range(n))))
        else:
            self._deliver([Message(r, info, -1) for r in records])

    def return_permits(self, n: int) -> None:
        """Count ``n`` messages as consumed; send a ``flow`` when half the queue has been."""
        grant = self.permits.consumed(n)
        if grant:
            self._send(cmds.flow(self.consumer_id, grant))

    def message_consumed(self, info: EntryInfo) -> None:
        """One message of ``info``'s entry was handed to the application (from another thread's queue pop)."""
        if info.epoch == self.epoch:
            self.return_permits(1)

    def _send(self, cmd: cmds.Flow | cmds.Redeliver) -> None:
        """Write a fire-and-forget command; detached, it is dropped (the re-subscribe resets that state)."""
        conn = self._conn
        if conn is None:
            return
        try:
            conn.write(cmd)
        except MagnetarError as exc:
            log.debug("dropping %s for %s: %s", cmd["t"], self.topic, exc)

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

    def _schedule_flush(self) -> None:
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
        self._schedule_flush()

    def negative_acknowledge(self, position: Position) -> None:
        self._nacks.add(position)
        self._schedule_flush()

    def flush_acks(self) -> None:
        """Send what was acked (and nacked) since the last flush: at most one frame of each kind.

        Detached, acks wait for the next attach (which flushes them); nacks are dropped, since
        the re-subscribe redelivers every unacknowledged entry anyway.
        """
        self._flush_scheduled = False
        if self._closed is not None:
            self._acks.clear()
            self._nacks.clear()
            self._cumulative = None
            return
        if self._conn is None:
            self._nacks.clear()
            return
        if self._acks:
            positions, self._acks = self._acks, []
            self._ack_request(cmds.ack(self.consumer_id, cmds.ACK_INDIVIDUAL, positions))
        if self._cumulative is not None:
            position, self._cumulative = self._cumulative, None
            self._ack_request(cmds.ack(self.consumer_id, cmds.ACK_CUMULATIVE, [position]))
        if self._nacks:
            nacks, self._nacks = sorted(self._nacks), set()
            self._send(cmds.redeliver(self.consumer_id, nacks))

    def _ack_request(self, cmd: cmds.Ack) -> None:
        conn = self._conn
        assert conn is not None
        try:
            fut = conn.request_future(cmd)
        except MagnetarError as exc:  # closed under us before we were told: keep the acks, re-attach
            self._requeue(cmd)
            if self._conn is conn:
                self._reset(exc)
            return
        self._outstanding[fut] = cmd
        fut.add_done_callback(self._ack_done)

    def _ack_done(self, fut: asyncio.Future[cmds.AckResponse]) -> None:
        cmd = self._outstanding.pop(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            return
        if self._closed is None and (self._conn is None or cmd["consumer_id"] != self.consumer_id):
            self._requeue(cmd)  # lost with the old registration: send it on the new one
        else:
            log.warning("acknowledgement on %s failed: %s", self.topic, exc)

    def _requeue(self, cmd: cmds.Ack) -> None:
        positions: list[Position] = [(p[0], p[1]) for p in cmd["positions"]]
        if cmd["kind"] == cmds.ACK_CUMULATIVE:
            if self._cumulative is None or positions[0] > self._cumulative:
                self._cumulative = positions[0]
        else:
            self._acks.extend(positions)
        if self._conn is not None:
            self._schedule_flush()

    @property
    def acks_pending(self) -> bool:
        """Acks not yet confirmed durable by the broker (queued, or sent and unanswered)."""
        return bool(self._acks) or self._cumulative is not None or bool(self._outstanding)

    async def wait_acks_durable(self, limit_seconds: float) -> bool:
        """Flush pending acks and wait until the broker confirms them all; False if time ran out first.

        Spans reconnects: acks lost with a connection are requeued and sent again once attached.
        """
        deadline = self._loop.time() + limit_seconds
        while self.acks_pending and self._closed is None:
            remaining = deadline - self._loop.time()
            if remaining <= 0 or not await self._wait_attached(remaining):
                return False
            self.flush_acks()
            if self._outstanding:
                await asyncio.wait(list(self._outstanding), timeout=max(deadline - self._loop.time(), 0))
        return not self.acks_pending

    # ---------------------------------------------------------------- closing

    async def close(self, *, unsubscribe: bool = False) -> None:
        """Close (or unsubscribe) on the broker, after acks made before it are durable.

        Everything is bounded by the operation timeout: with the broker gone, close gives up
        waiting (logging that acks may not be durable) instead of hanging; unsubscribe raises.
        """
        if self._closed is not None:
            if unsubscribe:
                raise self._closed
            return
        limit = self._resolver.operation_timeout
        deadline = self._loop.time() + limit
        if not await self.wait_acks_durable(limit):
            log.warning("closing consumer on %s: acknowledgements may not be durable (broker unreachable)", self.topic)
        kind = cmds.UNSUBSCRIBE if unsubscribe else cmds.CLOSE_CONSUMER
        attached = await self._wait_attached(deadline - self._loop.time())
        conn = self._conn
        self._closed = AlreadyClosed(f"consumer on {self.topic} is closed")
        await self._stop_reattaching()
        self._conn = None
        try:
            if not attached or conn is None:
                raise NotConnected(f"{kind} on {self.topic}: not connected to its broker")
            cmd = cmds.unsubscribe(self.consumer_id) if unsubscribe else cmds.close_consumer(self.consumer_id)
            await conn.request(cmd, max(deadline - self._loop.time(), 0.001))
        except (NotConnected, Timeout) as exc:
            if unsubscribe:
                raise
            log.debug("%s on %s: %s", kind, self.topic, exc)
        finally:
            if conn is not None:
                conn.unregister_consumer(self.consumer_id)


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

    def _discard_queued(self, part: PartitionConsumer) -> None:
        """Drop the queued, not yet received messages of ``part`` (it reconnected; they come again).

        Removes in place rather than rebuilding the deque: the blocking consumer pops from it on
        another thread, and a message it already took is the application's and must stay taken.
        """
        queue = self._queue
        drop = [m for m in queue if m._info.owner is part]
        if len(drop) == len(queue):
            queue.clear()
            return
        for m in drop:
            try:
                queue.remove(m)
            except ValueError:
                pass

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
        info = msg._info
        owner = info.owner
        if owner is not None and info.epoch == owner.epoch:
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
        info = msg._info
        owner = info.owner
        if owner is not None and info.epoch == owner.epoch:
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
            part._send(cmds.redeliver(part.consumer_id))

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
