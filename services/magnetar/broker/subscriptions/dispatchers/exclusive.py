"""Exclusive: one consumer per subscription; a second one is refused with ConsumerBusy."""

from __future__ import annotations

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers.base import Dispatcher
from magnetar.protocol import commands as c
from magnetar.protocol.errors import ConsumerBusy


class ExclusiveDispatcher(Dispatcher):
    sub_type = c.SUB_EXCLUSIVE

    def add(self, consumer: ServerConsumer) -> None:
        if self.consumers:
            raise ConsumerBusy("exclusive subscription already has a consumer")
        super().add(consumer)

    @property
    def active_consumer(self) -> ServerConsumer | None:
        return self.consumers[0] if self.consumers else None

    def pick(self) -> ServerConsumer | None:
        if self.consumers and self.consumers[0].can_take:
            return self.consumers[0]
        return None
