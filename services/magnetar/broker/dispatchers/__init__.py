"""Dispatchers: which consumer of a subscription gets the next entry, one module per type.

Exclusive and Shared are implemented. Failover and Key_Shared are refused with an explicit
``Unsupported`` error until their modules exist; adding one is a new module registered here.
"""

from __future__ import annotations

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.exclusive import ExclusiveDispatcher
from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.protocol import commands as c
from magnetar.protocol.errors import InvalidCommand, Unsupported

DISPATCHERS: dict[str, type[Dispatcher]] = {
    c.SUB_EXCLUSIVE: ExclusiveDispatcher,
    c.SUB_SHARED: SharedDispatcher,
}


def dispatcher_for(sub_type: str) -> Dispatcher:
    cls = DISPATCHERS.get(sub_type)
    if cls is None:
        if sub_type in (c.SUB_FAILOVER, c.SUB_KEY_SHARED):
            raise Unsupported(f"subscription type {sub_type} is not supported by this broker yet")
        raise InvalidCommand(f"unknown subscription type {sub_type!r}")
    return cls()


__all__ = ["DISPATCHERS", "Dispatcher", "dispatcher_for"]
