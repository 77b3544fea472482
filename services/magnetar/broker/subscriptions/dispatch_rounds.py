"""The dispatch rounds of a subscription: read entries, and hand each to the consumer it goes to.

A round (``_dispatch_round``) takes replay-set entries first, then reads new ones from the cursor's
read position, as many as the consumers' permits allow (up to ``READ_BATCH``, within the dispatch
rate limits); each entry goes to the consumer the dispatcher picks (by key for Key_Shared, through
``replay_set``), or to the ``DelayedDeliveryTracker`` while its ``meta.dt`` is in the future
(Shared and Key_Shared, WIRE.md R20e: due entries come back through the replay set).

Rounds run in a task (``_dispatch_loop``), which can await reads from the bookies, except for the
common case of a consumer at the tail: a new entry is delivered from the managed ledger's cache in
the callback that made it durable (``on_added``), after the producers' receipts.

A base class of ``Subscription`` (``subscription.py``), whose initializer sets the state declared
here.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from magnetar import write_batch
from magnetar.broker.policies.rate_limit import DispatchGate
from magnetar.broker.subscriptions.consumer import ServerConsumer, UnackedCount
from magnetar.broker.subscriptions.delayed_delivery import DelayedDeliveryTracker, now_ms
from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash
from magnetar.broker.subscriptions.replay_set import ReplaySet
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol.entry import EntryMeta, decode_entry

log = logging.getLogger(__name__)

# Entries read per round of the dispatch loop.
READ_BATCH = 100
# Key_Shared: no new entries are read while this many wait in the replay set (Pulsar 4's
# keySharedLookAheadMsgInReplayThresholdPerSubscription).
LOOKAHEAD_LIMIT = 20_000
# Due delayed entries are moved into the replay set only while it holds fewer than this many, so
# that a mass of due messages waits in the (bounded) tracker rather than in the replay set.
DELAYED_RELEASE_LIMIT = 1_000


class CompactedReads(Protocol):
    """A read-compacted subscription's view (implemented by compaction/reads.py, WIRE.md R46b)."""

    def covers(self, pos: Position) -> bool: ...
    async def read(self, start: Position, budget: int) -> tuple[list[tuple[Position, bytes]], Position]: ...
    async def read_positions(self, positions: Sequence[Position]) -> list[tuple[Position, bytes]]: ...
    def after_ack(self) -> None: ...
    def rewound(self, mark_delete: Position) -> None: ...


class DispatchRounds(ReplaySet):
    """Dispatch on a subscription: scheduling rounds, reading, delivering."""

    topic_name: str
    name: str
    ml: ManagedLedger
    cursor: ManagedCursor
    owner: dict[Position, ServerConsumer]
    redelivery_counts: dict[Position, int]
    delayed: DelayedDeliveryTracker | None
    compacted: CompactedReads | None
    dispatch_gate: DispatchGate
    blocked_on_unacked: bool
    max_unacked_per_subscription: int
    msg_out: int
    bytes_out: int
    _unacked: UnackedCount
    _epoch: int
    _task: asyncio.Task[None] | None
    _again: bool
    _dispatch_deferred: bool
    _closed: bool

    def _limits_apply(self) -> bool:
        return self.dispatcher.sub_type in (c.SUB_SHARED, c.SUB_KEY_SHARED)

    def unacked_messages(self) -> int:
        return self._unacked.messages

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
