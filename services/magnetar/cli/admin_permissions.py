"""``magnetar-admin`` permission verbs, with pulsar-admin's names and flags (broker/admin/permissions.py).

    magnetar-admin namespaces grant-permission <tenant/ns> --role R --actions produce,consume
    magnetar-admin namespaces revoke-permission <tenant/ns> --role R
    magnetar-admin namespaces permissions <tenant/ns>
    magnetar-admin namespaces grant-subscription-permission <tenant/ns> --subscription S --roles a,b
    magnetar-admin namespaces revoke-subscription-permission <tenant/ns> --subscription S --role R
    magnetar-admin namespaces subscription-permission <tenant/ns>
    magnetar-admin namespaces set-subscription-auth-mode <tenant/ns> -m Prefix|None
    magnetar-admin namespaces get-subscription-auth-mode <tenant/ns>
    magnetar-admin topics grant-permission <topic> --role R --actions produce,consume
    magnetar-admin topics revoke-permission <topic> --role R
    magnetar-admin topics permissions <topic>

Actions are Pulsar's (produce, consume, functions, sources, sinks, packages); the broker says
which it refuses. Roles and subscriptions are quoted into the path, so any name round-trips.
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

NAMESPACE_ACTIONS = frozenset(
    {
        "grant-permission",
        "revoke-permission",
        "permissions",
        "grant-subscription-permission",
        "revoke-subscription-permission",
        "subscription-permission",
        "set-subscription-auth-mode",
        "get-subscription-auth-mode",
    }
)
TOPIC_ACTIONS = frozenset({"grant-permission", "revoke-permission", "permissions"})


def _list(text: str) -> list[str]:
    """pulsar-admin's comma-separated lists (``--actions produce,consume``)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def add_permission_verbs(namespaces: Any, topics: Any) -> None:
    sp = namespaces.add_parser("grant-permission", help="grant actions on a namespace to a role")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("--role", required=True)
    sp.add_argument("--actions", type=_list, required=True, help="produce,consume")
    sp = namespaces.add_parser("revoke-permission", help="revoke a role's actions on a namespace")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("--role", required=True)
    namespaces.add_parser("permissions", help="the roles granted on a namespace").add_argument(
        "name", help="tenant/namespace"
    )
    sp = namespaces.add_parser("grant-subscription-permission", help="only these roles may consume a subscription")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("--subscription", required=True)
    sp.add_argument("--roles", type=_list, required=True, help="role1,role2")
    sp = namespaces.add_parser("revoke-subscription-permission", help="take a role off a subscription's list")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("--subscription", required=True)
    sp.add_argument("--role", required=True)
    namespaces.add_parser("subscription-permission", help="the role lists of subscriptions").add_argument(
        "name", help="tenant/namespace"
    )
    sp = namespaces.add_parser("set-subscription-auth-mode", help="None, or Prefix: subscriptions start with <role>-")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("-m", "--subscription-auth-mode", dest="mode", choices=["None", "Prefix"], required=True)
    namespaces.add_parser("get-subscription-auth-mode").add_argument("name", help="tenant/namespace")

    sp = topics.add_parser("grant-permission", help="grant actions on a topic to a role")
    sp.add_argument("name", help="topic name")
    sp.add_argument("--role", required=True)
    sp.add_argument("--actions", type=_list, required=True, help="produce,consume")
    sp = topics.add_parser("revoke-permission", help="revoke a role's topic-level actions")
    sp.add_argument("name", help="topic name")
    sp.add_argument("--role", required=True)
    topics.add_parser("permissions", help="the roles granted on a topic (with its namespace's)").add_argument(
        "name", help="topic name"
    )


def is_permission_verb(group: str, action: str) -> bool:
    return (group == "namespaces" and action in NAMESPACE_ACTIONS) or (group == "topics" and action in TOPIC_ACTIONS)


def run_permission_verb(
    url: str, args: argparse.Namespace, request: Callable[..., Any], topic_path: Callable[[str], str]
) -> Any:
    """Run one verb; ``topic_path`` turns a topic name into ``/admin/v2/{domain}/t/ns/x``."""
    a = args.action
    if args.group == "topics":
        base = topic_path(args.name) + "/permissions"
        if a == "permissions":
            return request(url, "GET", base)
        if a == "grant-permission":
            return request(url, "POST", f"{base}/{_q(args.role)}", args.actions)
        return request(url, "DELETE", f"{base}/{_q(args.role)}")
    ns = "/admin/v2/namespaces/" + "/".join(_q(part) for part in args.name.split("/", 1))
    if a == "permissions":
        return request(url, "GET", ns + "/permissions")
    if a == "grant-permission":
        return request(url, "POST", f"{ns}/permissions/{_q(args.role)}", args.actions)
    if a == "revoke-permission":
        return request(url, "DELETE", f"{ns}/permissions/{_q(args.role)}")
    if a == "subscription-permission":
        return request(url, "GET", ns + "/permissions/subscription")
    if a == "grant-subscription-permission":
        return request(url, "POST", f"{ns}/permissions/subscription/{_q(args.subscription)}", args.roles)
    if a == "revoke-subscription-permission":
        return request(url, "DELETE", f"{ns}/permissions/{_q(args.subscription)}/{_q(args.role)}")
    if a == "set-subscription-auth-mode":
        return request(url, "POST", ns + "/subscriptionAuthMode", args.mode)
    return request(url, "GET", ns + "/subscriptionAuthMode")
