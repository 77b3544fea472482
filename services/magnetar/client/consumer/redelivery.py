"""When to ask the broker to redeliver: negative acks and ack timeouts. Pure, loop-free, unit-tested.

Both are Pulsar's client-side trackers, per partition consumer and per entry (the broker redelivers
entries; a batch comes back whole, minus the indexes already acknowledged when batch-index acks
are on):

- ``NegativeAckTracker`` (Pulsar's ``NegativeAcksTracker``): ``negative_acknowledge`` does not
  redeliver at once but after ``negative_ack_redelivery_delay_ms``, or after the back-off's delay
  for the message's redelivery count. Nacks that fall due together leave in one ``redeliver``.
- ``AckTimeoutTracker`` (Pulsar's ``UnAckedMessageTracker``): an entry handed to the application
  and not acknowledged within ``unacked_messages_timeout_ms`` is redelivered; with a back-off,
  the back-off's delay for the redelivery count is added to the timeout (Java's
  ``ackTimeoutRedeliveryBackoff``). The owner checks it every ``ack_timeout_tick_time_ms``.

Times are the caller's (``loop.time()`` seconds), so tests drive them without sleeping. Each
tracker is a dict of deadlines plus a heap for "what is due"; an entry re-added or removed leaves
a stale heap item behind, which ``due`` skips (lazy deletion keeps add/remove O(log n) / O(1)).
"""

from __future__ import annotations

import heapq

from magnetar.client.consumer.acks import Position
from magnetar.client.options import RedeliveryBackoff


class _Deadlines:
    """Positions with a deadline each; ``due(now)`` takes out those whose deadline has passed."""

    __slots__ = ("_deadline", "_heap")

    def __init__(self) -> None:
        self._deadline: dict[Position, float] = {}
        self._heap: list[tuple[float, Position]] = []

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, position: object) -> bool:
        return position in self._deadline

    def positions(self) -> list[Position]:
        return list(self._deadline)

    def _put(self, position: Position, deadline: float) -> None:
        self._deadline[position] = deadline
        heapq.heappush(self._heap, (deadline, position))

    def discard(self, position: Position) -> None:
        self._deadline.pop(position, None)
        if not self._deadline:
            self._heap.clear()

    def discard_up_to(self, position: Position) -> None:
        """Forget every position at or before ``position`` (a cumulative ack)."""
        for p in [p for p in self._deadline if p <= position]:
            del self._deadline[p]
        if not self._deadline:
            self._heap.clear()

    def clear(self) -> None:
        self._deadline.clear()
        self._heap.clear()

    def next_deadline(self) -> float | None:
        """The earliest live deadline (stale heap items are dropped on the way)."""
        heap, live = self._heap, self._deadline
        while heap:
            deadline, position = heap[0]
            if live.get(position) == deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def due(self, now: float) -> list[Position]:
        """Take out and return, in position order, every position whose deadline is ``<= now``."""
        heap, live = self._heap, self._deadline
        out: list[Position] = []
        while heap and heap[0][0] <= now:
            deadline, position = heapq.heappop(heap)
            if live.get(position) == deadline:
                del live[position]
                out.append(position)
        out.sort()
        return out


class NegativeAckTracker(_Deadlines):
    """Negatively acknowledged entries and when each is due for redelivery."""

    __slots__ = ("_backoff", "_delay")

    def __init__(self, delay_ms: int, backoff: RedeliveryBackoff | None = None) -> None:
        super().__init__()
        self._delay = delay_ms / 1000.0
        self._backoff = backoff

    def delay(self, redelivery_count: int) -> float:
        """Seconds between a nack and its redelivery, for a message delivered ``redelivery_count`` times before."""
        if self._backoff is not None:
            return self._backoff.next(redelivery_count) / 1000.0
        return self._delay

    @property
    def grouping(self) -> float:
        """How long the owner lets due nacks gather before sending them (never before they are due).

        A tenth of the shortest delay, at most 50 ms: nacks made together leave in one frame, and
        a redelivery is at most a little late, as Pulsar's tick (a third of the delay) allows.
        """
        shortest = self.delay(0)
        return min(0.05, shortest / 10)

    def add(self, position: Position, redelivery_count: int, now: float) -> float:
        """Nack ``position``; a second nack replaces the first one's time. Returns the deadline."""
        deadline = now + self.delay(redelivery_count)
        self._put(position, deadline)
        return deadline


class AckTimeoutTracker(_Deadlines):
    """Entries handed to the application and not yet acknowledged, with their ack deadline."""

    __slots__ = ("_backoff", "_timeout")

    def __init__(self, timeout_ms: int, backoff: RedeliveryBackoff | None = None) -> None:
        super().__init__()
        self._timeout = timeout_ms / 1000.0
        self._backoff = backoff

    def add(self, position: Position, redelivery_count: int, now: float) -> None:
        """Start the clock for ``position`` (an entry already tracked keeps its first deadline:
        the timeout counts from the first of its messages handed out)."""
        if position in self._deadline:
            return
        timeout = self._timeout
        if self._backoff is not None:
            timeout += self._backoff.next(redelivery_count) / 1000.0
        self._put(position, now + timeout)
