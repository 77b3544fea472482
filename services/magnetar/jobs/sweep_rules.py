"""What the retention sweep finds removable in one topic: the broker's own rule, on its internal stats.

No Spark here: ``retention_sweep`` fans ``sweep_topic`` out over executors, one call per (partition)
topic; ``verdict_of`` is the pure part, on a topic's ``internalStats`` and its effective policies.

**Same rule as the broker.** The ledgers removable under retention are what
``managed_ledger/retention_rule.py`` says — the function ``ManagedLedger.trimmable`` calls — fed with
the ledger list (ids, entries, sizes, close times), the durable cursors' mark-delete positions,
``retainFrom`` and ``lastConfirmedEntry`` of the topic's internal stats, and the retention policy.

**Effective policies** as the broker resolves them (``broker/policies/model.py``, which a job may not
import): topic-level field over namespace-level field, a partition taking its partitioned topic's
topic-level policies; unset retention is 0/0 (the broker has no default retention) and unset TTL
is none. The namespace's policies are read once per namespace on the driver (``GET
/admin/v2/namespaces/{t}/{ns}``), the topic's on the executor (``GET .../{topic}/retention`` and
``.../messageTTL``; Pulsar's ``?applied=true`` is not served here).

**TTL at ledger granularity.** The broker expires (acknowledges) a subscription's messages published
more than TTL seconds ago. The internal stats carry no publish times, only each closed ledger's close
time, so the sweep counts a closed ledger as wholly expired when it was closed more than TTL seconds
before ``now``. That is conservative: a ledger is closed after its last entry was added, so its close
time is at or after every publish time in it, and a ledger closed before ``now - TTL`` holds nothing
published after it. What it can under-report: a ledger closed after ``now - TTL`` whose first messages
are already past the TTL (the broker expires those entries, and may then trim that ledger too), and
everything newer in a topic where one ledger's close time is not yet past the TTL (the walk stops
there). The ledger being written (close time 0) never expires as a whole. Expiry moves every durable
subscription's cursor but not compaction's (``__compaction``, as the broker's TTL check) nor what
``retainFrom`` holds. A ledger removable only once TTL expiry has moved the cursors is reported with
reason "ttl"; applying it means expiring those subscriptions first, then trimming.

Unacknowledged data is never reported, except data the TTL policy already condemns.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.jobs.admin_client import AdminClient, AdminError, topic_path
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.retention_rule import Removal, removable_ledgers, slowest_position
from magnetar.protocol.topic_name import TopicName

# The compaction cursor: message TTL never moves it (broker/policies/expiry.py).
COMPACTION_CURSOR = "__compaction"
RETENTION_FIELD = "retention_policies"
TTL_FIELD = "message_ttl_in_seconds"


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    """The retention (minutes, MB; -1 = no limit) and TTL (seconds; 0 = none) a topic runs with."""

    retention_minutes: int = 0
    retention_mb: int = 0
    ttl_seconds: int = 0


def merge_policies(namespace: Mapping[str, Any] | None, topic: Mapping[str, Any] | None) -> TopicPolicies:
    """Topic level over namespace level, field by field (``EffectivePolicies.resolve``). Both are
    policy documents keyed by the stored field names (``retention_policies``,
    ``message_ttl_in_seconds``); None or a missing field means unset."""
    merged: dict[str, Any] = {k: v for k, v in (namespace or {}).items() if v is not None}
    merged.update({k: v for k, v in (topic or {}).items() if v is not None})
    retention = merged.get(RETENTION_FIELD) or {}
    return TopicPolicies(
        int(retention.get("retentionTimeInMinutes", 0)),
        int(retention.get("retentionSizeInMB", 0)),
        int(merged.get(TTL_FIELD) or 0),
    )


@dataclass(frozen=True, slots=True)
class LedgerStat:
    """One ledger of a topic's internal stats (``retention_rule.LedgerFacts``)."""

    ledger_id: int
    entries: int
    size: int
    closed_at: float  # epoch seconds; 0 while the ledger is being written
    messages: int


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One removable ledger: a row of the Parquet report (``retention_sweep.REPORT_SCHEMA``)."""

    tenant: str
    namespace: str
    topic: str
    ledger_id: int
    entries: int
    messages: int
    bytes: int
    closed_at_ms: int
    reason: str


@dataclass(slots=True)
class TopicVerdict:
    """What one topic may lose, and how to make its broker remove it."""

    topic: str
    rows: list[ReportRow] = field(default_factory=list)
    policies: TopicPolicies = TopicPolicies()
    # Subscriptions to expire (with ``policies.ttl_seconds``) before trimming: set when some row is "ttl".
    expire: list[str] = field(default_factory=list)
    error: str | None = None


def parse_position(text: str | None) -> Position | None:
    """``"L:E"`` (internal stats) -> Position; None for None."""
    if text is None:
        return None
    ledger, _, entry = str(text).partition(":")
    return Position(int(ledger), int(entry))


def ledgers_of(stats: Mapping[str, Any]) -> list[LedgerStat]:
    return [
        LedgerStat(
            int(doc["ledgerId"]),
            int(doc.get("entries", 0)),
            int(doc.get("size", 0)),
            int(doc.get("timestamp", 0)) / 1000.0,
            int(doc.get("messages", doc.get("entries", 0))),  # entries when the broker has no counts
        )
        for doc in stats.get("ledgers") or []
    ]


def ttl_horizon(ledgers: list[LedgerStat], current: int | None, now: float, ttl_seconds: int) -> Position | None:
    """The last entry of the newest ledger that TTL expires wholly (module docstring), or None."""
    if ttl_seconds <= 0:
        return None
    horizon: Position | None = None
    for info in ledgers:
        if info.ledger_id == current or info.closed_at <= 0 or now - info.closed_at <= ttl_seconds:
            break
        horizon = Position(info.ledger_id, info.entries - 1)
    return horizon


def verdict_of(topic: str, stats: Mapping[str, Any], policies: TopicPolicies, now: float) -> TopicVerdict:
    """The removable ledgers of ``topic`` at ``now`` (epoch seconds), from its internal stats."""
    name = TopicName.parse(topic)
    ledgers = ledgers_of(stats)
    current = ledgers[-1].ledger_id if ledgers and stats.get("state") == "LedgerOpened" else None
    last_confirmed = parse_position(stats.get("lastConfirmedEntry")) or Position(-1, -1)
    retain_from = parse_position(stats.get("retainFrom"))
    marks = {
        sub: parse_position(doc.get("markDeletePosition")) or Position(-1, -1)
        for sub, doc in (stats.get("cursors") or {}).items()
    }

    def removals(cursor_marks: Mapping[str, Position]) -> list[Removal]:
        return removable_ledgers(
            ledgers,
            current=current,
            slowest=slowest_position(cursor_marks.values(), retain_from, last_confirmed),
            now=now,
            retention_minutes=policies.retention_minutes,
            retention_mb=policies.retention_mb,
        )

    plain = {r.ledger_id: r.reason for r in removals(marks)}
    horizon = ttl_horizon(ledgers, current, now, policies.ttl_seconds)
    expired = dict(marks)
    if horizon is not None:
        expired = {sub: mark if sub == COMPACTION_CURSOR else max(mark, horizon) for sub, mark in marks.items()}
    by_id = {info.ledger_id: info for info in ledgers}
    verdict = TopicVerdict(topic, policies=policies)
    for removal in removals(expired):
        info = by_id[removal.ledger_id]
        reason = plain.get(removal.ledger_id, "ttl")
        verdict.rows.append(
            ReportRow(
                name.tenant,
                name.namespace,
                topic,
                info.ledger_id,
                info.entries,
                info.messages,
                info.size,
                int(info.closed_at * 1000),
                reason,
            )
        )
    if any(row.reason == "ttl" for row in verdict.rows):
        verdict.expire = sorted(sub for sub, mark in marks.items() if expired[sub] > mark)
    return verdict


def topic_policies(admin: AdminClient, topic: str, namespace_policies: Mapping[str, Any] | None) -> TopicPolicies:
    """The effective retention and TTL of ``topic`` (a partition reads its partitioned topic's)."""
    name = TopicName.parse(topic)
    owner = str(name.partitioned_base) if name.partition_index >= 0 else topic
    own = {
        RETENTION_FIELD: admin.get(f"{topic_path(owner)}/retention", ok_missing=True),
        TTL_FIELD: admin.get(f"{topic_path(owner)}/messageTTL", ok_missing=True),
    }
    return merge_policies(namespace_policies, own)


def sweep_topic(admin_url: str, now: float, item: tuple[str, Mapping[str, Any] | None]) -> TopicVerdict:
    """Executor side: fetch ``item`` = (topic, its namespace's policies) and judge it. A failure is
    kept in the verdict (``error``) so that one unreachable topic does not fail the whole sweep."""
    topic, namespace_policies = item
    admin = AdminClient(admin_url)
    try:
        policies = topic_policies(admin, topic, namespace_policies)
        return verdict_of(topic, admin.internal_stats(topic), policies, now)
    except (AdminError, ValueError, KeyError, TypeError) as exc:
        return TopicVerdict(topic, error=f"{type(exc).__name__}: {exc}")


def apply_verdict(admin_url: str, verdict: TopicVerdict) -> tuple[str, list[int], str | None]:
    """Executor side, with ``apply``: expire the subscriptions TTL condemns, then ask the owner to
    trim (``POST .../trim``); returns the topic, the reported ledgers still there afterwards (the
    broker found them not removable after all: a consumer moved back, a policy changed) and an
    error, if any. Only the broker deletes."""
    admin = AdminClient(admin_url)
    path = topic_path(verdict.topic)
    try:
        for sub in verdict.expire:
            quoted = urllib.parse.quote(sub, safe="")
            admin.post(f"{path}/subscription/{quoted}/expireMessages/{verdict.policies.ttl_seconds}")
        admin.post(f"{path}/trim")
        left = {int(doc["ledgerId"]) for doc in admin.internal_stats(verdict.topic).get("ledgers") or []}
    except AdminError as exc:
        return verdict.topic, [row.ledger_id for row in verdict.rows], str(exc)
    return verdict.topic, [row.ledger_id for row in verdict.rows if row.ledger_id in left], None
