"""``magnetar-admin``: the admin REST API from the shell, with pulsar-admin's verbs.

It uses only the standard library (urllib) so that it works wherever the client works.
Errors print the broker's ``reason`` and exit non-zero.

The subscription verbs take pulsar-admin's flags: ``reset-cursor -s SUB (-t TIME | -m ID) [-e]``,
``skip -s SUB -n N``, ``clear-backlog -s SUB``, ``expire-messages -s SUB -t TIME``,
``expire-messages-all-subscriptions -t TIME`` and ``peek-messages -s SUB [-n N]``. Times are
pulsar-admin's relative times: a number of seconds, or a number with a unit ``s``, ``m``,
``h``, ``d``, ``w`` or ``y`` (``10m``); message ids are ``ledgerId:entryId``, ``earliest`` or
``latest``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from magnetar.cli.admin_auth import HttpSecurity, add_auth_flags, security_from_args
from magnetar.cli.admin_compaction import COMPACTION_ACTIONS, add_compaction_verbs, run_compaction_verb
from magnetar.cli.admin_isolation import GROUP as ISOLATION_GROUP
from magnetar.cli.admin_isolation import add_isolation_verbs, run_isolation_verb
from magnetar.cli.admin_permissions import add_permission_verbs, is_permission_verb, run_permission_verb
from magnetar.cli.admin_schemas import add_schema_verbs, is_schema_verb, run_schema_verb
from magnetar.protocol.topic_name import TopicName

DEFAULT_URL = os.environ.get("MAGNETAR_ADMIN_URL", "http://127.0.0.1:8080")
# Credentials and TLS for every request (cli/admin_auth.py), set once by ``main`` from the flags.
_security = HttpSecurity()


class AdminError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def _open(base: str, req: urllib.request.Request, timeout: float) -> tuple[Mapping[str, str], bytes]:
    """Send ``req``; its headers and body, or ``AdminError`` with the broker's ``reason``."""
    try:
        for name, value in _security.headers().items():
            req.add_header(name, value)
    except OSError as exc:  # a token file that cannot be read
        raise AdminError(0, f"cannot read the token: {exc}") from None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_security.ssl_context) as resp:
            return dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            reason = json.loads(text).get("reason", text)
        except (ValueError, AttributeError):
            reason = text
        raise AdminError(exc.code, reason) from None
    except urllib.error.URLError as exc:
        raise AdminError(0, f"cannot reach {base}: {exc.reason}") from None


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    _, raw = _open(base, req, timeout)
    return json.loads(raw) if raw.strip() else None


def request_raw(base: str, method: str, path: str, timeout: float = 30) -> tuple[Mapping[str, str], bytes]:
    """Like ``request`` for an answer that is not JSON (peek): its headers and body."""
    return _open(base, urllib.request.Request(base.rstrip("/") + path, method=method), timeout)


_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}

# Pulsar's MessageId.latest.
_LATEST = 2**63 - 1


def relative_seconds(text: str) -> int:
    """pulsar-admin's relative time (RelativeTimeUtil): ``30`` is seconds, ``10m`` minutes,
    and ``s``/``m``/``h``/``d``/``w``/``y`` units."""
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError("time cannot be empty")
    unit = text[-1].lower() if text[-1].isalpha() else "s"
    number = text[:-1] if text[-1].isalpha() else text
    if unit not in _UNIT_SECONDS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: a number with an optional unit s, m, h, d, w or y")
    return int(number) * _UNIT_SECONDS[unit]


def message_id_body(text: str, excluded: bool) -> dict[str, Any]:
    """The ResetCursorData body for ``-m``: ``earliest``, ``latest`` or ``ledgerId:entryId``."""
    if text == "earliest":
        ledger, entry = -1, -1
    elif text == "latest":
        ledger, entry = _LATEST, _LATEST
    else:
        parts = text.split(":")
        try:
            ledger, entry = int(parts[0]), int(parts[1])
        except (IndexError, ValueError):
            raise AdminError(0, f"invalid message id {text!r}: use ledgerId:entryId, earliest or latest") from None
    return {"ledgerId": ledger, "entryId": entry, "partitionIndex": -1, "batchIndex": -1, "isExcluded": excluded}


