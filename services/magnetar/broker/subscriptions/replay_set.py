"""The replay set of a subscription, and where Key_Shared parks what a consumer cannot take yet.

Entries to deliver again (returned by a consumer that left or negatively acknowledged them, or due
delayed entries) wait in the replay set (``redeliver``), dispatched before new ones, in position
order (``_ready`` is the heap of those to try).

Key_Shared (R20b): an entry whose key-hash owner cannot take it now is *parked* under that
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
Parked entries count against ``LOOKAHEAD_LIMIT`` (``dispatch_rounds``): past it no new entries
are read.

A base class of ``Subscription`` (``subscription.py``), whose initializer sets the state declared
here; ``dispatch_rounds.DispatchRounds`` reads entries through it.
"""

from __future__ import annotations

import heapq

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers import Dispatcher
from magnetar.managed_ledger import Position


class ReplaySet:
    """The replay set and Key_Shared's parked entries and routing, on a subscription."""

    dispatcher: Dispatcher
    # The replay set: position -> its key hash when known (Key_Shared), else None.
    redeliver: dict[Position, int | None]
    recently_joined: dict[ServerConsumer, Position]
    _ready: list[Position]  # heap of replay positions to try (may hold stale ones)
    _key_hash_of: dict[Position, int]
    _replay_by_hash: dict[int, list[Position]]  # heaps, may hold stale positions
    _parked: dict[ServerConsumer | None, list[Position]]
    _parked_under: dict[Position, ServerConsumer | None]
    _held: dict[int, dict[ServerConsumer, int]]
    _drain_waiters: dict[int, set[ServerConsumer]]

    def schedule(self) -> None:
        """Ask for a dispatch round (``DispatchRounds.schedule``)."""
        raise NotImplementedError

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
