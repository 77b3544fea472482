"""Dispatchers: which consumer of a subscription gets the next entry, one module per type."""

from __future__ import annotations

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.exclusive import ExclusiveDispatcher
from magnetar.broker.dispatchers.failover import FailoverDispatcher
from magnetar.broker.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.dispatchers.shared import SharedDispatcher
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


__all__ = ["DISPATCHERS", "Dispatcher", "dispatcher_for"]