def hex_dump(data: bytes) -> str:
    """A dump of ``data`` laid out like the one pulsar-admin prints (Netty's prettyHexDump)."""
    lines = [
        "         +-------------------------------------------------+",
        "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
        "+--------+-------------------------------------------------+----------------+",
    ]
    for offset in range(0, len(data), 16):
        row = data[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"|{offset:08x}| {hexes:<47} |{text:<16}|")
    lines.append("+--------+-------------------------------------------------+----------------+")
    return "\n".join(lines)


def _millis(header: str | None) -> int | None:
    if not header:
        return None
    return round(datetime.datetime.fromisoformat(header).timestamp() * 1000)


def print_peeked(headers: Mapping[str, str], payload: bytes) -> None:
    """One peeked message, as pulsar-admin's ``peek-messages`` prints it."""
    h = {k.lower(): v for k, v in headers.items()}
    msg_id = h.get("x-pulsar-message-id", "")
    if "x-pulsar-batch-index" in h:
        print(f"Batch Message ID: {msg_id}:{h['x-pulsar-batch-index']}")
    else:
        print(f"Message ID: {msg_id}")
    print(f"Publish time: {_millis(h.get('x-pulsar-publish-time'))}")
    print(f"Event time: {_millis(h.get('x-pulsar-event-time')) or 0}")
    if "x-pulsar-deliver-at-time" in h:
        print(f"Deliver at time: {_millis(h['x-pulsar-deliver-at-time'])}")
    if "x-pulsar-partition-key" in h:
        print(f"Key: {h['x-pulsar-partition-key']}")
    if "x-pulsar-property" in h:
        print("Properties:")
        print(json.dumps(json.loads(h["x-pulsar-property"]), indent=2, sort_keys=True))
    print(hex_dump(payload))


def _peek(url: str, path: str, count: int) -> None:
    for n in range(1, count + 1):
        try:
            headers, payload = request_raw(url, "GET", f"{path}/position/{n}")
        except AdminError as exc:
            if exc.status == 404 and n > 1:  # fewer messages than asked for
                return
            raise
        if n > 1:
            print("-------------------------------------------------------------------------\n")
        print_peeked(headers, payload)


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


# Rate-limit verbs, the same for namespaces and topics: ``{get,set,remove}-<what>`` -> REST segment.
_RATE_VERBS = {
    "publish-rate": "publishRate",
    "dispatch-rate": "dispatchRate",
    "subscription-dispatch-rate": "subscriptionDispatchRate",
}


def add_rate_verbs(group: Any, target: str) -> None:
    """pulsar-admin's rate verbs and flags (a flag left out is -1: no limit, as pulsar-admin sends)."""
    for what in _RATE_VERBS:
        for op in ("get", "remove"):
            group.add_parser(f"{op}-{what}").add_argument("name", help=target)
        sp = group.add_parser(f"set-{what}")
        sp.add_argument("name", help=target)
        if what == "publish-rate":
            sp.add_argument("-m", "--msg-publish-rate", type=int, default=-1, help="messages/s (-1: no limit)")
            sp.add_argument("-b", "--byte-publish-rate", type=int, default=-1, help="bytes/s (-1: no limit)")
            continue
        sp.add_argument("-md", "--msg-dispatch-rate", type=int, default=-1, help="messages per period (-1: no limit)")
        sp.add_argument("-bd", "--byte-dispatch-rate", type=int, default=-1, help="bytes per period (-1: no limit)")
        sp.add_argument("-dt", "--dispatch-rate-period", type=int, default=1, help="period in seconds (default 1)")
        sp.add_argument("-rp", "--relative-to-publish-rate", action="store_true", help="limit = publish rate + this")


