"""The abuse-limit flags of ``magnetar standalone`` and ``magnetar broker`` (broker/server/limits.py).

One flag per setting, the broker.conf name in kebab case (``--broker-max-connections-per-ip`` for
``brokerMaxConnectionsPerIp``); config files use the broker.conf names (cli/config_file.py).
Defaults are Pulsar's (0 = unlimited, 50000 lookups, 5000 topic loads, 50000 and 200000 unacked
messages per consumer and per subscription) and Magnetar's for the settings Pulsar lacks.
"""

from __future__ import annotations

import argparse
from typing import Any

_INT_FLAGS = {
    "broker_max_connections": 0,
    "broker_max_connections_per_ip": 0,
    "max_producers_per_connection": 0,
    "max_consumers_per_connection": 0,
    "max_unacked_messages_per_consumer": 50000,
    "max_unacked_messages_per_subscription": 200000,
    "max_concurrent_lookup_request": 50000,
    "max_concurrent_topic_load_request": 5000,
    "max_concurrent_topic_loads_per_tenant": 8,
    "pre_authentication_max_frame_size": 64 * 1024,
}


def _non_negative(value: Any) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(f"must be 0 or more, got {number}")
    return number


def _seconds(value: Any) -> float:
    number = float(value)
    if number < 0:
        raise ValueError(f"must be 0 or more, got {number}")
    return number


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    for name, default in _INT_FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=_non_negative, default=default)
    parser.add_argument("--pre-authentication-timeout-seconds", type=_seconds, default=30.0, help="0: no timeout")


def limit_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_limit_flags``."""
    names = [*_INT_FLAGS, "pre_authentication_timeout_seconds"]
    return {name: getattr(args, name) for name in names}
