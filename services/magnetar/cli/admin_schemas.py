"""``magnetar-admin`` schema verbs, with pulsar-admin's names and flags (broker/admin/schemas.py).

    magnetar-admin schemas get <topic> [--version N] [--all-version]
    magnetar-admin schemas upload <topic> --filename F
    magnetar-admin schemas delete <topic> [--force]
    magnetar-admin schemas compatibility <topic> --filename F
    magnetar-admin namespaces set-schema-compatibility-strategy <tenant/ns> --compatibility S
    magnetar-admin namespaces get-schema-compatibility-strategy <tenant/ns>
    magnetar-admin namespaces set-schema-validation-enforce <tenant/ns> --enable|--disable
    magnetar-admin namespaces get-schema-validation-enforce <tenant/ns>
    magnetar-admin namespaces set-is-allow-auto-update-schema <tenant/ns> --enable|--disable
    magnetar-admin namespaces get-is-allow-auto-update-schema <tenant/ns>

The file of ``upload`` and ``compatibility`` is pulsar-admin's schema definition file, a JSON
object ``{"type": ..., "schema": ..., "properties": {...}}``, sent as is: the broker says what is
wrong with it. Strategy names are checked here too, so a typo fails before any request.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import CompatibilityStrategy

GROUP = "schemas"
NAMESPACE_ACTIONS = frozenset(
    {
        "set-schema-compatibility-strategy",
        "get-schema-compatibility-strategy",
        "set-schema-validation-enforce",
        "get-schema-validation-enforce",
        "set-is-allow-auto-update-schema",
        "get-is-allow-auto-update-schema",
    }
)


def _strategy(text: str) -> str:
    if text.upper() not in CompatibilityStrategy.__members__:
        raise argparse.ArgumentTypeError(
            f"invalid strategy {text!r} (one of {', '.join(CompatibilityStrategy.__members__)})"
        )
    return text.upper()


def _enable_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("-e", "--enable", dest="enable", action="store_true")
    group.add_argument("-d", "--disable", dest="enable", action="store_false")


def add_schema_verbs(groups: Any, namespaces: Any) -> None:
    s = groups.add_parser(GROUP, help="a topic's schema registry").add_subparsers(dest="action", required=True)
    sp = s.add_parser("get", help="the newest schema, one version, or every version")
    sp.add_argument("name", help="topic name")
    sp.add_argument("--version", type=int, default=None)
    sp.add_argument("-a", "--all-version", dest="all_version", action="store_true")
    sp = s.add_parser("upload", help="register a schema (checked with the compatibility strategy)")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-f", "--filename", required=True, help='JSON file {"type", "schema", "properties"}')
    sp = s.add_parser("delete", help="delete the schema (a tombstone; --force removes every version)")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-f", "--force", action="store_true")
    sp = s.add_parser("compatibility", help="whether a schema would be accepted now")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-f", "--filename", required=True, help='JSON file {"type", "schema", "properties"}')

    sp = namespaces.add_parser("set-schema-compatibility-strategy", help="the strategy new schemas are checked with")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("-c", "--compatibility", type=_strategy, required=True)
    namespaces.add_parser("get-schema-compatibility-strategy").add_argument("name", help="tenant/namespace")
    sp = namespaces.add_parser("set-schema-validation-enforce", help="refuse producers without a schema")
    sp.add_argument("name", help="tenant/namespace")
    _enable_flags(sp)
    namespaces.add_parser("get-schema-validation-enforce").add_argument("name", help="tenant/namespace")
    sp = namespaces.add_parser("set-is-allow-auto-update-schema", help="may producers register new schemas")
    sp.add_argument("name", help="tenant/namespace")
    _enable_flags(sp)
    namespaces.add_parser("get-is-allow-auto-update-schema").add_argument("name", help="tenant/namespace")


def is_schema_verb(group: str, action: str) -> bool:
    return group == GROUP or (group == "namespaces" and action in NAMESPACE_ACTIONS)


def _definition_file(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read the schema definition file {path}: {exc}") from None


def _bare(value: Any) -> None:
    """Print a policy value as pulsar-admin does: ``BACKWARD``, ``true`` (not JSON-quoted)."""
    print(value if isinstance(value, str) else json.dumps(value))


def run_schema_verb(url: str, args: argparse.Namespace, request: Callable[..., Any]) -> Any:
    a = args.action
    if args.group == "namespaces":
        ns = "/admin/v2/namespaces/" + "/".join(urllib.parse.quote(p, safe="") for p in args.name.split("/", 1))
        if a == "set-schema-compatibility-strategy":
            return request(url, "PUT", ns + "/schemaCompatibilityStrategy", args.compatibility)
        if a == "get-schema-compatibility-strategy":
            return _bare(request(url, "GET", ns + "/schemaCompatibilityStrategy"))
        if a == "set-schema-validation-enforce":
            return request(url, "POST", ns + "/schemaValidationEnforced", args.enable)
        if a == "get-schema-validation-enforce":
            return _bare(request(url, "GET", ns + "/schemaValidationEnforced"))
        if a == "set-is-allow-auto-update-schema":
            return request(url, "POST", ns + "/isAllowAutoUpdateSchema", args.enable)
        return _bare(request(url, "GET", ns + "/isAllowAutoUpdateSchema"))
    base = f"/admin/v2/schemas/{TopicName.parse(args.name).partitioned_base.path}"
    if a == "get":
        if args.all_version:
            return request(url, "GET", base + "/schemas")
        if args.version is not None:
            return request(url, "GET", f"{base}/schema/{args.version}")
        return request(url, "GET", base + "/schema")
    if a == "upload":
        return request(url, "POST", base + "/schema", _definition_file(args.filename))
    if a == "delete":
        return request(url, "DELETE", base + "/schema" + ("?force=true" if args.force else ""))
    return request(url, "POST", base + "/compatibility", _definition_file(args.filename))
