"""Dispatchers: which consumer of a subscription gets the next entry, one module per type."""

from __future__ import annotations

from magnetar.broker.subscriptions.dispatchers.base import Dispatcher
from magnetar.broker.subscriptions.dispatchers.exclusive import ExclusiveDispatcher
from magnetar.broker.subscriptions.dispatchers.failover import FailoverDispatcher
from magnetar.broker.subscriptions.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.subscriptions.dispatchers.shared import SharedDispatcher
from magnetar.protocol import commands as c
from magnetar.protocol.errors import InvalidCommand

DISPATCHERS: dict[str, type[Dispatcher]] = {
    c.SUB_EXCLUSIVE: ExclusiveDispatcher,
    c.SUB_SHARED: SharedDispatcher,
    c.SUB_FAILOVER: FailoverDispatcher,
    c.SUB_KEY_SHARED: KeySharedDispatcher,
}


def dispatcher_for(sub_type: str, partition_index: int = -1) -> Dispatcher:
    cls = DISPATCHERS.get(sub_type)
    if cls is None:
        raise InvalidCommand(f"unknown subscription type {sub_type!r}")
    return cls(partition_index)


def check_joinable(dispatcher: Dispatcher, sub_type: str, subscription: str) -> None:
    """A subscription keeps its type while it has consumers (persistent and non-persistent alike):
    a consumer asking for another type is refused; with no consumers the caller may re-type it."""
    if dispatcher.consumers and sub_type != dispatcher.sub_type:
        raise InvalidCommand(f"subscription {subscription} is {dispatcher.sub_type}; cannot join it as {sub_type}")


__all__ = ["DISPATCHERS", "Dispatcher", "check_joinable", "dispatcher_for"]
