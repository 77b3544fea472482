"""A subscription: a durable cursor, its consumers and the loop that dispatches entries to them.

Dispatch reads entries from the cursor's read position (or the redelivery set first), skips ones
already acknowledged, and hands each whole entry (a producer batch) to the consumer the
dispatcher picks, spending as many permits as the entry holds messages — Pulsar's flow control.
Entries delivered but unacknowledged stay attached to their consumer; when it disconnects or
negatively acknowledges them they go back to the redelivery set with their redelivery count up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.dispatchers import Dispatcher, dispatcher_for
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol.entry import decode_entry
from magnetar.protocol.errors import InvalidCommand

log = logging.getLogger(__name__)

# Entries read per round of the dispatch loop.
READ_BATCH = 100


class Subscription:
    def __init__(self, topic_name: str, ml: ManagedLedger, cursor: ManagedCursor, sub_type: str) -> None:
        self.topic_name = topic_name
        self.name = cursor.name
        self.ml = ml
        self.cursor = cursor
        self.dispatcher: Dispatcher = dispatcher_for(sub_type)
        self.redeliver: set[Position] = set()
        self.redelivery_counts: dict[Position, int] = {}
        self.owner: dict[Position, ServerConsumer] = {}
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._unlisten = ml.add_listener(self.schedule)
        self.msg_out = 0
        self.bytes_out = 0

    @property
    def sub_type(self) -> str:
        return self.dispatcher.sub_type

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: ServerConsumer, sub_type: str) -> None:
        if self.dispatcher.consumers and sub_type != self.dispatcher.sub_type:
            raise InvalidCommand(
                f"subscription {self.name} is {self.dispatcher.sub_type}; cannot join it as {sub_type}"
            )
        if not self.dispatcher.consumers and sub_type != self.dispatcher.sub_type:
            self.dispatcher = dispatcher_for(sub_type)
        self.dispatcher.add(consumer)
        self.schedule()

    def remove_consumer(self, consumer: ServerConsumer) -> None:
        self.dispatcher.remove(consumer)
        self._return_unacked(consumer, list(consumer.unacked))
        self.schedule()

    def flow(self, consumer: ServerConsumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule()

    def _return_unacked(self, consumer: ServerConsumer, positions: list[Position]) -> None:
        for pos in positions:
            if consumer.unacked.pop(pos, None) is not None and self.owner.get(pos) is consumer:
                del self.owner[pos]
                if not self.cursor.is_acked(pos):
                    self.redeliver.add(pos)
                    self.redelivery_counts[pos] = self.redelivery_counts.get(pos, 0) + 1

    def negative_ack(self, consumer: ServerConsumer, positions: list[Position] | None) -> None:
        self._return_unacked(consumer, positions if positions is not None else list(consumer.unacked))
        self.schedule()

    # ------------------------------------------------------------------ acks
    def ack(self, consumer: ServerConsumer, kind: str, positions: list[Position]) -> asyncio.Future[None]:
        if kind == c.ACK_CUMULATIVE:
            if self.dispatcher.sub_type == c.SUB_SHARED:
                raise InvalidCommand("cumulative acknowledgement is not allowed on a Shared subscription")
            if len(positions) != 1:
                raise InvalidCommand("a cumulative ack carries exactly one position")
            upto = positions[0]
            for pos in [p for p in consumer.unacked if p <= upto]:
                self._forget(consumer, pos)
            self.redeliver = {p for p in self.redeliver if p > upto}
            return self.cursor.ack_cumulative(upto)
        for pos in positions:
            self._forget(consumer, pos)
            self.redeliver.discard(pos)
        return self.cursor.ack(positions)

    def _forget(self, consumer: ServerConsumer, pos: Position) -> None:
        owner = self.owner.pop(pos, None)
        (owner or consumer).unacked.pop(pos, None)
        self.redelivery_counts.pop(pos, None)

    # ------------------------------------------------------------------ dispatch
    def schedule(self) -> None:
        """Ask for a dispatch round; coalesces with one already running."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        if not self.dispatcher.has_permits():
            return
        if not self.redeliver and not self.cursor.has_more():
            return
        self._task = asyncio.get_running_loop().create_task(self._dispatch_loop())

    async def _dispatch_loop(self) -> None:
        try:
            while True:
                self._again = False
                progressed = await self._dispatch_round()
                if not progressed and not self._again:
                    return
        except Exception:
            log.exception("dispatch failed on %s/%s", self.topic_name, self.name)

    async def _dispatch_round(self) -> bool:
        if not self.dispatcher.has_permits():
            return False
        budget = max(1, min(READ_BATCH, self.dispatcher.total_permits()))
        entries: list[tuple[Position, bytes]]
        if self.redeliver:
            entries = []
            for pos in sorted(self.redeliver)[:budget]:
                self.redeliver.discard(pos)
                got = await self.ml.read_entries(pos, 1)
                if got and got[0][0] == pos:
                    entries.append(got[0])
        else:
            if not self.cursor.has_more():
                return False
            entries = await self.ml.read_entries(self.cursor.read_position, budget)
            if not entries:
                return False
            self.cursor.read_position = self.ml.next_position(entries[-1][0])
        for i, (pos, data) in enumerate(entries):
            if self.cursor.is_acked(pos) or pos in self.owner:
                continue
            consumer = self.dispatcher.pick()
            if consumer is None:
                # Out of permits mid-batch: keep the rest for the next round.
                self.redeliver.update(p for p, _ in entries[i:] if not self.cursor.is_acked(p))
                return False
            meta, payload = decode_entry(data)
            count = int(meta.get("n", 1))
            self.owner[pos] = consumer
            consumer.deliver(pos, meta, payload, count, self.redelivery_counts.get(pos, 0))
            self.msg_out += count
            self.bytes_out += len(payload)
        return True

    # ------------------------------------------------------------------ stats and lifecycle
    def stats(self) -> dict[str, Any]:
        return {
            "type": self.dispatcher.sub_type,
            "msgBacklog": self.cursor.backlog,
            "unackedMessages": sum(c.unacked_messages for c in self.dispatcher.consumers),
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "markDeletePosition": str(self.cursor.mark_delete),
            "readPosition": str(self.cursor.read_position),
            "consumers": [
                {
                    "consumerName": cons.name,
                    "availablePermits": cons.permits,
                    "unackedMessages": cons.unacked_messages,
                    "msgOutCounter": cons.msg_out,
                }
                for cons in self.dispatcher.consumers
            ],
        }

    def close(self) -> None:
        self._unlisten()
        if self._task is not None:
            self._task.cancel()
