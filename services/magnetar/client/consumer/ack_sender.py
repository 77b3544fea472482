"""Acknowledgements of a partition consumer: tracked per batch, grouped, sent, confirmed durable.

Acks are grouped as Pulsar's client groups them (``ackGroupingTimeMs`` 100, ``ackGroupingMaxSize``
1,000): individual acks wait up to ``ACK_GROUPING_SECONDS`` in a list, or until
``ACK_GROUPING_MAX`` are pending, and go out as one ``ack`` frame (with a ``rid``). Cumulative and
batch-index acks, and redeliveries, go out at the end of the loop iteration and take the grouped
acks with them. One frame per message cost the consumer and the broker a frame each, and the broker
a cursor write every few milliseconds, at 5,000 msg/s. The broker answers ``ack_response`` once
the acks are durable; ``close()``, ``seek`` and ``redeliver_unacknowledged_messages`` flush first
(and ``close()`` waits for the answers), so acks made before ``close`` are durable when it
returns. With ``batch_index_ack_enabled`` an ack of one message of a batch goes out at once as a
``batch_acks`` item (WIRE.md R20c); without it, the entry is acked when its last message is.
Either way an entry redelivered with ``acked`` indexes never hands those out again.

Acks are never dropped by a reconnect: those made while detached, and those whose answer was lost
with the old connection, are sent on the new registration (``_requeue``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from magnetar.client.consumer.acks import Position
from magnetar.client.consumer.partition_state import PartitionConsumerState
from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError
from magnetar.client.options import ConsumerType
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import MagnetarError

log = logging.getLogger(__name__)

# Individual acks are sent after this long, or once this many are pending (Pulsar's C++ client's
# ackGroupingTimeMs and ackGroupingMaxSize defaults, which its Python client uses).
ACK_GROUPING_SECONDS = 0.1
ACK_GROUPING_MAX = 1_000


class AckSender(PartitionConsumerState):
    """Individual, cumulative and batch-index acknowledgements, grouped into ``ack`` frames."""

    def acknowledge(self, position: Position, index: int) -> None:
        """Individually acknowledge message ``index`` of the entry at ``position`` (-1: not batched)."""
        self._acked_msgs += 1
        chunked = self._chunked
        if chunked:
            chunks = chunked.pop(position, None)
            if chunks is not None:  # a chunked message: every chunk of it (Pulsar acks them all)
                for p in chunks:
                    self.ack_entry(p)
                return
        if index >= 0:
            remaining = self.tracker.get(position)
            if remaining is not None:
                remaining.discard(index)
                if remaining:
                    if self._batch_index_ack:
                        self._batch_ack(position, (index,))
                    return
                self.tracker.forget(position)
        self.ack_entry(position)

    def _batch_ack(self, position: Position, indexes: Sequence[int]) -> None:
        pending = self._batch_acks.get(position)
        if pending is None:
            pending = self._batch_acks[position] = set()
        pending.update(indexes)
        self._schedule_flush()

    def ack_entry(self, position: Position) -> None:
        """Queue an individual ack of a whole entry for the next coalesced ``ack`` frame."""
        self._acks.append(position)
        if self._dlq_candidates:
            self._dlq_candidates.pop(position, None)
        timeouts = self.ack_timeouts
        if timeouts is not None:
            timeouts.discard(position)
        if self._flush_scheduled:
            return
        if len(self._acks) >= ACK_GROUPING_MAX or self._acked_msgs >= ACK_GROUPING_MAX:
            self._schedule_flush()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(ACK_GROUPING_SECONDS, self.flush_acks)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush_acks)

    def acknowledge_cumulative(self, position: Position, index: int) -> None:
        if self._type in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise CumulativeAcknowledgementNotAllowedError(
                f"cumulative acknowledgement is not allowed on a {self._type.value} subscription"
            )
        remaining = self.tracker.get(position)
        before = set(remaining) if self._batch_index_ack and remaining is not None and index >= 0 else None
        target = self.tracker.ack_cumulative(position, index)
        if before is not None:
            still = self.tracker.get(position)
            if still:  # a batch acknowledged part-way: tell the broker which of its indexes
                self._batch_ack(position, sorted(before - still))
        if target is None:
            return
        if self._chunked:
            for p in [p for p in self._chunked if p <= target]:
                del self._chunked[p]
        if self._cumulative is None or target > self._cumulative:
            self._cumulative = target
        if self.ack_timeouts is not None:
            self.ack_timeouts.discard_up_to(target)
        if self._dlq_candidates:
            for p in [p for p in self._dlq_candidates if p <= target]:
                del self._dlq_candidates[p]
        self._schedule_flush()

    def flush_acks(self) -> None:
        """Send what was acked (and is due for redelivery) since the last flush: at most one frame of each kind.

        Detached, acks wait for the next attach (which flushes them); redeliveries are dropped,
        since the re-subscribe redelivers every unacknowledged entry anyway.
        """
        self._flush_scheduled = False
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._closed is not None:
            self._acks.clear()
            self._batch_acks.clear()
            self._redeliver_now.clear()
            self._cumulative = None
            return
        if self._conn is None:
            self._redeliver_now.clear()
            return
        if self._acks or self._batch_acks:
            self._acked_msgs = 0
            positions, self._acks = self._acks, []
            batch_acks: list[list[Any]] | None = None
            if self._batch_acks:
                done = set(positions)
                batch_acks = [
                    [p[0], p[1], self.tracker.count(p), sorted(idx)]
                    for p, idx in self._batch_acks.items()
                    if p not in done and self.tracker.count(p)
                ]
                self._batch_acks = {}
            if positions or batch_acks:
                self._ack_request(cmds.ack(self.consumer_id, cmds.ACK_INDIVIDUAL, positions, batch_acks=batch_acks))
        if self._cumulative is not None:
            position, self._cumulative = self._cumulative, None
            self._ack_request(cmds.ack(self.consumer_id, cmds.ACK_CUMULATIVE, [position]))
        if self._redeliver_now:
            positions_again, self._redeliver_now = sorted(self._redeliver_now), set()
            self._send(cmds.redeliver(self.consumer_id, positions_again))

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
        for item in cmd.get("batch_acks", ()):
            pending = self._batch_acks.setdefault((int(item[0]), int(item[1])), set())
            pending.update(int(i) for i in item[3])
        if self._conn is not None:
            self._schedule_flush()

    @property
    def acks_pending(self) -> bool:
        """Acks not yet confirmed durable by the broker (queued, or sent and unanswered)."""
        return bool(self._acks) or bool(self._batch_acks) or self._cumulative is not None or bool(self._outstanding)

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
