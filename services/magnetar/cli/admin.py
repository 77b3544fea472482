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

from magnetar.protocol.topic_name import TopicName

DEFAULT_URL = os.environ.get("MAGNETAR_ADMIN_URL", "http://127.0.0.1:8080")


class AdminError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def _open(base: str, req: urllib.request.Request, timeout: float) -> tuple[Mapping[str, str], bytes]:
    """Send ``req``; its headers and body, or ``AdminError`` with the broker's ``reason``."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
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
