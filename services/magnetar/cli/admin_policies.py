"""``magnetar-admin``'s policy verbs, the same for ``namespaces`` and ``topics``: rates, deduplication,
retention, message TTL and backlog quotas, with pulsar-admin's names, flags and units.

Each family is a pair: ``add_*_verbs`` declares the subcommands on a group and ``run_*_verb``
sends the request for one of them to a namespace's or a topic's REST path, so that a namespace
and a topic take the same flags and differ only in the path (and, for deduplication, in Pulsar's
REST segment). ``is_policy_verb`` and ``run_policy_verb`` are what the command's dispatch asks.
"""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.cli.admin_http import request
from magnetar.cli.admin_units import relative_seconds, size_bytes, time_or_infinite

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


def is_policy_verb(action: str) -> bool:
    """Whether ``action`` is a rate, deduplication, retention, TTL or backlog quota verb."""
    return action.partition("-")[2] in _RATE_VERBS or action in _DEDUP_ACTIONS or action in _RETENTION_ACTIONS


def run_policy_verb(url: str, path: str, args: argparse.Namespace, *, topic_level: bool) -> Any:
    """Run the policy verb ``args.action`` against ``path`` (a namespace's or a topic's)."""
    a = args.action
    if a.partition("-")[2] in _RATE_VERBS:
        return run_rate_verb(url, path, args)
    if a in _DEDUP_ACTIONS:
        return run_dedup_verb(url, path, args, topic_level=topic_level)
    return run_retention_verb(url, path, args)
