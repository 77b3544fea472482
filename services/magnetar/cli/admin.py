"""``magnetar-admin``: the admin REST API from the shell, with pulsar-admin's verbs.

It uses only the standard library (urllib) so that it works wherever the client works.
Errors print the broker's ``reason`` and exit non-zero.

This module holds the command line and its dispatch, and the verbs of bookies, tenants, namespaces
and topics themselves; the other verbs live beside it, one family per module: the requests and
their error (``admin_http``), pulsar-admin's times and sizes (``admin_units``), subscriptions and
peek (``admin_subscriptions``), rates, deduplication, retention, TTL and backlog quotas
(``admin_policies``), compaction, isolation, permissions, schemas, and the credentials
(``admin_auth``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from magnetar.cli.admin_auth import add_auth_flags, security_from_args
from magnetar.cli.admin_brokers import GROUPS as BROKER_GROUPS
from magnetar.cli.admin_brokers import add_broker_and_cluster_verbs, run_broker_or_cluster_verb
from magnetar.cli.admin_bundles import add_bundle_verbs, create_body, is_bundle_verb, run_bundle_verb
from magnetar.cli.admin_compaction import COMPACTION_ACTIONS, add_compaction_verbs, run_compaction_verb
from magnetar.cli.admin_http import AdminError, PlainText, request, use_security
from magnetar.cli.admin_isolation import GROUP as ISOLATION_GROUP
from magnetar.cli.admin_isolation import add_isolation_verbs, run_isolation_verb
from magnetar.cli.admin_permissions import add_permission_verbs, is_permission_verb, run_permission_verb
from magnetar.cli.admin_policies import (
    add_dedup_verbs,
    add_rate_verbs,
    add_retention_verbs,
    is_policy_verb,
    run_policy_verb,
)
from magnetar.cli.admin_schemas import add_schema_verbs, is_schema_verb, run_schema_verb
from magnetar.cli.admin_subscriptions import SUBSCRIPTION_ACTIONS, add_subscription_verbs, run_subscription_verb
from magnetar.cli.user_errors import INTERRUPTED, ORDINARY, describe
from magnetar.protocol.topic_name import TopicName

DEFAULT_URL = os.environ.get("MAGNETAR_ADMIN_URL", "http://127.0.0.1:8080")


def _topic_path(name: str) -> str:
    return TopicName.parse(name).path


def _out(value: Any) -> None:
    """Print an answer as pulsar-admin does: a plain text as it is, a list of names one a line, and
    anything else (an object, a list of objects such as ``bookies list``'s, a JSON string such as an
    enum's value) as indented JSON."""
    if value is None:
        return
    if isinstance(value, PlainText):
        print(value)
    elif isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        for item in value:
            print(item)
    else:
        print(json.dumps(value, indent=2, sort_keys=True))


def run(args: argparse.Namespace) -> Any:
    url = args.admin_url
    g, a = args.group, args.action
    if a in COMPACTION_ACTIONS:  # cli/admin_compaction.py
        return run_compaction_verb(
            url,
            args,
            request,
            lambda name: f"/admin/v2/{TopicName.parse(name).domain}/{_topic_path(name)}",
            lambda reason: AdminError(0, reason),
        )
    if is_permission_verb(g, a):  # cli/admin_permissions.py
        return run_permission_verb(
            url, args, request, lambda name: f"/admin/v2/{TopicName.parse(name).domain}/{_topic_path(name)}"
        )
    if is_schema_verb(g, a):  # cli/admin_schemas.py
        return run_schema_verb(url, args, request)
    if g == ISOLATION_GROUP:  # cli/admin_isolation.py
        return run_isolation_verb(url, args, request)
    if is_bundle_verb(g, a):  # cli/admin_bundles.py
        return run_bundle_verb(url, args, request)
    if g in BROKER_GROUPS:  # cli/admin_brokers.py
        return run_broker_or_cluster_verb(url, args, request)
    if g == "bookies":
        if a == "list":
            return request(url, "GET", "/admin/v2/bookies")
        if a == "underreplicated":
            return request(url, "GET", "/admin/v2/bookies/underreplicated")
        if a == "decommission":
            return request(
                url,
                "POST",
                f"/admin/v2/bookies/{args.bookie_id}/decommission?timeout={args.timeout}",
                timeout=args.timeout + 30,
            )
    if g == "tenants":
        if a == "list":
            return request(url, "GET", "/admin/v2/tenants")
        body = {"adminRoles": args.admin_roles or [], "allowedClusters": args.allowed_clusters or []}
        if a == "get":
            return request(url, "GET", f"/admin/v2/tenants/{args.name}")
        if a == "create":
            return request(url, "PUT", f"/admin/v2/tenants/{args.name}", body)
        if a == "update":
            return request(url, "POST", f"/admin/v2/tenants/{args.name}", body)
        if a == "delete":
            return request(url, "DELETE", f"/admin/v2/tenants/{args.name}{'?force=true' if args.force else ''}")
    if g == "namespaces":
        if a == "list":
            return request(url, "GET", f"/admin/v2/namespaces/{args.name}")
        path = f"/admin/v2/namespaces/{args.name}"
        if is_policy_verb(a):  # cli/admin_policies.py
            return run_policy_verb(url, path, args, topic_level=False)
        if a == "create":
            return request(url, "PUT", path, create_body(args))  # --bundles: cli/admin_bundles.py
        if a in ("get", "policies"):
            return request(url, "GET", path)
        if a == "delete":
            return request(url, "DELETE", path + ("?force=true" if args.force else ""))
        if a == "set-persistence":
            return request(
                url,
                "POST",
                path + "/persistence",
                {
                    "bookkeeperEnsemble": args.bookkeeper_ensemble,
                    "bookkeeperWriteQuorum": args.bookkeeper_write_quorum,
                    "bookkeeperAckQuorum": args.bookkeeper_ack_quorum,
                },
            )
    if g == "topics":
        if a == "list":  # both domains unless --topic-domain says one, as pulsar-admin
            domains = [args.topic_domain.replace("_", "-")] if args.topic_domain else ["persistent", "non-persistent"]
            return sorted(name for d in domains for name in request(url, "GET", f"/admin/v2/{d}/{args.name}"))
        if a == "list-partitioned-topics":
            return request(url, "GET", f"/admin/v2/persistent/{args.name}/partitioned")
        path = f"/admin/v2/{TopicName.parse(args.name).domain}/{_topic_path(args.name)}"
        force = "?force=true" if getattr(args, "force", False) else ""
        if is_policy_verb(a):  # cli/admin_policies.py
            return run_policy_verb(url, path, args, topic_level=True)
        if a == "create":
            return request(url, "PUT", path, create_body(args))  # --bundles: cli/admin_bundles.py
        if a == "create-partitioned-topic":
            return request(url, "PUT", path + "/partitions", args.partitions)
        if a == "update-partitioned-topic":
            return request(url, "POST", path + "/partitions", args.partitions)
        if a == "get-partitioned-topic-metadata":
            return request(url, "GET", path + "/partitions")
        if a == "delete":
            return request(url, "DELETE", path + force)
        if a == "delete-partitioned-topic":
            return request(url, "DELETE", path + "/partitions" + force)
        if a == "stats":
            return request(url, "GET", path + "/stats")
        if a == "subscriptions":
            return request(url, "GET", path + "/subscriptions")
        if a == "unload":
            return request(url, "PUT", path + "/unload")
        if a == "trim-topic":
            return request(url, "POST", path + "/trim")
        if a == "stats-internal":
            return request(url, "GET", path + "/internalStats" + ("?metadata=true" if args.metadata else ""))
        if a == "lookup":
            return request(url, "GET", f"/lookup/v2/topic/{TopicName.parse(args.name).domain}/{_topic_path(args.name)}")
        if a == "partitioned-stats":
            return request(url, "GET", path + "/partitioned-stats")
        if a in SUBSCRIPTION_ACTIONS:  # cli/admin_subscriptions.py
            return run_subscription_verb(url, path, args)
    raise SystemExit(f"unknown command {g} {a}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="magnetar-admin", description="Administer a Magnetar cluster")
    p.add_argument("--admin-url", default=DEFAULT_URL, help="broker admin URL (env MAGNETAR_ADMIN_URL)")
    add_auth_flags(p)
    groups = p.add_subparsers(dest="group", required=True)

    bk = groups.add_parser("bookies").add_subparsers(dest="action", required=True)
    bk.add_parser("list")
    bk.add_parser("underreplicated")
    sp = bk.add_parser("decommission", help="re-replicate a bookie's ledgers elsewhere before removing it")
    sp.add_argument("bookie_id")
    sp.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the drain")

    t = groups.add_parser("tenants").add_subparsers(dest="action", required=True)
    t.add_parser("list")
    for verb in ("get", "create", "update", "delete"):
        sp = t.add_parser(verb)
        sp.add_argument("name")
        sp.add_argument("--admin-roles", nargs="*")
        sp.add_argument("--allowed-clusters", nargs="*")
        sp.add_argument("--force", action="store_true")

    n = groups.add_parser("namespaces").add_subparsers(dest="action", required=True)
    n.add_parser("list").add_argument("name", help="tenant")
    for verb in ("create", "get", "policies", "delete"):
        sp = n.add_parser(verb)
        sp.add_argument("name", help="tenant/namespace")
        sp.add_argument("--force", action="store_true")
    sp = n.add_parser("set-persistence")
    sp.add_argument("name")
    sp.add_argument("-e", "--bookkeeper-ensemble", type=int, required=True)
    sp.add_argument("-w", "--bookkeeper-write-quorum", type=int, required=True)
    sp.add_argument("-a", "--bookkeeper-ack-quorum", type=int, required=True)

    tp = groups.add_parser("topics").add_subparsers(dest="action", required=True)
    sp = tp.add_parser("list")
    sp.add_argument("name", help="tenant/namespace")
    sp.add_argument("-td", "--topic-domain", choices=["persistent", "non_persistent"], help="one domain only")
    tp.add_parser("list-partitioned-topics").add_argument("name", help="tenant/namespace")
    for verb in (
        "create",
        "delete",
        "stats",
        "subscriptions",
        "unload",
        "lookup",
        "partitioned-stats",
        "get-partitioned-topic-metadata",
        "delete-partitioned-topic",
    ):
        sp = tp.add_parser(verb)
        sp.add_argument("name", help="topic name")
        sp.add_argument("--force", "-f", action="store_true")
    for verb in ("create-partitioned-topic", "update-partitioned-topic"):
        sp = tp.add_parser(verb)
        sp.add_argument("name")
        sp.add_argument("-p", "--partitions", type=int, required=True)
    tp.add_parser("trim-topic", help="delete now the ledgers retention no longer keeps").add_argument(
        "name", help="topic name"
    )
    sp = tp.add_parser("stats-internal", help="the topic's internal stats: ledgers, cursors")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-m", "--metadata", action="store_true", help="include each ledger's metadata (ensembles)")
    add_subscription_verbs(tp)
    add_rate_verbs(n, "tenant/namespace")
    add_rate_verbs(tp, "topic name")
    add_dedup_verbs(n, "tenant/namespace", topic_level=False)
    add_dedup_verbs(tp, "topic name", topic_level=True)
    add_retention_verbs(n, "tenant/namespace")
    add_retention_verbs(tp, "topic name")
    add_compaction_verbs(n, tp)
    add_isolation_verbs(groups)
    add_broker_and_cluster_verbs(groups)
    add_bundle_verbs(groups)  # after the namespaces and brokers groups it adds verbs to
    add_permission_verbs(n, tp)
    add_schema_verbs(groups, n)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one verb. Every ordinary failure ends here as one ``error: ...`` line and exit code 1:
    the broker's refusal with its HTTP status, a failure before any answer (admin_http.py), and a
    bad name or value caught before anything is sent (cli/user_errors.py says which are ordinary)."""
    args = build_parser().parse_args(argv)
    try:
        use_security(security_from_args(args))
        _out(run(args))
    except AdminError as exc:
        status = f" (HTTP {exc.status})" if exc.status else ""
        print(f"error: {' '.join(exc.reason.split())}{status}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return INTERRUPTED
    except ORDINARY as exc:
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
