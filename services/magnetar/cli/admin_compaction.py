"""``magnetar-admin`` compaction verbs, as pulsar-admin's.

``topics compact <topic>`` and ``topics compaction-status <topic> [-w]`` (its messages are
pulsar-admin's; an ERROR status exits 1 with the broker's ``lastError``), and
``{namespaces,topics} {set,get,remove}-compaction-threshold`` (``-t 10M``: bytes, with pulsar-admin's
k/m/g/t suffixes).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

COMPACTION_ACTIONS = frozenset(
    {
        "compact",
        "compaction-status",
        "set-compaction-threshold",
        "get-compaction-threshold",
        "remove-compaction-threshold",
    }
)
_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def size_bytes(text: str) -> int:
    """pulsar-admin's size strings: ``2048``, ``10k``, ``10M``, ``1G``, ``1T``."""
    raw = text.strip()
    unit = _UNITS.get(raw[-1:].lower(), 1) if raw else 1
    number = raw[:-1] if unit != 1 else raw
    try:
        value = int(number) * unit
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (bytes, or with a k/m/g/t suffix)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"size must not be negative, got {text!r}")
    return value


def add_compaction_verbs(namespaces: Any, topics: Any) -> None:
    sp = topics.add_parser("compact", help="compact a topic (the latest message of each key)")
    sp.add_argument("name", help="topic name")
    sp = topics.add_parser("compaction-status", help="the status of the topic's last compaction")
    sp.add_argument("name", help="topic name")
    sp.add_argument("-w", "--wait-complete", action="store_true", help="wait for a running compaction to finish")
    for group, what in ((namespaces, "tenant/namespace"), (topics, "topic name")):
        sp = group.add_parser("set-compaction-threshold", help="compact automatically past this many bytes")
        sp.add_argument("name", help=what)
        sp.add_argument("-t", "--threshold", type=size_bytes, required=True, help="bytes (k/m/g/t suffixes; 0: off)")
        group.add_parser("get-compaction-threshold").add_argument("name", help=what)
        group.add_parser("remove-compaction-threshold").add_argument("name", help=what)


def run_compaction_verb(
    url: str,
    args: argparse.Namespace,
    request: Callable[..., Any],
    topic_path: Callable[[str], str],
    fail: Callable[[str], BaseException],
) -> Any:
    """Run one verb; ``request`` is ``admin.request``, ``topic_path`` the REST path of a topic,
    ``fail`` makes the error that ends the command with exit status 1."""
    a = args.action
    path = f"/admin/v2/namespaces/{args.name}" if args.group == "namespaces" else topic_path(args.name)
    if a == "compact":
        request(url, "PUT", path + "/compaction")
        print(f"Topic compaction requested for {args.name}")
        return None
    if a == "compaction-status":
        status = request(url, "GET", path + "/compaction")
        while args.wait_complete and status.get("status") == "RUNNING":
            time.sleep(1)
            status = request(url, "GET", path + "/compaction")
        state = status.get("status")
        if state == "NOT_RUN":
            print(f"Compaction has not been run for {args.name} since broker startup")
        elif state == "RUNNING":
            print("Compaction is currently running")
        elif state == "SUCCESS":
            print("Compaction was a success")
        else:
            print("Error in compaction")
            raise fail(f"Error compacting: {status.get('lastError', '')}")
        return None
    target = path + "/compactionThreshold"
    if a == "get-compaction-threshold":
        return request(url, "GET", target)
    if a == "remove-compaction-threshold":
        return request(url, "DELETE", target)
    return request(url, "POST", target, args.threshold)
