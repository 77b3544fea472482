"""``magnetar-admin ns-isolation-policy``, as pulsar-admin's: namespace isolation policies of a cluster.

    magnetar-admin ns-isolation-policy set <cluster> <policy> --namespaces 'tenant-a/.*' \\
        --primary '10\\.0\\.0\\.[12]' [--secondary '...'] \\
        --auto-failover-policy-type min_available --auto-failover-policy-params min_limit=1,usage_threshold=100
    magnetar-admin ns-isolation-policy get|delete <cluster> <policy>
    magnetar-admin ns-isolation-policy list|brokers <cluster>
    magnetar-admin ns-isolation-policy broker <cluster> --broker <host:port>

As in pulsar-admin, ``--namespaces``, ``--primary`` and ``--secondary`` take comma-separated lists
(or the flag repeated); unlike pulsar-admin's splitter, a comma inside ``()``, ``[]`` or ``{}`` does
not split, so ``[0-9]{1,3}`` stays one regex. What the regexes match is in ``broker/cluster/isolation.py``.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

GROUP = "ns-isolation-policy"


def _split_top_level(value: str) -> list[str]:
    """Split at commas outside ``()``, ``[]`` and ``{}``, so ``[0-9]{1,3}`` stays one regex."""
    parts, depth, start, escaped = [], 0, 0, False
    for i, ch in enumerate(value):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    return [p.strip() for p in parts if p.strip()]


def _regex_list(values: list[str] | None) -> list[str]:
    return [p for value in values or [] for p in _split_top_level(value)]


def _params(text: str) -> dict[str, str]:
    """``min_limit=1,usage_threshold=100`` -> ``{"min_limit": "1", "usage_threshold": "100"}``."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"invalid parameter {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def add_isolation_verbs(groups: Any) -> None:
    g = groups.add_parser(GROUP, help="namespace isolation policies: bind namespaces to broker groups")
    verbs = g.add_subparsers(dest="action", required=True)
    sp = verbs.add_parser("set", help="create or replace a policy")
    sp.add_argument("cluster")
    sp.add_argument("policy_name")
    sp.add_argument("--namespaces", action="append", required=True, help="regexes over tenant/namespace")
    sp.add_argument("--primary", action="append", required=True, help="regexes over broker names (host:port or host)")
    sp.add_argument("--secondary", action="append", default=[], help="brokers used when too few primaries live")
    sp.add_argument("--auto-failover-policy-type", required=True, help="min_available")
    sp.add_argument(
        "--auto-failover-policy-params", type=_params, required=True, help="min_limit=1,usage_threshold=100"
    )
    for verb in ("get", "delete"):
        sp = verbs.add_parser(verb)
        sp.add_argument("cluster")
        sp.add_argument("policy_name")
    for verb in ("list", "brokers"):
        verbs.add_parser(verb).add_argument("cluster")
    sp = verbs.add_parser("broker", help="the policies naming one broker")
    sp.add_argument("cluster")
    sp.add_argument("--broker", required=True, help="the broker's name, host:port")


def run_isolation_verb(url: str, args: argparse.Namespace, request: Callable[..., Any]) -> Any:
    base = f"/admin/v2/clusters/{urllib.parse.quote(args.cluster, safe='')}/namespaceIsolationPolicies"
    a = args.action
    if a == "list":
        return request(url, "GET", base)
    if a == "brokers":  # a list of objects: printed as JSON (magnetar-admin prints lists line by line)
        print(json.dumps(request(url, "GET", base + "/brokers"), indent=2, sort_keys=True))
        return None
    if a == "broker":
        return request(url, "GET", f"{base}/brokers/{urllib.parse.quote(args.broker, safe='')}")
    path = f"{base}/{urllib.parse.quote(args.policy_name, safe='')}"
    if a == "get":
        return request(url, "GET", path)
    if a == "delete":
        return request(url, "DELETE", path)
    body = {
        "namespaces": _regex_list(args.namespaces),
        "primary": _regex_list(args.primary),
        "secondary": _regex_list(args.secondary),
        "auto_failover_policy": {
            "policy_type": args.auto_failover_policy_type,
            "parameters": args.auto_failover_policy_params,
        },
    }
    return request(url, "POST", path, body)
