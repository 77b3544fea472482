"""Consumer-side bookkeeping for acknowledgements and flow permits. Pure, loop-free, unit-tested.

The broker tracks whole entries, but one entry may hold a batch of many messages. As Pulsar's
batch-message acker does, the client keeps, per batched entry, the indexes not yet acknowledged,
and tells the broker the entry is acknowledged only when the last of them is. (Acking an entry
early would lose the rest of its messages if the consumer crashed before processing them.)
With ``batch_index_ack_enabled`` the consumer also tells the broker about each acknowledged index
(WIRE.md R20c, ``ack.batch_acks``), so that a redelivery after a crash brings back only the
messages not yet acknowledged; the tracker then knows each entry's batch size for those frames.

Permits follow Pulsar's receiver queue: the consumer grants ``receiver_queue_size`` up front, and
grants more only once half the queue has been consumed by the application, so the broker refills
the queue in large steps (few ``flow`` frames) while the queue never holds much more than its size.
"""

from __future__ import annotations

Position = tuple[int, int]


class BatchAckTracker:
    """Unacknowledged batch indexes of each batched entry delivered to this consumer."""

    __slots__ = ("_counts", "_entries")

    def __init__(self) -> None:
        self._entries: dict[Position, set[int]] = {}
        self._counts: dict[Position, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def track(self, position: Position, count: int) -> set[int] | None:
        """Start tracking a batched entry of ``count`` messages (a redelivery keeps earlier acks).

        Returns the live set of unacknowledged indexes (None for a single message), so that the
        messages of the entry can discard from it directly, without a dictionary lookup per ack;
        whoever empties it calls ``forget``.
        """
        if count <= 1:
            return None
        remaining = self._entries.get(position)
        if remaining is None:
            remaining = self._entries[position] = set(range(count))
            self._counts[position] = count
        return remaining

    def get(self, position: Position) -> set[int] | None:
        """The live set of unacknowledged indexes of a tracked entry (None: not tracked)."""
        return self._entries.get(position)

    def count(self, position: Position) -> int:
        """The batch size of a tracked entry (0 when it is not tracked)."""
        return self._counts.get(position, 0)

    def forget(self, position: Position) -> None:
        """The entry is complete (its set was emptied by a direct discard)."""
        if self._entries.pop(position, None) is not None:
            del self._counts[position]

    def ack(self, position: Position, index: int) -> bool:
        """Record an individual ack; True when the whole entry may now be acked on the broker."""
        remaining = self._entries.get(position)
        if remaining is None:
            return True  # not batched, a single message, or already complete
        remaining.discard(index)
        if remaining:
            return False
        self.forget(position)
        return True

    def ack_cumulative(self, position: Position, index: int) -> Position | None:
        """Record a cumulative ack up to (position, index); return the position to send, if any.

        Acking message ``i`` of a batch cumulatively covers messages 0..i of that entry only, so
        the broker is told "everything up to the previous entry" until the batch's last message
        is acked (Pulsar's rule). Returns None when nothing before the entry can be acked.
        """
        entries = self._entries
        for pos in [p for p in entries if p < position]:
            self.forget(pos)
        remaining = entries.get(position)
        if remaining is None or index < 0:
            self.forget(position)
            return position
        remaining.difference_update(range(index + 1))
        if not remaining:
            self.forget(position)
            return position
        ledger, entry = position
        return (ledger, entry - 1) if entry > 0 else None

    def is_tracked(self, position: Position) -> bool:
        return position in self._entries


class FlowPermits:
    """Permit arithmetic of one consumer: how many to grant, and when to grant more."""

    __slots__ = ("available", "queue_size", "threshold")

    def __init__(self, receiver_queue_size: int) -> None:
        self.queue_size = max(1, receiver_queue_size)
        # Refill once half of the queue has been consumed (Pulsar's receiverQueueRefillThreshold).
        self.threshold = max(1, self.queue_size // 2)
        self.available = 0

    def initial(self) -> int:
        return self.queue_size

    def consumed(self, n: int = 1) -> int:
        """Count ``n`` messages handed to the application; return permits to grant now (or 0)."""
        self.available += n
        if self.available >= self.threshold:
            grant, self.available = self.available, 0
            return grant
        return 0