def run_rate_verb(url: str, path: str, args: argparse.Namespace) -> Any:
    op, _, what = args.action.partition("-")
    target = f"{path}/{_RATE_VERBS[what]}"
    if op == "get":
        return request(url, "GET", target)
    if op == "remove":
        return request(url, "DELETE", target)
    if what == "publish-rate":
        body = {
            "publishThrottlingRateInMsg": args.msg_publish_rate,
            "publishThrottlingRateInByte": args.byte_publish_rate,
        }
    else:
        body = {
            "dispatchThrottlingRateInMsg": args.msg_dispatch_rate,
            "dispatchThrottlingRateInByte": args.byte_dispatch_rate,
            "ratePeriodInSecond": args.dispatch_rate_period,
            "relativeToPublishRate": args.relative_to_publish_rate,
        }
    return request(url, "POST", target, body)


# Deduplication verbs, as pulsar-admin's namespaces/topics ones. The enable flag's REST segment
# differs by level (Pulsar's paths): namespaces/{ns}/deduplication, {topic}/deduplicationEnabled.
_DEDUP_VERBS = ("deduplication", "deduplication-snapshot-interval")
_DEDUP_ACTIONS = frozenset(
    [f"{op}-{what}" for op in ("set", "get", "remove") for what in _DEDUP_VERBS]
    + ["enable-deduplication", "disable-deduplication"]
)


def add_dedup_verbs(group: Any, target: str, *, topic_level: bool) -> None:
    for what in _DEDUP_VERBS:
        for op in ("get", "remove"):
            group.add_parser(f"{op}-{what}").add_argument("name", help=target)
    sp = group.add_parser("set-deduplication", help="enable or disable message deduplication")
    sp.add_argument("name", help=target)
    on_off = sp.add_mutually_exclusive_group(required=True)
    on_off.add_argument("-e", "--enable", action="store_true", help="enable message deduplication")
    on_off.add_argument("-d", "--disable", action="store_true", help="disable message deduplication")
    sp = group.add_parser("set-deduplication-snapshot-interval", help="seconds between deduplication snapshots")
    sp.add_argument("name", help=target)
    sp.add_argument("-i", "--interval", type=int, required=True, help="seconds (0: by entries only)")
    if topic_level:  # pulsar-admin topics keeps these two (deprecated) verbs as well
        group.add_parser("enable-deduplication").add_argument("name", help=target)
        group.add_parser("disable-deduplication").add_argument("name", help=target)


def run_dedup_verb(url: str, path: str, args: argparse.Namespace, *, topic_level: bool) -> Any:
    op, _, what = args.action.partition("-")
    segment = "deduplicationEnabled" if topic_level else "deduplication"
    if what == "deduplication-snapshot-interval":
        segment = "deduplicationSnapshotInterval"
    target = f"{path}/{segment}"
    if op == "get":
        return request(url, "GET", target)
    if op == "remove":
        return request(url, "DELETE", target)
    if what == "deduplication-snapshot-interval":
        return request(url, "POST", target, args.interval)
    return request(url, "POST", target, op == "enable" or (op == "set" and bool(args.enable)))


# Retention, message TTL and backlog quota verbs, the same for namespaces and topics (pulsar-admin 3.x
# flags and units: times are relative times, seconds by default; sizes are bytes unless suffixed).
_RETENTION_ACTIONS = frozenset(
    f"{op}-{what}" for op in ("set", "get", "remove") for what in ("retention", "message-ttl", "backlog-quota")
) | {"get-backlog-quotas"}
_SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def size_bytes(text: str) -> int:
    """pulsar-admin's size (``4096``, ``10M``, ``16G``, ``3T``; k/m/g/t units); -1 is "no limit"."""
    text = text.strip()
    if text == "-1":
        return -1
    unit = text[-1].lower() if text and text[-1].isalpha() else ""
    number = text[:-1] if unit else text
    if (unit and unit not in _SIZE_UNITS) or not number.isdigit():
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: a number of bytes with an optional unit k, m, g or t")
    return int(number) * _SIZE_UNITS.get(unit, 1)


