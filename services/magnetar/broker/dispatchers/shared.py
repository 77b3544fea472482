"""Shared: entries go round-robin to the consumers that have permits."""

from __future__ import annotations

from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.protocol import commands as c


class SharedDispatcher(Dispatcher):
    sub_type = c.SUB_SHARED

    def __init__(self) -> None:
        super().__init__()
        self._next = 0

    def pick(self) -> ServerConsumer | None:
        n = len(self.consumers)
        for i in range(n):
            consumer = self.consumers[(self._next + i) % n]
            if consumer.permits > 0:
                self._next = (self._next + i + 1) % n
                return consumer
        return None
