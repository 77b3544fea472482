"""Failover: many consumers, one active at a time; the others stand by.

As Pulsar's ``AbstractDispatcherSingleActiveConsumer``: consumers are ordered by
(``priority_level``, consumer name). On a topic that is not a partition the first one is active;
on partition ``i`` of a partitioned topic it is the ``i mod n``-th, where ``n`` counts the
consumers of the lowest priority level, so a partitioned topic's partitions spread evenly over the
consumers of the best level. Every membership change recomputes the active consumer; consumers
whose role changed are told with ``active_consumer_change``, and a consumer that joins is always
told its role. The subscription moves the entries the previous active consumer still had unacked
to the new one (Pulsar rewinds the cursor on failover).
"""

from __future__ import annotations

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers.base import Dispatcher
from magnetar.protocol import commands as c


class FailoverDispatcher(Dispatcher):
    sub_type = c.SUB_FAILOVER

    def __init__(self, partition_index: int = -1) -> None:
        super().__init__(partition_index)
        self._active: ServerConsumer | None = None

    @property
    def active_consumer(self) -> ServerConsumer | None:
        return self._active

    def add(self, consumer: ServerConsumer) -> None:
        super().add(consumer)
        self._elect(joined=consumer)

    def remove(self, consumer: ServerConsumer) -> None:
        super().remove(consumer)
        self._elect(joined=None)

    def ordered(self) -> list[ServerConsumer]:
        """Consumers in election order (ties keep the order they joined in)."""
        return sorted(self.consumers, key=lambda cons: (cons.priority_level, cons.name))

    def _choose(self) -> ServerConsumer | None:
        ordered = self.ordered()
        if not ordered:
            return None
        best = ordered[0].priority_level
        n = sum(1 for cons in ordered if cons.priority_level == best)
        index = self.partition_index % n if self.partition_index >= 0 else 0
        return ordered[index]

    def _elect(self, joined: ServerConsumer | None) -> None:
        previous, self._active = self._active, self._choose()
        told: set[int] = set()
        if previous is not self._active:
            if previous is not None and previous in self.consumers:
                previous.sink.send_active_consumer_change(previous.consumer_id, False)
                told.add(id(previous))
            if self._active is not None:
                self._active.sink.send_active_consumer_change(self._active.consumer_id, True)
                told.add(id(self._active))
        if joined is not None and id(joined) not in told:
            joined.sink.send_active_consumer_change(joined.consumer_id, joined is self._active)

    def has_permits(self) -> bool:
        return self._active is not None and self._active.can_take

    def total_permits(self) -> int:
        return max(0, self._active.permits) if self._active is not None and self._active.can_take else 0

    def pick(self) -> ServerConsumer | None:
        if self._active is not None and self._active.can_take:
            return self._active
        return None
