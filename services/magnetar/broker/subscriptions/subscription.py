"""A subscription: a cursor, its consumers and the loop that dispatches entries to them.

Dispatch reads entries from the cursor's read position, skips ones already acknowledged, and hands
each whole entry (a producer batch) to the consumer the dispatcher picks, spending as many permits
as the entry holds messages not yet acknowledged by batch index — Pulsar's flow control. Entries
delivered but unacknowledged stay attached to their consumer; when it disconnects or negatively
acknowledges them they go back to the *replay set* (``redeliver``) with their redelivery count up.
Replayed entries are dispatched before new ones, in position order.

Dispatch runs in a task (``_dispatch_loop``), which can await reads from the bookies, except for
the common case of a consumer at the tail: a new entry is delivered from the managed ledger's cache
in the callback that made it durable (``on_added``), after the producers' receipts.

The subscription types differ in who gets an entry (``dispatchers``) and in three rules kept here:

* Failover: when the active consumer changes, the entries the previous one still had unacked go
  to the replay set (Pulsar rewinds the cursor), so the new active consumer gets them.
* Delayed delivery (Shared and Key_Shared, WIRE.md R20e): an entry whose ``meta.dt`` is in the
  future goes to the ``DelayedDeliveryTracker``; due entries come back through the replay set.
* Key_Shared (R20b): an entry whose key-hash owner cannot take it now is *parked* under that
  consumer in the replay set, and dispatch goes on with other keys (a consumer without permits
  blocks only its own keys). Parked entries go back to the ready queue when the reason ends: the
  consumer gets permits, the consumers change (ownership moves), a recently joined consumer is
  released, or a key drains from its previous owner. Per-key order holds because an entry is
  dispatched only when no earlier entry with its hash waits in the replay set; a later one waits
  wherever that earlier one waits. Two rules protect order when keys change hands:
  - recently joined consumers (Pulsar's rule, R20b): a consumer that joins a subscription with
    consumers and unacknowledged entries gets nothing at or after the read position of the moment
    it joined until every entry before that position is acknowledged (``allow_out_of_order``
    lifts this);
  - draining: an entry is not sent to a consumer while another consumer still holds unacked
    entries with the same hash (Pulsar 4's draining hashes); it covers entries that were waiting
    in the replay set when the key moved, which the first rule lets through.
  Parked entries count against ``LOOKAHEAD_LIMIT``: past it no new entries are read.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from magnetar import write_batch
from magnetar.broker.policies.expiry_stats import ExpiryStats
from magnetar.broker.policies.rate_limit import DispatchGate
from magnetar.broker.subscriptions.consumer import ServerConsumer, UnackedCount
from magnetar.broker.subscriptions.delayed_delivery import DelayedDeliveryTracker, now_ms
from magnetar.broker.subscriptions.dispatchers import Dispatcher, check_joinable, dispatcher_for
from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash
from magnetar.broker.subscriptions.dispatchers.key_shared import KeySharedDispatcher
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol.entry import EntryMeta, decode_entry
from magnetar.protocol.errors import InvalidCommand, InvalidTopicName
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

# Entries read per round of the dispatch loop.
READ_BATCH = 100
# Key_Shared: no new entries are read while this many wait in the replay set (Pulsar 4's
# keySharedLookAheadMsgInReplayThresholdPerSubscription).
LOOKAHEAD_LIMIT = 20_000
# Due delayed entries are moved into the replay set only while it holds fewer than this many, so
# that a mass of due messages waits in the (bounded) tracker rather than in the replay set.
DELAYED_RELEASE_LIMIT = 1_000

BatchAck = tuple[Position, int, Sequence[int]]


class CompactedReads(Protocol):
    """A read-compacted subscription's view (implemented by compaction/reads.py, WIRE.md R46b)."""

    def covers(self, pos: Position) -> bool: ...
    async def read(self, start: Position, budget: int) -> tuple[list[tuple[Position, bytes]], Position]: ...
    async def read_positions(self, positions: Sequence[Position]) -> list[tuple[Position, bytes]]: ...
    def after_ack(self) -> None: ...
    def rewound(self, mark_delete: Position) -> None: ...


def _partition_index(topic_name: str) -> int:
    try:
        return TopicName.parse(topic_name).partition_index
    except InvalidTopicName:
        return -1