def time_or_infinite(text: str) -> int:
    """A relative time in seconds, or -1 (no limit)."""
    return -1 if text.strip() == "-1" else relative_seconds(text)


def add_retention_verbs(group: Any, target: str) -> None:
    """``{set,get,remove}-retention``, ``-message-ttl``, ``set-/remove-backlog-quota``, ``get-backlog-quotas``."""
    for verb in ("get-retention", "remove-retention", "get-message-ttl", "remove-message-ttl", "get-backlog-quotas"):
        group.add_parser(verb).add_argument("name", help=target)
    sp = group.add_parser("set-retention", help="keep acknowledged messages up to a time and a size")
    sp.add_argument("name", help=target)
    sp.add_argument("-t", "--time", type=time_or_infinite, required=True, help="e.g. 100m, 3h, 2d (-1: infinite)")
    sp.add_argument("-s", "--size", type=size_bytes, required=True, help="e.g. 10M, 16G (-1: infinite)")
    sp = group.add_parser("set-message-ttl", help="expire unacknowledged messages older than this")
    sp.add_argument("name", help=target)
    sp.add_argument("-ttl", "--messageTTL", "--ttl", dest="ttl", type=relative_seconds, required=True)
    sp = group.add_parser("set-backlog-quota", help="limit the backlog by size or by age")
    sp.add_argument("name", help=target)
    sp.add_argument("-l", "--limit", "--limitSize", dest="limit", type=size_bytes, default=-1, help="e.g. 2G")
    sp.add_argument("-lt", "--limitTime", dest="limit_time", type=time_or_infinite, default=-1, help="e.g. 3600, 1h")
    sp.add_argument(
        "-p",
        "--policy",
        required=True,
        choices=["producer_request_hold", "producer_exception", "consumer_backlog_eviction"],
    )
    sp.add_argument("-t", "--type", default="destination_storage", choices=["destination_storage", "message_age"])
    sp = group.add_parser("remove-backlog-quota")
    sp.add_argument("name", help=target)
    sp.add_argument("-t", "--type", default="destination_storage", choices=["destination_storage", "message_age"])


