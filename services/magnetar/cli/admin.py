"""``magnetar-admin``: the admin REST API from the shell, with pulsar-admin's verbs.

It uses only the standard library (urllib) so that it works wherever the client works.
Errors print the broker's ``reason`` and exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from magnetar.protocol.topic_name import TopicName

DEFAULT_URL = os.environ.get("MAGNETAR_ADMIN_URL", "http://127.0.0.1:8080")


class AdminError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            reason = json.loads(text).get("reason", text)
        except (ValueError, AttributeError):
            reason = text
        raise AdminError(exc.code, reason) from None
    except urllib.error.URLError as exc:
        raise AdminError(0, f"cannot reach {base}: {exc.reason}") from None
    return json.loads(raw) if raw.strip() else None


def _topic_path(name: str) -> str:
    return TopicName.parse(name).path


def _out(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, list):
        for item in value:
            print(item)
    else:
        print(json.dumps(value, indent=2, sort_keys=True))


def run(args: argparse.Namespace) -> Any:
    url = args.admin_url
    g, a = args.group, args.action
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
        if a == "create":
            return request(url, "PUT", path)
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
        if a == "set-retention":
            return request(
                url,
                "POST",
                path + "/retention",
                {"retentionTimeInMinutes": args.time, "retentionSizeInMB": args.size},
            )
        if a == "set-message-ttl":
            return request(url, "POST", path + "/messageTTL", args.ttl)
    if g == "topics":
        if a == "list":
            return request(url, "GET", f"/admin/v2/persistent/{args.name}")
        if a == "list-partitioned-topics":
            return request(url, "GET", f"/admin/v2/persistent/{args.name}/partitioned")
        path = f"/admin/v2/persistent/{_topic_path(args.name)}"
        force = "?force=true" if getattr(args, "force", False) else ""
        if a == "create":
            return request(url, "PUT", path)
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
        if a == "lookup":
            return request(url, "GET", f"/lookup/v2/topic/persistent/{_topic_path(args.name)}")
        if a == "partitioned-stats":
            return request(url, "GET", path + "/partitioned-stats")
    raise SystemExit(f"unknown command {g} {a}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="magnetar-admin", description="Administer a Magnetar cluster")
    p.add_argument("--admin-url", default=DEFAULT_URL, help="broker admin URL (env MAGNETAR_ADMIN_URL)")
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
    sp = n.add_parser("set-retention")
    sp.add_argument("name")
    sp.add_argument("--time", type=int, required=True, help="minutes (-1: infinite)")
    sp.add_argument("--size", type=int, required=True, help="MB (-1: infinite)")
    sp = n.add_parser("set-message-ttl")
    sp.add_argument("name")
    sp.add_argument("--ttl", type=int, required=True, help="seconds")

    tp = groups.add_parser("topics").add_subparsers(dest="action", required=True)
    tp.add_parser("list").add_argument("name", help="tenant/namespace")
    tp.add_parser("list-partitioned-topics").add_argument("name", help="tenant/namespace")
    for verb in (
        "create",
        "delete",
        "stats",
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _out(run(args))
    except AdminError as exc:
        print(f"error: {exc.reason} (HTTP {exc.status})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