class Subscription:
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
        # Key_Shared state (see the module docstring).
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

    def _limits_apply(self) -> bool:
        return self.dispatcher.sub_type in (c.SUB_SHARED, c.SUB_KEY_SHARED)

    def _consumer_limit(self) -> int:
        return self.max_unacked_per_consumer if self._limits_apply() else 0

    def unacked_messages(self) -> int:
        return self._unacked.messages

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

    # ------------------------------------------------------------------ replay set
    def _replay_add(self, pos: Position) -> None:
        if pos in self.redeliver:
            return
        h = self._key_hash_of.get(pos) if self.dispatcher.by_key else None
        self.redeliver[pos] = h
        if h is not None:
            heapq.heappush(self._replay_by_hash.setdefault(h, []), pos)
        heapq.heappush(self._ready, pos)

    def _replay_drop(self, pos: Position) -> None:
        self.redeliver.pop(pos, None)
        self._parked_under.pop(pos, None)

    def _learn_hash(self, pos: Position, h: int) -> None:
        self._key_hash_of[pos] = h
        if pos in self.redeliver and self.redeliver[pos] is None:
            self.redeliver[pos] = h
            heapq.heappush(self._replay_by_hash.setdefault(h, []), pos)

    def _earliest_waiting(self, h: int) -> Position | None:
        """The earliest replay-set position with key hash ``h``."""
        heap = self._replay_by_hash.get(h)
        while heap:
            head = heap[0]
            if self.redeliver.get(head, -1) == h:
                return head
            heapq.heappop(heap)
        if heap is not None:
            del self._replay_by_hash[h]
        return None

    def _park(self, pos: Position, h: int, consumer: ServerConsumer | None) -> None:
        if pos not in self.redeliver:
            self.redeliver[pos] = h
            heapq.heappush(self._replay_by_hash.setdefault(h, []), pos)
        self._parked.setdefault(consumer, []).append(pos)
        self._parked_under[pos] = consumer

    def _unpark(self, consumer: ServerConsumer | None) -> None:
        positions = self._parked.pop(consumer, None)
        if not positions:
            return
        for pos in positions:
            if pos in self._parked_under and self._parked_under[pos] is consumer:
                del self._parked_under[pos]
                if pos in self.redeliver:
                    heapq.heappush(self._ready, pos)
        self.schedule()

    def _unpark_all(self) -> None:
        for consumer in list(self._parked):
            self._unpark(consumer)

    def _take_ready(self, budget: int) -> list[Position]:
        """Up to ``budget`` replay positions to read now, in position order (Key_Shared entries
        whose hash is known and whose consumer cannot take them are parked without a read)."""
        out: list[Position] = []
        deferred: list[Position] = []
        ready = self._ready
        while ready and len(out) < budget:
            pos = heapq.heappop(ready)
            if pos not in self.redeliver or pos in self._parked_under or (out and out[-1] == pos):
                continue
            h = self.redeliver[pos]
            if h is not None and self._route_key(pos, h, deferred) is None:
                continue
            out.append(pos)
        for pos in deferred:
            heapq.heappush(ready, pos)
        return out

    # ------------------------------------------------------------------ Key_Shared routing
    def _route_key(self, pos: Position, h: int, deferred: list[Position]) -> ServerConsumer | None:
        """The consumer that takes ``pos`` now, or None after parking it where it must wait
        (``deferred`` collects entries to put back in the ready queue once the caller is done)."""
        earliest = self._earliest_waiting(h)
        if earliest is not None and earliest < pos:
            # Keep key order: wait wherever the earlier entry of this key waits.
            if earliest in self._parked_under:
                self._park(pos, h, self._parked_under[earliest])
            else:
                if pos not in self.redeliver:
                    self.redeliver[pos] = h
                    heapq.heappush(self._replay_by_hash.setdefault(h, []), pos)
                deferred.append(pos)
            return None
        consumer = self.dispatcher.select(h)
        if consumer is None or not consumer.can_take:
            self._park(pos, h, consumer)
            return None
        joined_at = self.recently_joined.get(consumer)
        if joined_at is not None and pos >= joined_at:
            self._park(pos, h, consumer)
            return None
        holders = self._held.get(h)
        if holders and not consumer.allow_out_of_order and any(other is not consumer for other in holders):
            self._drain_waiters.setdefault(h, set()).add(consumer)
            self._park(pos, h, consumer)
            return None
        return consumer

    # ------------------------------------------------------------------ dispatch
    def _tracker(self) -> DelayedDeliveryTracker:
        if self.delayed is None:
            self.delayed = DelayedDeliveryTracker(self.schedule)
        return self.delayed

    def schedule(self) -> None:
        """Ask for a dispatch round; coalesces with one already running."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        if self.blocked_on_unacked or not self.dispatcher.has_permits():
            return
        if not (
            self._ready
            or (self._has_more() and len(self.redeliver) < LOOKAHEAD_LIMIT)
            or (self.delayed is not None and self.delayed.has_due())
        ):
            return
        self._task = asyncio.get_running_loop().create_task(self._dispatch_loop())

    def on_added(self) -> None:
        """The managed ledger's listener: an entry became durable.

        A consumer reading the tail gets it in this very callback, from the ledger's cache, rather
        than from a dispatch task one loop turn later (and its flush one more turn after that).
        Inside the bookie's answer the dispatch is deferred to the end of the callback's
        ``write_batch`` scope: it runs right after the producers' receipts are flushed, once for
        all the entries of the group commit. Anything else (replays pending, a dispatch running,
        a delayed or compacted view, a read that needs the bookies) takes the usual round.
        """
        if self._dispatch_deferred:
            return
        if write_batch.defer(self._dispatch_added):
            # In the bookie's answer: deliver once the receipts written so far have gone out (the
            # producer's acknowledgement does not wait for the dispatch), and once for all of the
            # entries that one group commit made durable.
            self._dispatch_deferred = True
            return
        self._dispatch_added()

    def _dispatch_added(self) -> None:
        self._dispatch_deferred = False
        if self._closed:  # closed between the add and the end of its callback
            return
        if not self._dispatch_from_cache():
            self.schedule()

    def _dispatch_from_cache(self) -> bool:
        """``_dispatch_round``'s read of new entries, without a task, when the cache can answer
        all of it; False when the usual round must do it."""
        if (
            (self._task is not None and not self._task.done())
            or self._ready
            or self.delayed is not None
            or self.compacted is not None
            or self.blocked_on_unacked
            or not self.dispatcher.has_permits()
            or len(self.redeliver) >= LOOKAHEAD_LIMIT
            or not self.cursor.has_more()
        ):
            return False
        budget = self._read_budget()
        if budget <= 0:
            return True  # over a dispatch rate: the gate calls schedule() when it allows again
        entries = self.ml.read_cached(self.cursor.read_position, budget)
        if not entries:
            return False
        self._dispatch_new(entries, self.ml.next_position(entries[-1][0]))
        if self._has_more():  # more than one read's worth: the round carries on
            self.schedule()
        return True

    def _read_budget(self) -> int:
        """How many entries one dispatch may read: the permits, up to ``READ_BATCH``, within the
        dispatch rate (0: over it; the gate then calls ``schedule()`` when it allows again)."""
        return self.dispatch_gate.allow(max(1, min(READ_BATCH, self.dispatcher.total_permits())), self.schedule)

    def _dispatch_new(self, entries: list[tuple[Position, bytes]], after: Position) -> None:
        """Move the read position past new entries read at it (``after``), and dispatch them."""
        if after > self.cursor.read_position:
            self.cursor.read_position = after
        if entries:
            self._dispatch_entries(entries, replay=False)

    async def _dispatch_loop(self) -> None:
        try:
            while True:
                self._again = False
                progressed = await self._dispatch_round()
                if not progressed and not self._again:
                    return
        except Exception:
            log.exception("dispatch failed on %s/%s", self.topic_name, self.name)
            # Entries taken for that round may be neither ready nor parked: make every waiting,
            # unparked entry ready again so the next round (on the next event) finds them.
            self._ready = [pos for pos in self.redeliver if pos not in self._parked_under]
            heapq.heapify(self._ready)

    def _release_delayed(self) -> None:
        tracker = self.delayed
        room = DELAYED_RELEASE_LIMIT - len(self.redeliver)
        if tracker is None or room <= 0 or not tracker.has_due():
            return
        for pos in tracker.pop_due(room):
            self._replay_add(pos)

    async def _dispatch_round(self) -> bool:
        if self.blocked_on_unacked or not self.dispatcher.has_permits():
            return False
        epoch = self._epoch
        self._release_delayed()
        budget = self._read_budget()
        if budget <= 0:
            return False  # over a dispatch rate: the gate calls schedule() when it allows again
        taken = self._take_ready(budget)
        if taken:
            try:
                entries = await self._read_positions(taken)
            except BaseException:
                if epoch == self._epoch:
                    for pos in taken:
                        heapq.heappush(self._ready, pos)
                raise
            if epoch == self._epoch:
                read = {pos for pos, _ in entries}
                for pos in taken:
                    if pos not in read:  # trimmed away: nothing left to deliver
                        self._replay_drop(pos)
                self._dispatch_entries(entries, replay=True)
            return True
        if len(self.redeliver) >= LOOKAHEAD_LIMIT or not self._has_more():
            return False
        if self.delayed is not None:
            await self.delayed.room()
            if epoch != self._epoch:
                return True
        start = self.cursor.read_position
        if self.compacted is not None and self.compacted.covers(start):
            entries, after = await self.compacted.read(start, budget)
        else:
            entries = await self.ml.read_entries(start, budget)
            after = self.ml.next_position(entries[-1][0]) if entries else start
        if epoch != self._epoch:
            return True
        self._dispatch_new(entries, after)
        return bool(entries) or after > start

    def _has_more(self) -> bool:
        compacted = self.compacted
        return self.cursor.has_more() or (compacted is not None and compacted.covers(self.cursor.read_position))

    async def _read_positions(self, positions: list[Position]) -> list[tuple[Position, bytes]]:
        """Read sorted ``positions``, one read per run of consecutive entries of a ledger."""
        if self.compacted is not None and positions and self.compacted.covers(positions[0]):
            return await self.compacted.read_positions(positions)
        out: list[tuple[Position, bytes]] = []
        i = 0
        while i < len(positions):
            j = i
            while (
                j + 1 < len(positions)
                and positions[j + 1].ledger_id == positions[i].ledger_id
                and positions[j + 1].entry_id == positions[j].entry_id + 1
            ):
                j += 1
            wanted = set(positions[i : j + 1])
            got = await self.ml.read_entries(positions[i], j - i + 1)
            out.extend((pos, data) for pos, data in got if pos in wanted)
            i = j + 1
        return out

    def _dispatch_entries(self, entries: list[tuple[Position, bytes]], *, replay: bool) -> None:
        deferred: list[Position] = []
        try:
            self._dispatch_each(entries, replay, deferred)
        finally:
            for pos in deferred:
                heapq.heappush(self._ready, pos)

    def _dispatch_each(self, entries: list[tuple[Position, bytes]], replay: bool, deferred: list[Position]) -> None:
        dispatcher = self.dispatcher
        now = now_ms()
        for i, (pos, data) in enumerate(entries):
            if self.blocked_on_unacked:
                self._put_back(entries, i, replay, pos)
                return
            if replay and (pos not in self.redeliver or pos in self._parked_under):
                continue  # acknowledged, or parked again, while it was being read
            if self.cursor.is_acked(pos) or pos in self.owner:
                self._replay_drop(pos)
                continue
            meta, payload = decode_entry(data)
            if dispatcher.delays_messages:
                deliver_at = meta.get("dt")
                if deliver_at is not None and int(deliver_at) > now:
                    self._replay_drop(pos)
                    self._key_hash_of.pop(pos, None)
                    self._tracker().add(pos, int(deliver_at))
                    continue
            consumer: ServerConsumer | None
            if dispatcher.by_key:
                h = self._key_hash_of.get(pos)
                if h is None:
                    h = key_hash(meta.get("k") or "")
                    self._learn_hash(pos, h)
                consumer = self._route_key(pos, h, deferred)
                if consumer is None:
                    continue
            else:
                consumer = dispatcher.pick()
                if consumer is None:
                    # Out of permits mid-batch: the rest waits for the next round.
                    self._put_back(entries, i, replay, pos)
                    return
            self._replay_drop(pos)
            self._deliver(consumer, pos, meta, payload)

    def _put_back(self, entries: list[tuple[Position, bytes]], i: int, replay: bool, pos: Position) -> None:
        """Stop a round at ``entries[i]`` (``pos``): what was not dispatched waits for the next."""
        if replay:
            for later, _ in entries[i:]:
                if later in self.redeliver:
                    heapq.heappush(self._ready, later)
        elif pos < self.cursor.read_position:
            self.cursor.read_position = pos

    def _deliver(self, consumer: ServerConsumer, pos: Position, meta: EntryMeta, payload: bytes) -> None:
        count = int(meta.get("n", 1))
        acked = self.cursor.acked_indexes(pos)
        removed = cast(Mapping[str, Any], meta).get("cx")  # indexes compaction removed (R46c)
        if removed:
            acked = frozenset(removed).union(acked or ())
        self.owner[pos] = consumer
        consumer.deliver(pos, meta, payload, count, self.redelivery_counts.get(pos, 0), acked)
        h = self._key_hash_of.get(pos)
        if h is not None and self.dispatcher.by_key:
            holders = self._held.setdefault(h, {})
            holders[consumer] = holders.get(consumer, 0) + 1
        limit = self.max_unacked_per_subscription
        if limit > 0 and self._limits_apply() and self.unacked_messages() >= limit:
            self.blocked_on_unacked = True
        self.msg_out += count - (len(acked) if acked else 0)
        self.bytes_out += len(payload)
        self.dispatch_gate.consume(count - (len(acked) if acked else 0), len(payload))

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
