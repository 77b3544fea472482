"""Magnetar: a multi-tenant, durable pub/sub messaging system in the model of Apache Pulsar.

The top-level package re-exports the synchronous client, shaped like Pulsar's Python client, so
that ``import magnetar; magnetar.Client(...)`` works the way ``import pulsar`` users expect.
The client is imported lazily so that server processes do not pay for it and so that the
``protocol`` layer can be imported without the client package existing yet.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_CLIENT_NAMES = {
    "Client",
    "Producer",
    "Consumer",
    "Message",
    "MessageId",
    "ConsumerType",
    "InitialPosition",
    "CompressionType",
    "MagnetarError",
}


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from magnetar import client

        return getattr(client, name)
    if name == "asyncio":
        import importlib

        return importlib.import_module("magnetar.client.aio")
    raise AttributeError(name)
