"""The advertised-listener flags of ``magnetar standalone`` and ``magnetar broker``.

They feed ``broker/cluster/advertised_listeners.py``.

``--advertised-listeners internal:pulsar://10.0.0.7:6650,external:pulsar://broker-0.example.com:6651``
and ``--internal-listener-name internal`` are Pulsar's ``advertisedListeners`` and
``internalListenerName`` (config files use those names, cli/config_file.py). A bad list fails at
start, not at the first lookup.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.broker.cluster.advertised_listeners import internal_listener, parse_advertised_listeners


def add_listener_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--advertised-listeners",
        default=None,
        help="name:pulsar://host:port[,name:pulsar+ssl://host:port,...]: the addresses lookups may answer",
    )
    parser.add_argument(
        "--internal-listener-name", default=None, help="the listener for clients that name none (default: first)"
    )


def listener_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``BrokerConfig`` fields of the flags; exits with a message if they do not parse."""
    try:
        listeners = parse_advertised_listeners(getattr(args, "advertised_listeners", None))
        internal_listener(listeners, getattr(args, "internal_listener_name", None))
    except ValueError as exc:
        raise SystemExit(f"advertised listeners: {exc}") from None
    return {"advertised_listeners": listeners, "internal_listener_name": getattr(args, "internal_listener_name", None)}
