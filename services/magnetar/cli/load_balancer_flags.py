"""The load manager's flags of ``magnetar standalone`` and ``magnetar broker``, derived from
``LoadBalancerSettings`` (broker/loadbalance/settings.py) so that no name is written twice.

Each setting's flag is the kebab case of its broker.conf key (``loadBalancerSheddingIntervalMinutes``
-> ``--load-balancer-shedding-interval-minutes``) and its ``--config`` file key is the broker.conf key
itself (``KEYS``, merged into cli/config_file.py's table). A strategy or split algorithm Magnetar does
not have is refused with one line rather than run as something else: Pulsar's class names and the
short names (``ThresholdShedder``, ``LeastResourceUsageWithWeight``) are taken.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable
from typing import Any

from magnetar.broker.loadbalance.settings import (
    LEAST_LONG_TERM_MESSAGE_RATE,
    LEAST_RESOURCE_USAGE_WITH_WEIGHT,
    SPLIT_ALGORITHMS,
    THRESHOLD_SHEDDER,
    LoadBalancerSettings,
)
from magnetar.cli.flag_types import flag_bool

__all__ = ["KEYS", "add_load_balancer_flags", "kebab", "load_balancer_settings"]

_FIELDS = dataclasses.fields(LoadBalancerSettings)


def kebab(key: str) -> str:
    """``loadBalancerCPUResourceWeight`` -> ``load-balancer-cpu-resource-weight``."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", key)
    return "-".join(w.lower() for w in words)


def _dest(key: str) -> str:
    return kebab(key).replace("-", "_")


# broker.conf key -> the argparse dest of its flag: cli/config_file.py's KEYS["broker"] takes these.
KEYS: dict[str, str] = {f.metadata["key"]: _dest(f.metadata["key"]) for f in _FIELDS}


def _strategy(*names: str) -> Callable[[str], str | None]:
    """Accept each of ``names`` (Pulsar's class names) or its short name; answer the class name."""
    known = {n: n for n in names} | {n.rsplit(".", 1)[1]: n for n in names}
    return known.get


def _split_algorithm(text: str) -> str | None:
    return text if text in SPLIT_ALGORITHMS else None


def _optional_float(value: Any) -> float | None:
    if value is None or str(value).strip().lower() in ("", "none"):
        return None
    return float(value)


# Settings that name an implementation: field -> (its canonical name or None, what is accepted).
_NAMED: dict[str, tuple[Callable[[str], str | None], str]] = {
    "load_shedding_strategy": (_strategy(THRESHOLD_SHEDDER), f"ThresholdShedder ({THRESHOLD_SHEDDER})"),
    "load_placement_strategy": (
        _strategy(LEAST_RESOURCE_USAGE_WITH_WEIGHT, LEAST_LONG_TERM_MESSAGE_RATE),
        "LeastResourceUsageWithWeight or LeastLongTermMessageRate (org.apache.pulsar.broker.loadbalance.impl.*)",
    ),
    "default_namespace_bundle_split_algorithm": (_split_algorithm, " or ".join(SPLIT_ALGORITHMS)),
}
_BY_TYPE: dict[str, Callable[[Any], Any]] = {
    "bool": flag_bool,
    "int": int,
    "float": float,
    "str": str,
    "float | None": _optional_float,
}


def _converter(f: dataclasses.Field[Any]) -> Callable[[Any], Any]:
    return _BY_TYPE[str(f.type)]


def add_load_balancer_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per load-balancer setting, with Pulsar's default."""
    group = parser.add_argument_group("load balancer (Pulsar's loadBalancer* settings)")
    for f in _FIELDS:
        key = f.metadata["key"]
        group.add_argument(
            "--" + kebab(key),
            dest=_dest(key),
            type=_converter(f),
            default=f.default,
            help=f"{key}: {f.metadata['doc']} (default {f.default})",
        )


def load_balancer_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments: ``load_balancer`` from the flags (or the config file).
    A strategy or algorithm Magnetar lacks ends the command with one line naming the setting."""
    values = {f.name: getattr(args, _dest(f.metadata["key"])) for f in _FIELDS}
    for f in _FIELDS:
        if f.name in _NAMED:
            canonical, accepted = _NAMED[f.name]
            given = str(values[f.name]).strip()
            chosen = canonical(given)
            if chosen is None:
                raise SystemExit(
                    f"magnetar {args.command}: {f.metadata['key']} (--{kebab(f.metadata['key'])}) "
                    f"must be {accepted}, got {given!r}"
                )
            values[f.name] = chosen
    return {"load_balancer": LoadBalancerSettings(**values)}
