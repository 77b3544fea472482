"""Magnetar: a multi-tenant, durable pub/sub messaging system in the model of Apache Pulsar.

The top-level package re-exports the synchronous client, shaped like Pulsar's Python client, so
that ``import magnetar; magnetar.Client(...)`` works the way ``import pulsar`` users expect.
The client is imported lazily so that server processes do not pay for it and so that the
``protocol`` layer can be imported without the client package existing yet.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Forward the client's public names (``magnetar.Client``, ``magnetar.Result``...)."""
    if name in ("asyncio", "exceptions", "schema"):  # real submodules (``magnetar.exceptions.Timeout``), loaded on use
        return importlib.import_module(f"magnetar.{name}")
    if name.startswith("_") or name == "client":
        raise AttributeError(name)
    client = importlib.import_module("magnetar.client")

    if name in client.__all__:
        value = getattr(client, name)
        # Kept as a module global, so the next ``magnetar.Result`` is a plain attribute read.
        # Without it every access ran this function and an import lookup: a producer callback
        # that checks ``result != pulsar.Result.Ok``, as Pulsar's examples do, spent a quarter
        # of the client's time here at 250,000 msg/s.
        globals()[name] = value
        return value
    raise AttributeError(f"module 'magnetar' has no attribute {name!r}")
