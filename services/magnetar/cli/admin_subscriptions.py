"""``magnetar-admin topics``' subscription verbs, with pulsar-admin's flags and output.

``create-subscription -s SUB [-m ID]``, ``unsubscribe -s SUB [-f]``,
``reset-cursor -s SUB (-t TIME | -m ID) [-e]``, ``skip -s SUB -n N``, ``clear-backlog -s SUB``,
``expire-messages -s SUB -t TIME``, ``expire-messages-all-subscriptions -t TIME`` and
``peek-messages -s SUB [-n N]``. Times are pulsar-admin's relative times (cli/admin_units.py);
message ids are ``ledgerId:entryId``, ``earliest`` or ``latest``. ``peek-messages`` prints each
message as pulsar-admin does (its headers, then a hex dump laid out like Netty's), so that output
read by people or scripts used to pulsar-admin looks the same.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from magnetar.cli.admin_http import AdminError, request, request_raw
from magnetar.cli.admin_units import relative_seconds

SUBSCRIPTION_ACTIONS = frozenset(
    {
        "create-subscription",
        "unsubscribe",
        "reset-cursor",
        "skip",
        "clear-backlog",
        "expire-messages",
        "expire-messages-all-subscriptions",
        "peek-messages",
    }
)

# Pulsar's MessageId.latest.
_LATEST = 2**63 - 1


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


def add_subscription_verbs(topics: Any) -> None:
    """The subscription verbs of the ``topics`` group, in pulsar-admin's order."""
    sp = topics.add_parser("create-subscription", help="create a durable subscription without a consumer")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument(
        "-m", "--messageId", dest="message_id", default="latest", help="ledgerId:entryId, earliest or latest (default)"
    )
    sp = topics.add_parser("unsubscribe", help="delete a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-f", "--force", action="store_true", help="even with connected consumers")
    sp = topics.add_parser("reset-cursor", help="move a subscription to a time or a message id")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-t", "--time", type=relative_seconds, help="how far back (e.g. 100m, 3h, 2d, 5w; seconds)")
    sp.add_argument("-m", "--messageId", dest="message_id", help="ledgerId:entryId, earliest or latest")
    sp.add_argument("-e", "--exclude-reset-position", dest="exclude", action="store_true")
    sp = topics.add_parser("skip", help="skip messages of a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-n", "--count", type=int, required=True, help="number of messages to skip")
    sp = topics.add_parser("clear-backlog", help="skip all the messages of a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp = topics.add_parser("expire-messages", help="expire messages older than a time for a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-t", "--expireTime", dest="expire_time", type=relative_seconds, required=True)
    sp = topics.add_parser("expire-messages-all-subscriptions", help="expire messages older than a time")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-t", "--expireTime", dest="expire_time", type=relative_seconds, required=True)
    sp = topics.add_parser("peek-messages", help="print the next messages of a subscription")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-s", "--subscription", required=True)
    sp.add_argument("-n", "--count", type=int, default=1, help="number of messages (default 1)")


def run_subscription_verb(url: str, path: str, args: argparse.Namespace) -> Any:
    """Run the subscription verb ``args.action`` on the topic at REST ``path``."""
    a = args.action
    if a == "expire-messages-all-subscriptions":
        return request(url, "POST", f"{path}/all_subscription/expireMessages/{args.expire_time}")
    force = "?force=true" if getattr(args, "force", False) else ""
    sub = f"{path}/subscription/{urllib.parse.quote(args.subscription, safe='')}"
    if a == "reset-cursor":
        if args.message_id:
            return request(url, "POST", sub + "/resetcursor", message_id_body(args.message_id, args.exclude))
        if args.time is not None:
            return request(url, "POST", f"{sub}/resetcursor/{int(time.time() * 1000) - args.time * 1000}")
        raise AdminError(0, "Either Timestamp (--time) or messageId (--messageId) has to be provided to reset cursor")
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
    raise SystemExit(f"unknown command topics {a}")