def run_retention_verb(url: str, path: str, args: argparse.Namespace) -> Any:
    a = args.action
    if a == "get-retention":
        return request(url, "GET", path + "/retention")
    if a == "remove-retention":
        return request(url, "DELETE", path + "/retention")
    if a == "set-retention":
        minutes = -1 if args.time < 0 else args.time // 60
        size_mb = -1 if args.size < 0 else args.size // (1024 * 1024)
        return request(
            url, "POST", path + "/retention", {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}
        )
    if a == "get-message-ttl":
        return request(url, "GET", path + "/messageTTL")
    if a == "remove-message-ttl":
        return request(url, "DELETE", path + "/messageTTL")
    if a == "set-message-ttl":
        return request(url, "POST", path + "/messageTTL", args.ttl)
    if a == "get-backlog-quotas":
        return request(url, "GET", path + "/backlogQuotaMap")
    query = f"/backlogQuota?backlogQuotaType={args.type}"
    if a == "remove-backlog-quota":
        return request(url, "DELETE", path + query)
    body = {"limitSize": args.limit, "limitTime": args.limit_time, "policy": args.policy}
    return request(url, "POST", path + query, body)


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
        if a.partition("-")[2] in _RATE_VERBS:
            return run_rate_verb(url, path, args)
        if a in _DEDUP_ACTIONS:
            return run_dedup_verb(url, path, args, topic_level=False)
        if a in _RETENTION_ACTIONS:
            return run_retention_verb(url, path, args)
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
    if g == "topics":
        if a == "list":  # both domains unless --topic-domain says one, as pulsar-admin
            domains = [args.topic_domain.replace("_", "-")] if args.topic_domain else ["persistent", "non-persistent"]
            return sorted(name for d in domains for name in request(url, "GET", f"/admin/v2/{d}/{args.name}"))
        if a == "list-partitioned-topics":
            return request(url, "GET", f"/admin/v2/persistent/{args.name}/partitioned")
        path = f"/admin/v2/{TopicName.parse(args.name).domain}/{_topic_path(args.name)}"
        force = "?force=true" if getattr(args, "force", False) else ""
        if a.partition("-")[2] in _RATE_VERBS:
            return run_rate_verb(url, path, args)
        if a in _DEDUP_ACTIONS:
            return run_dedup_verb(url, path, args, topic_level=True)
        if a in _RETENTION_ACTIONS:
            return run_retention_verb(url, path, args)
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
        if a == "expire-messages-all-subscriptions":
            return request(url, "POST", f"{path}/all_subscription/expireMessages/{args.expire_time}")
        sub = f"{path}/subscription/{urllib.parse.quote(args.subscription, safe='')}"
        if a == "reset-cursor":
            if args.message_id:
                return request(url, "POST", sub + "/resetcursor", message_id_body(args.message_id, args.exclude))
            if args.time is not None:
                return request(url, "POST", f"{sub}/resetcursor/{int(time.time() * 1000) - args.time * 1000}")
            raise AdminError(
                0, "Either Timestamp (--time) or messageId (--messageId) has to be provided to reset cursor"
            )
        if a == "skip":
            return request(url, "POST", f"{sub}/skip/{args.count}")
        if a == "clear-backlog":
            return request(url, "POST", sub + "/skip_all")
        if a == "expire-messages":
            return request(url, "POST", f"{sub}/expireMessages/{args.expire_time}")
        if a == "peek-messages":
            _peek(url, sub, args.count)
            return None
        if a == "create-subscription":
            return request(url, "PUT", sub, message_id_body(args.message_id, False))
        if a == "unsubscribe":
            return request(url, "DELETE", sub + force)
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
    sp = tp.add_parser("create-subscription", help="create a durable subscription without a consumer")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument(
        "-m", "--messageId", dest="message_id", default="latest", help="ledgerId:entryId, earliest or latest (default)"
    )
    sp = tp.add_parser("unsubscribe", help="delete a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-f", "--force", action="store_true", help="even with connected consumers")
    sp = tp.add_parser("reset-cursor", help="move a subscription to a time or a message id")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-t", "--time", type=relative_seconds, help="how far back (e.g. 100m, 3h, 2d, 5w; seconds)")
    sp.add_argument("-m", "--messageId", dest="message_id", help="ledgerId:entryId, earliest or latest")
    sp.add_argument("-e", "--exclude-reset-position", dest="exclude", action="store_true")
    sp = tp.add_parser("skip", help="skip messages of a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-n", "--count", type=int, required=True, help="number of messages to skip")
    sp = tp.add_parser("clear-backlog", help="skip all the messages of a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp = tp.add_parser("expire-messages", help="expire messages older than a time for a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-t", "--expireTime", dest="expire_time", type=relative_seconds, required=True)
    sp = tp.add_parser("expire-messages-all-subscriptions", help="expire messages older than a time")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-t", "--expireTime", dest="expire_time", type=relative_seconds, required=True)
    sp = tp.add_parser("peek-messages", help="print the next messages of a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-n", "--count", type=int, default=1, help="number of messages (default 1)")
    add_rate_verbs(n, "tenant/namespace")
    add_rate_verbs(tp, "topic name")
    add_dedup_verbs(n, "tenant/namespace", topic_level=False)
    add_dedup_verbs(tp, "topic name", topic_level=True)
    add_retention_verbs(n, "tenant/namespace")
    add_retention_verbs(tp, "topic name")
    add_compaction_verbs(n, tp)
    add_isolation_verbs(groups)
    add_permission_verbs(n, tp)
    add_schema_verbs(groups, n)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    global _security
    _security = security_from_args(args)
    try:
        _out(run(args))
    except AdminError as exc:
        print(f"error: {exc.reason} (HTTP {exc.status})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
