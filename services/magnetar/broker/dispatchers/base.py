"""The dispatcher seam: consumer membership and the choice of consumer for each entry."""

from __future__ import annotations

from abc import ABC, abstractmethod

from magnetar.broker.consumer import ServerConsumer


class Dispatcher(ABC):
    sub_type: str = ""

    def __init__(self) -> None:
        self.consumers: list[ServerConsumer] = []

    def add(self, consumer: ServerConsumer) -> None:
        """Admit a consumer; raises (e.g. ConsumerBusy) when the type does not allow it."""
        self.consumers.append(consumer)

    def remove(self, consumer: ServerConsumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    def has_permits(self) -> bool:
        return any(c.permits > 0 for c in self.consumers)

    def total_permits(self) -> int:
        return sum(max(0, c.permits) for c in self.consumers)

    @abstractmethod
    def pick(self) -> ServerConsumer | None:
        """The consumer that gets the next entry, or None when no consumer can take one."""
