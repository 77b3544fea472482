"""A consumer on one (partition) topic, speaking to the broker that owns it.

``PartitionConsumer`` subscribes, takes in each pushed entry (one ``decode_batch`` — CRC,
decompress, one msgpack call — per entry, then the messages go to the ``Consumer``'s queue), and
re-subscribes on its own when its broker goes away or hands the topic over
(``reconnect.Attachment``), so a partitioned consumer keeps receiving from the partitions that
were not affected. What else it does is one concern per module, combined here (see
``partition_state.py``): permits, acks, redelivery, chunks, seek.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from itertools import repeat
from typing import Any

from magnetar.client.consumer.ack_sender import AckSender
from magnetar.client.consumer.acks import FlowPermits, Position
from magnetar.client.consumer.chunk_receipt import ChunkReceipt
from magnetar.client.consumer.chunks import is_chunk
from magnetar.client.consumer.partition_state import is_sentinel
from magnetar.client.consumer.permits import Permits
from magnetar.client.consumer.redelivery_requests import RedeliveryRequests
from magnetar.client.consumer.seek import Seeking
from magnetar.client.message import EntryInfo, Message
from magnetar.client.net.connection import Connection
from magnetar.client.options import ConsumerType, KeySharedMode
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import META_BATCHED, META_COUNT, META_PUBLISH_TIME, decode_batch
from magnetar.protocol.entry import META_ENCRYPTION_KEYS, META_NUM_CHUNKS
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, NotConnected, Timeout
from magnetar.protocol.message_id import MessageId

log = logging.getLogger(__name__)


class PartitionConsumer(Permits, AckSender, RedeliveryRequests, ChunkReceipt, Seeking):
    """A consumer on one (non-partitioned, or single partition) topic, attached to its owner's connection.

    On every re-attach (``reconnect.Attachment``) it subscribes again with the same subscription,
    type and consumer name, and starts afresh as Pulsar's consumer does: the messages still queued
    for the application are dropped (the broker redelivers them, they were never acknowledged),
    the permit count restarts at ``receiver_queue_size``, pending negative acks, ack timeouts and
    dead letter candidates are forgotten (everything unacknowledged comes back anyway), and
    ``epoch`` moves on so that messages handed out before the reconnect no longer count towards
    permits of the new registration. Acknowledgements are never dropped: those made while
    detached, and those whose answer was lost with the old connection, are sent on the new
    registration (an ack for an entry the broker already has acked is ignored by it).

    A non-durable one (a reader's, ``durable=False``) has no cursor to come back to: it subscribes
    again from the first message it had queued and not handed out (inclusive), or else from after
    the last one it received, so a reader neither skips nor repeats across a broker restart.
    Within the entry it starts in, it drops the batch indexes before its start id (as Pulsar's
    client does); on the wire it asks for that whole entry (``start_message_id`` with batch -1,
    inclusive), so that how the broker treats batch indexes does not matter.
    """

    # ---------------------------------------------------------------- attaching

    def _subscribe_cmd(self, cid: int) -> cmds.Subscribe:
        config = self.config
        mode: str | None = None
        ranges: list[list[int]] | None = None
        out_of_order = False
        policy = config.key_shared_policy
        if self._type is ConsumerType.KeyShared and policy is not None:
            mode = policy.key_shared_mode.value
            if policy.key_shared_mode is KeySharedMode.Sticky:
                ranges = [[start, end] for start, end in policy.sticky_ranges]
            out_of_order = policy.allow_out_of_order_delivery
        start: list[int] | None = None
        inclusive = self._start_inclusive
        if self._start is not None:
            s = self._start
            if s.batch_index() >= 0 and not is_sentinel(s):
                start, inclusive = [s.ledger_id(), s.entry_id(), -1], True  # the whole entry; indexes dropped here
            else:
                start = [s.ledger_id(), s.entry_id(), s.batch_index()]
        return cmds.subscribe(
            self.topic,
            self._subscription,
            cid,
            self._type.value,
            config.initial_position.value,
            config.consumer_name,
            priority_level=config.priority_level,
            key_shared_mode=mode,
            key_ranges=ranges,
            allow_out_of_order=out_of_order,
            durable=self._durable,
            start_message_id=start,
            start_inclusive=inclusive if start is not None else False,
            read_compacted=config.is_read_compacted,
            properties=config.properties,
            schema=self.decoder.wire if self.decoder is not None else None,
        )

    async def _attach(self, conn: Connection) -> None:
        cid = self._resolver.next_id()
        cmd = self._subscribe_cmd(cid)
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
        if not conn.holds_consumer(cid, self):  # the topic moved again before this task resumed
            raise NotConnected(f"broker {conn.url} closed the consumer on {self.topic} as it subscribed")
        try:
            conn.write(cmds.flow(cid, self.permits.initial()))
        except MagnetarError as exc:
            conn.unregister_consumer(cid)
            raise NotConnected(f"connection to {conn.url} lost while subscribing: {exc}") from exc
        self.consumer_id = cid
        self._conn = conn
        self._attached.set()
        if self._acks or self._batch_acks or self._cumulative is not None:
            self._schedule_flush()
        if self.ack_timeouts is not None and self._tick is None:  # ticks from the first attach to close
            self._tick = self._loop.call_later(self.config.ack_timeout_tick_time_ms / 1000.0, self._on_tick)

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
        self._forget_redeliveries()
        dropped = self._discard_queued(self)
        # A reader resumes after what it got; on a non-persistent topic every id is 0:0 (nothing
        # is stored), so a start there would filter out everything that comes next.
        if not self._durable and self.topic.startswith("persistent://"):
            if dropped:
                self._set_start(dropped[0].message_id(), True)
            elif self._last_received is not None:
                self._set_start(self._last_received, False)
        self._detach(exc)

    def _give_up(self, exc: MagnetarError) -> None:
        self._closed = exc
        self._stop_timers()
        self._on_closed(exc)

    def _stop_timers(self) -> None:
        for handle in (self._nack_timer, self._tick, self._chunk_timer, self._ack_timer):
            if handle is not None:
                handle.cancel()
        self._nack_timer = self._tick = self._chunk_timer = self._ack_timer = None

    # ---------------------------------------------------------------- incoming

    def _on_active_change(self, is_active: bool) -> None:
        """Failover: the broker made this consumer the active one, or a standby (WIRE.md R20b)."""
        self.is_active = is_active

    def _on_message(self, frame: cmds.Message) -> None:
        meta = frame["meta"]
        position = (frame["ledger"], frame["entry"])
        seek = self._seek_fut
        if seek is not None and not seek.done():  # pushed for the position a seek is leaving
            self._dropped_by_seek.append(position)
            self.return_permits(int(meta.get(META_COUNT, 1)) if isinstance(meta, dict) else 1)
            return
        if META_NUM_CHUNKS in meta and is_chunk(meta):
            self._on_chunk(frame, meta, position)
            return
        try:
            if META_ENCRYPTION_KEYS in meta:  # end-to-end encrypted: open it or apply the failure action
                from magnetar.client.encryption.decryption import open_entry

                opened = open_entry(self, meta, frame["payload"], [position])
                if opened is None:
                    return
                meta, records = opened
            else:
                records = decode_batch(meta, frame["payload"])
        except Exception as exc:  # ChecksumError, or undecodable bytes behind a good CRC
            log.warning("dropping entry %s:%s of %s and asking for redelivery: %s", *position, self.topic, exc)
            self._redeliver_now.add(position)
            self._schedule_flush()
            # The broker charged permits for it; the application will never consume it.
            self.return_permits(int(meta.get(META_COUNT, 1)) if isinstance(meta, dict) else 1)
            return
        batched = bool(meta.get(META_BATCHED, True))
        n = len(records)
        redelivery_count = frame.get("redelivery_count", 0)
        info = EntryInfo(position, n, meta.get(META_PUBLISH_TIME, 0), redelivery_count, self, batched, self.epoch, meta)
        if not self._durable:
            self._last_received = MessageId(self.partition, position[0], position[1], n - 1 if batched else -1)
        acked = frame.get("acked")
        limit = self._max_redeliver
        skip_before = self._skip_before
        if (
            not acked
            and (skip_before is None or position > skip_before.position)
            and (limit is None or redelivery_count < limit)
        ):
            # Hot path: nothing to filter.
            if batched:
                info.unacked = self.tracker.track(position, n)
                self._deliver(list(map(Message, records, repeat(info, n), range(n))))
            else:
                self._deliver([Message(r, info, -1) for r in records])
            return
        self._on_filtered_entry(info, records, acked or (), batched)

    def _skipped_indexes(self, position: Position, n: int, batched: bool) -> set[int]:
        """Indexes of the entry at ``position`` before where this consumer starts (or was sought to)."""
        start = self._skip_before
        if start is None or position > start.position:
            return set()
        if position < start.position:
            return set(range(n))
        if batched and start.batch_index() >= 0:
            first_kept = start.batch_index() if self._start_inclusive else start.batch_index() + 1
            return set(range(min(first_kept, n)))
        return set() if self._start_inclusive else set(range(n))

    def _on_filtered_entry(self, info: EntryInfo, records: list[Any], acked: Sequence[int], batched: bool) -> None:
        """The slow path of ``_on_message``: drop acked indexes and those before the start id, and
        hold back dead letters."""
        position, n = info.position, len(records)
        skip = self._skipped_indexes(position, n, batched)
        if batched:
            skip.update(acked)
            unacked = info.unacked = self.tracker.track(position, n)
            if unacked is not None:
                unacked.difference_update(skip)  # acknowledged, or before where we start: never handed out
                if not unacked:
                    self.tracker.forget(position)
                    if self._durable:
                        self.ack_entry(position)  # nothing of it is left for us
            messages = [Message(r, info, i) for i, r in enumerate(records) if i not in skip]
        else:
            messages = [] if skip else [Message(records[0], info, -1)]
        held = n - len(messages)
        limit = self._max_redeliver
        if messages and limit is not None and info.redelivery_count >= limit:
            self._dlq_candidates[position] = messages
            if info.redelivery_count > limit:  # its last delivery failed elsewhere: straight to the DLQ
                held += len(messages)
                messages = []
                self._start_dead_letter(position)
        if held:
            self.return_permits(held)
        if messages:
            self._deliver(messages)

    # ---------------------------------------------------------------- closing

    async def close(self, *, unsubscribe: bool = False) -> None:
        """Close (or unsubscribe) on the broker, after acks made before it are durable.

        Everything is bounded by the operation timeout: with the broker gone, close gives up
        waiting (logging that acks may not be durable) instead of hanging; unsubscribe raises.
        Dead letters being published finish first, so that their acks are among those.
        """
        if self._closed is not None:
            if unsubscribe:
                raise self._closed
            return
        limit = self._resolver.operation_timeout
        deadline = self._loop.time() + limit
        self._stop_timers()
        if self._gate is not None:
            self._gate.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=limit)
        if not await self.wait_acks_durable(max(deadline - self._loop.time(), 0.001)):
            log.warning("closing consumer on %s: acknowledgements may not be durable (broker unreachable)", self.topic)
        kind = cmds.UNSUBSCRIBE if unsubscribe else cmds.CLOSE_CONSUMER
        attached = await self._wait_attached(deadline - self._loop.time())
        conn = self._conn
        self._closed = AlreadyClosed(f"consumer on {self.topic} is closed")
        for task in list(self._tasks):
            task.cancel()
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
