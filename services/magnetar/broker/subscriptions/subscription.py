"""A subscription: a cursor, its consumers and the loop that dispatches entries to them.

Dispatch reads entries from the cursor's read position, skips ones already acknowledged, and hands
each whole entry (a producer batch) to the consumer the dispatcher picks, spending as many permits
as the entry holds messages not yet acknowledged by batch index — Pulsar's flow control. Entries
delivered but unacknowledged stay attached to their consumer; when it disconnects or negatively
acknowledges them they go back to the *replay set* (``redeliver``) with their redelivery count up.
Replayed entries are dispatched before new ones, in position order.

The subscription types differ in who gets an entry (``dispatchers``) and in three rules: Failover
hands the entries the previous active consumer still had unacked to the new one (Pulsar rewinds
the cursor; here, ``_hand_over``), delayed delivery holds Shared and Key_Shared entries until
their time (``dispatch_rounds``), and Key_Shared keeps each key's order across consumers
(``replay_set``).

The class is split by concern: ``Subscription`` here holds its consumers, acknowledgements,
seeks and stats; the dispatch rounds (``dispatch_rounds.DispatchRounds``) and the replay set with
Key_Shared's parking (``replay_set.ReplaySet``) are its base classes, each in its own module.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Sequence
from typing import Any

from magnetar.broker.policies.expiry_stats import ExpiryStats
from magnetar.broker.policies.rate_limit import DispatchGate
from magnetar.broker.subscriptions.consumer import ServerConsumer, UnackedCount
from magnetar.broker.subscriptions.delayed_delivery import DelayedDeliveryTracker
from magnetar.broker.subscriptions.dispatch_rounds import CompactedReads, DispatchRounds
from magnetar.broker.subscriptions.dispatchers import Dispatcher, check_joinable, dispatcher_for
from magnetar.broker.subscriptions.dispatchers.key_shared import KeySharedDispatcher
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol.errors import InvalidCommand, InvalidTopicName
from magnetar.protocol.topic_name import TopicName

BatchAck = tuple[Position, int, Sequence[int]]


def _partition_index(topic_name: str) -> int:
    try:
        return TopicName.parse(topic_name).partition_index
    except InvalidTopicName:
        return -1


class Subscription(DispatchRounds):
    def __init__(
        self, topic_name: str, ml: ManagedLedger, cursor: ManagedCursor, sub_type: str, *, durable: bool = True
    ) -> None:
        self.topic_name = topic_name
        self.name = cursor.name
        self.ml = ml
        self.cursor = cursor
        self.durable = durable
        self.partition_index = _partition_index(topic_name)
        self.dispatcher: Dispatcher = dispatcher_for(sub_type, self.partition_index)
        # The replay set: position -> its key hash when known (Key_Shared), else None.
        self.redeliver: dict[Position, int | None] = {}
        self.redelivery_counts: dict[Position, int] = {}
        self.owner: dict[Position, ServerConsumer] = {}
        # Called when the last consumer of a non-durable subscription leaves (the topic drops it).
        self.on_last_consumer: Callable[[Subscription], None] | None = None
        self.delayed: DelayedDeliveryTracker | None = None
        self._ready: list[Position] = []  # heap of replay positions to try (may hold stale ones)
        # Key_Shared state (replay_set.py).
        self._key_hash_of: dict[Position, int] = {}
        self._replay_by_hash: dict[int, list[Position]] = {}  # heaps, may hold stale positions
        self._parked: dict[ServerConsumer | None, list[Position]] = {}
        self._parked_under: dict[Position, ServerConsumer | None] = {}
        self._held: dict[int, dict[ServerConsumer, int]] = {}
        self._drain_waiters: dict[int, set[ServerConsumer]] = {}
        self.recently_joined: dict[ServerConsumer, Position] = {}
        self._epoch = 0  # bumped by reset(): a dispatch round that awaited across it starts over
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._unlisten = ml.add_listener(self.on_added)
        self._dispatch_deferred = False  # on_added handed the dispatch to the write_batch scope
        self._closed = False
        self.msg_out = 0
        self.bytes_out = 0
        # Dispatch rate limits: the topic attaches its limits (rate_limit.TopicRateLimits.attach).
        self.dispatch_gate = DispatchGate()
        # Message TTL expiry: Pulsar's msgRateExpired, totalMsgExpired, lastExpireTimestamp (expiry.py).
        self.expiry = ExpiryStats()
        # A read-compacted consumer's view (compaction/reads.py, WIRE.md R46b): set when one joins.
        self.compacted: CompactedReads | None = None
        # maxUnackedMessagesPerConsumer / PerSubscription (0: none), for Shared and Key_Shared
        # only (as in Pulsar: the other types re-read from the cursor and need no such bound);
        # ``blocked_on_unacked``: the whole subscription gets nothing until acks halve the count.
        self.max_unacked_per_consumer = 0
        self.max_unacked_per_subscription = 0
        self.blocked_on_unacked = False
        self._unacked = UnackedCount()  # the consumers' unacked messages, kept by them

    @property
    def sub_type(self) -> str:
        return self.dispatcher.sub_type

    # ------------------------------------------------------------------ consumers
    def set_unacked_limits(self, per_consumer: int, per_subscription: int) -> None:
        """The broker's (or a policy's) unacked-message limits, applied from the next dispatch."""
        self.max_unacked_per_consumer = per_consumer
        self.max_unacked_per_subscription = per_subscription
        for consumer in self.dispatcher.consumers:
            consumer.max_unacked = self._consumer_limit()
        self._after_acks()

    def _consumer_limit(self) -> int:
        return self.max_unacked_per_consumer if self._limits_apply() else 0

    def _after_acks(self) -> None:
        """Acknowledgements (or returns) lowered the unacked counts: lift the blocks they lifted
        (Pulsar's rule: at half the limit) and dispatch again if any was lifted."""
        lifted = False
        for consumer in self.dispatcher.consumers:
            if consumer.check_unblocked():
                lifted = True
                if self.dispatcher.by_key:
                    self._unpark(consumer)
        if self.blocked_on_unacked and (
            not self._limits_apply()
            or self.max_unacked_per_subscription <= 0
            or self.unacked_messages() <= self.max_unacked_per_subscription // 2
        ):
            self.blocked_on_unacked = False
            lifted = True
        if lifted:
            self.schedule()

    def add_consumer(self, consumer: ServerConsumer, sub_type: str) -> None:
        check_joinable(self.dispatcher, sub_type, self.name)
        if not self.dispatcher.consumers and sub_type != self.dispatcher.sub_type:
            self._change_type(sub_type)
        consumer.max_unacked = self._consumer_limit()
        had_consumers = bool(self.dispatcher.consumers)
        previous_active = self.dispatcher.active_consumer
        self.dispatcher.add(consumer)
        consumer.unacked.share(self._unacked)
        if self.dispatcher.by_key:
            if (
                had_consumers
                and not consumer.allow_out_of_order
                and self.ml.next_position(self.cursor.mark_delete) < self.cursor.read_position
            ):
                self.recently_joined[consumer] = self.cursor.read_position
            self._unpark_all()  # key ownership moved
        self._hand_over(previous_active)
        self.schedule()

    def remove_consumer(self, consumer: ServerConsumer) -> None:
        previous_active = self.dispatcher.active_consumer
        self.dispatcher.remove(consumer)
        self.recently_joined.pop(consumer, None)
        for waiters in self._drain_waiters.values():
            waiters.discard(consumer)
        self._return_unacked(consumer, list(consumer.unacked))
        consumer.unacked.share(None)  # what it still holds (not this subscription's to return) stops counting
        if self.dispatcher.by_key:
            self._unpark_all()
        self._hand_over(previous_active)
        self._after_acks()
        if not self.durable and not self.dispatcher.consumers and self.on_last_consumer is not None:
            self.on_last_consumer(self)
            return
        self.schedule()

    def _change_type(self, sub_type: str) -> None:
        """The first consumer after all left asks for another type: start that dispatcher over."""
        self.dispatcher = dispatcher_for(sub_type, self.partition_index)
        self._epoch += 1
        pending_delayed = self.delayed is not None and len(self.delayed) > 0
        if self.delayed is not None:
            self.delayed.clear()
        self._key_hash_of.clear()
        self._replay_by_hash.clear()
        self._parked.clear()
        self._parked_under.clear()
        self._held.clear()
        self._drain_waiters.clear()
        self.recently_joined.clear()
        for pos in self.redeliver:
            self.redeliver[pos] = None
        self._ready = list(self.redeliver)
        heapq.heapify(self._ready)
        if pending_delayed:
            # Delayed entries are only in the tracker: read everything unacknowledged again.
            self.cursor.read_position = self.ml.next_position(self.cursor.mark_delete)

    def _hand_over(self, previous_active: ServerConsumer | None) -> None:
        """Failover: the previous active consumer's unacked entries go to the new active one."""
        active = self.dispatcher.active_consumer
        if (
            previous_active is not None
            and previous_active is not active
            and previous_active in self.dispatcher.consumers
            and previous_active.unacked
        ):
            self._return_unacked(previous_active, list(previous_active.unacked), count=False)

    def flow(self, consumer: ServerConsumer, permits: int) -> None:
        could = consumer.can_take
        consumer.permits += permits
        if self.dispatcher.by_key and not could and consumer.can_take:
            self._unpark(consumer)
        self.schedule()

    def _return_unacked(self, consumer: ServerConsumer, positions: list[Position], *, count: bool = True) -> None:
        for pos in positions:
            if pos in consumer.unacked and self.owner.get(pos) is consumer:
                self._detach(pos)
                if not self.cursor.is_acked(pos):
                    self._replay_add(pos)
                    if count:
                        self.redelivery_counts[pos] = self.redelivery_counts.get(pos, 0) + 1
            else:
                consumer.unacked.pop(pos, None)

    def negative_ack(self, consumer: ServerConsumer, positions: list[Position] | None) -> None:
        self._return_unacked(consumer, positions if positions is not None else list(consumer.unacked))
        self._after_acks()
        self.schedule()

    # ------------------------------------------------------------------ acks
    def ack(
        self,
        consumer: ServerConsumer,
        kind: str,
        positions: list[Position],
        batch_acks: Sequence[BatchAck] = (),
    ) -> asyncio.Future[None]:
        """Acknowledge entries (and, by batch index, some messages of batched entries); the
        future resolves once the cursor has made it durable."""
        if kind == c.ACK_CUMULATIVE:
            if self.dispatcher.sub_type in (c.SUB_SHARED, c.SUB_KEY_SHARED):
                raise InvalidCommand(
                    f"cumulative acknowledgement is not allowed on a {self.dispatcher.sub_type} subscription"
                )
            if len(positions) != 1:
                raise InvalidCommand("a cumulative ack carries exactly one position")
        self._batch_acks(batch_acks)
        if kind == c.ACK_CUMULATIVE:
            upto = positions[0]
            for pos in [p for p in self.owner if p <= upto]:
                self._forget(pos)
            for pos in [p for p in consumer.unacked if p <= upto]:
                consumer.unacked.pop(pos, None)
            for pos in [p for p in self.redeliver if p <= upto]:
                self._replay_drop(pos)
            fut = self.cursor.ack_cumulative(upto)
        else:
            for pos in positions:
                self._forget(pos)
                consumer.unacked.pop(pos, None)
                self._replay_drop(pos)
            fut = self.cursor.ack(positions)
        if self.compacted is not None:
            self.compacted.after_ack()  # what compaction removed counts as consumed
        self._check_recently_joined()
        self._after_acks()
        return fut

    def _batch_acks(self, batch_acks: Sequence[BatchAck]) -> None:
        for pos, count, indexes in batch_acks:
            if self.cursor.ack_batch_indexes(pos, count, indexes):
                self._forget(pos)
                self._replay_drop(pos)
                continue
            owner = self.owner.get(pos)
            if owner is not None and pos in owner.unacked:
                acked = self.cursor.acked_indexes(pos)
                owner.unacked[pos] = max(0, count - (len(acked) if acked else 0))

    def ack_positions(self, positions: list[Position]) -> asyncio.Future[None]:
        """Acknowledge entries with no consumer involved (admin skip or expiry)."""
        for pos in positions:
            self._forget(pos)
            self._replay_drop(pos)
        if self.delayed is not None:
            self.delayed.remove(positions)
        fut = self.cursor.ack(positions)
        self._check_recently_joined()
        self._after_acks()
        return fut

    def _forget(self, pos: Position) -> None:
        """``pos`` is acknowledged: drop everything the subscription tracked about it."""
        self._detach(pos)
        self.redelivery_counts.pop(pos, None)
        self._key_hash_of.pop(pos, None)

    def _detach(self, pos: Position) -> ServerConsumer | None:
        """Take ``pos`` from the consumer it was delivered to (if any)."""
        owner = self.owner.pop(pos, None)
        if owner is None:
            return None
        owner.unacked.pop(pos, None)
        h = self._key_hash_of.get(pos)
        if h is not None:
            holders = self._held.get(h)
            if holders is not None and owner in holders:
                holders[owner] -= 1
                if holders[owner] <= 0:
                    del holders[owner]
                    if not holders:
                        del self._held[h]
                    waiters = self._drain_waiters.pop(h, None)
                    if waiters:
                        for waiter in waiters:
                            self._unpark(waiter)
        return owner

    def _check_recently_joined(self) -> None:
        """Release recently joined consumers once everything before their join point is acked."""
        if not self.recently_joined:
            return
        first_unacked = self.ml.next_position(self.cursor.mark_delete)
        for consumer, joined_at in list(self.recently_joined.items()):
            if joined_at <= first_unacked:
                del self.recently_joined[consumer]
                self._unpark(consumer)

    # ------------------------------------------------------------------ seek
    async def reset(self, mark_delete: Position) -> None:
        """Seek: everything after ``mark_delete`` is unacknowledged again and is dispatched anew.

        Pulsar disconnects the consumers; here they stay connected, but the broker forgets what it
        gave them (the client clears its queue once the seek succeeds)."""
        self._epoch += 1
        for consumer in self.dispatcher.consumers:
            consumer.unacked.clear()
        self.owner.clear()
        self.redelivery_counts.clear()
        self.redeliver.clear()
        self._ready.clear()
        self._key_hash_of.clear()
        self._replay_by_hash.clear()
        self._parked.clear()
        self._parked_under.clear()
        self._held.clear()
        self._drain_waiters.clear()
        self.recently_joined.clear()
        if self.delayed is not None:
            self.delayed.clear()
        await self.cursor.reset(mark_delete)
        if self.compacted is not None:
            self.compacted.rewound(mark_delete)
        self.schedule()

    # ------------------------------------------------------------------ stats and lifecycle
    def stats(self) -> dict[str, Any]:
        dispatcher = self.dispatcher
        active = dispatcher.active_consumer
        out: dict[str, Any] = {
            "type": dispatcher.sub_type,
            "msgBacklog": self.cursor.backlog,
            "unackedMessages": self.unacked_messages(),
            "blockedSubscriptionOnUnackedMsgs": self.blocked_on_unacked,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "markDeletePosition": str(self.cursor.mark_delete),
            "readPosition": str(self.cursor.read_position),
            "isDurable": self.durable,
            "msgDelayed": len(self.delayed) if self.delayed is not None else 0,
            **self.dispatch_gate.stats(),
            **self.expiry.stats(),
            "activeConsumerName": active.name if active is not None else None,
            "consumersAfterMarkDeletePosition": {cons.name: str(pos) for cons, pos in self.recently_joined.items()},
            "consumers": dispatcher.consumers_stats(),
        }
        if isinstance(dispatcher, KeySharedDispatcher):
            out["keySharedMode"] = dispatcher.mode
        return out

    def close(self) -> None:
        self._closed = True
        self._unlisten()
        self.dispatch_gate.close()
        if self._task is not None:
            self._task.cancel()
        if self.delayed is not None:
            self.delayed.close()
