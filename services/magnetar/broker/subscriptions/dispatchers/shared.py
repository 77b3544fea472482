"""Shared: entries go round-robin to the consumers that have permits, by priority level.

As Pulsar's ``getNextConsumer``: consumers of the lowest ``priority_level`` number are served
first; a consumer of a higher level gets entries only while no consumer of a lower level has
permits. Within a level the order is round-robin.
"""

from __future__ import annotations

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers.base import Dispatcher
from magnetar.protocol import commands as c


class SharedDispatcher(Dispatcher):
    sub_type = c.SUB_SHARED
    delays_messages = True

    def __init__(self, partition_index: int = -1) -> None:
        super().__init__(partition_index)
        # Consumers grouped by priority level, lowest level first; the next index per level.
        self._levels: list[tuple[int, list[ServerConsumer]]] = []
        self._next: dict[int, int] = {}

    def add(self, consumer: ServerConsumer) -> None:
        super().add(consumer)
        self._regroup()

    def remove(self, consumer: ServerConsumer) -> None:
        super().remove(consumer)
        self._regroup()

    def _regroup(self) -> None:
        groups: dict[int, list[ServerConsumer]] = {}
        for cons in self.consumers:
            groups.setdefault(cons.priority_level, []).append(cons)
        self._levels = sorted(groups.items(), key=lambda item: item[0])

    def pick(self) -> ServerConsumer | None:
        for level, group in self._levels:
            n = len(group)
            start = self._next.get(level, 0) % n
            for i in range(n):
                consumer = group[(start + i) % n]
                if consumer.can_take:
                    self._next[level] = (start + i + 1) % n
                    return consumer
        return None
