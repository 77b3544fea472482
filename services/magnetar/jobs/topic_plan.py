"""Planning a read of topics straight from the bookies: which ledger ranges, on which bookies.

Runs on the Spark driver (the data source's ``partitions()``) and in the export job, with nothing
but the admin REST API: ``internalStats?metadata=true`` of each partition topic gives its ledgers,
their entry counts, close times and ensembles, and ``GET /admin/v2/bookies`` turns bookie ids into
TCP addresses. No Spark here, so the planning rules are testable on their own.

What is read, and why it is durable: a topic is read up to its ``lastConfirmedEntry`` at planning
time (or ``endAt`` when that is earlier). The broker confirms an entry to its producer only once
``Qa`` bookies stored it, so every planned entry has at least ``Qa`` copies, and a producer that is
still running is never read past what it was acknowledged when the plan was made. Entries added
later belong to the next run (the export commits ``ReadPlan.end_positions`` and starts after them).

Positions are ``(ledger_id, entry_id)`` tuples, written ``"ledger:entry"`` in options; ``startAfter``
is exclusive, ``endAt`` inclusive, both per partition topic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from magnetar.jobs.admin_client import AdminClient, AdminError
from magnetar.protocol.topic_name import TopicName

Position = tuple[int, int]

DEFAULT_ENTRIES_PER_RANGE = 5000
# Admin calls made at once while planning many topics (a namespace of a thousand topics).
PLAN_CONCURRENCY = 8


class TopicNotFoundError(LookupError):
    """A topic named in the options does not exist (the message names it)."""


@dataclass(frozen=True)
class LedgerRange:
    """Entries ``first_entry..last_entry`` (inclusive) of one ledger of one partition topic.

    Plain data only: it travels to the Spark executors inside an ``InputPartition`` (pickled).
    ``metadata`` is the ledger's metadata document from internalStats (ensembles, quorums);
    ``bookies`` maps the ids of its ensembles' bookies to ``(host, port)`` (an id missing there
    was not registered at planning time: that replica is tried last and fails).
    ``closed_at_ms`` is the ledger's close time (0 while open): no message in it was published
    later, which lets a publish-time filter skip the whole ledger. ``tls_bookies``: the ids of
    those bookies that registered ``tls: true`` (their port speaks only TLS, WIRE.md R84).
    """

    topic: str
    partition: int
    ledger_id: int
    first_entry: int
    last_entry: int
    metadata: dict[str, Any]
    bookies: dict[str, tuple[str, int]] = field(default_factory=dict)
    closed_at_ms: int = 0
    tls_bookies: tuple[str, ...] = ()

    @property
    def entries(self) -> int:
        return self.last_entry - self.first_entry + 1


@dataclass
class ReadPlan:
    """The ranges to read, and per topic the last position the plan reads (the start when there
    is nothing new): what the export commits as its progress once the rows are written."""

    ranges: list[LedgerRange]
    end_positions: dict[str, Position]

    @property
    def entries(self) -> int:
        return sum(r.entries for r in self.ranges)


# ---------------------------------------------------------------------------------------- positions


def parse_position(text: str) -> Position:
    """``"12:345"`` -> ``(12, 345)``; ``-1:-1`` (before everything) is allowed."""
    try:
        ledger, entry = str(text).strip().split(":")
        return int(ledger), int(entry)
    except ValueError:
        raise ValueError(f"a position is 'ledger:entry', not {text!r}") from None


def format_position(pos: Position) -> str:
    return f"{pos[0]}:{pos[1]}"


def parse_positions(value: str | Mapping[str, Any] | None, option: str) -> dict[str, Position]:
    """The ``startAfter`` / ``endAt`` option: a JSON object ``{partition topic: "ledger:entry"}``
    (a dict is taken as is). Topic names are normalised, so ``public/default/t`` and
    ``persistent://public/default/t`` are the same key."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{option} must be a JSON object {{topic: 'ledger:entry'}}: {exc}") from None
    else:
        doc = dict(value)
    if not isinstance(doc, dict):
        raise ValueError(f"{option} must be a JSON object {{topic: 'ledger:entry'}}, not {type(doc).__name__}")
    return {str(TopicName.parse(str(t))): parse_position(str(p)) for t, p in doc.items()}


# ---------------------------------------------------------------------------------------- topics


def resolve_topics(
    admin: AdminClient,
    *,
    topic: str | None = None,
    topics: str | Iterable[str] | None = None,
    namespace: str | None = None,
) -> list[str]:
    """The partition topics to read, by full name, in a stable order.

    Exactly one of ``topic`` (a partitioned topic means all its partitions), ``topics`` (several,
    comma-separated or a list) and ``namespace`` (``tenant/ns``: every persistent topic there)."""
    given = [x for x in (topic, topics, namespace) if x]
    if len(given) != 1:
        raise ValueError("give exactly one of the options 'topic', 'topics' and 'namespace'")
    if namespace:
        ns = str(namespace).strip().strip("/")
        try:
            found = admin.topics_of(ns)
        except AdminError as exc:
            if exc.status == 404:
                raise TopicNotFoundError(f"namespace {ns} does not exist") from None
            raise
        return sorted({str(TopicName.parse(t)) for t in found if TopicName.parse(t).is_persistent})
    names = [topic] if topic else (topics.split(",") if isinstance(topics, str) else list(topics or []))
    out: list[str] = []
    for raw in names:
        raw = raw.strip()
        if not raw:
            continue
        name = TopicName.parse(raw)
        if not name.is_persistent:
            raise ValueError(f"{name} is not persistent: only persistent topics are stored in ledgers")
        n = admin.partitions(str(name)) if name.partition_index < 0 else 0
        if n > 0:
            out.extend(str(name.partition(i)) for i in range(n))
        else:
            out.append(str(name))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------- planning


def bookie_addresses(admin: AdminClient) -> dict[str, tuple[str, int]]:
    """Registered bookies by id -> ``(host, port)`` (``GET /admin/v2/bookies``)."""
    return bookie_directory(admin)[0]


def bookie_directory(admin: AdminClient) -> tuple[dict[str, tuple[str, int]], frozenset[str]]:
    """One ``GET /admin/v2/bookies``: the addresses by id, and the ids that speak only TLS."""
    out: dict[str, tuple[str, int]] = {}
    tls: set[str] = set()
    for doc in admin.get("bookies") or []:
        if doc.get("host") and doc.get("port"):
            out[str(doc["id"])] = (str(doc["host"]), int(doc["port"]))
            if doc.get("tls"):
                tls.add(str(doc["id"]))
    return out, frozenset(tls)


def _internal_stats(admin: AdminClient, topic: str) -> dict[str, Any]:
    try:
        return admin.internal_stats(topic, metadata=True)
    except AdminError as exc:
        if exc.status == 404:
            raise TopicNotFoundError(f"topic {topic} does not exist ({exc.reason})") from None
        raise


def plan_reads(
    admin: AdminClient,
    topics: list[str],
    *,
    start_after: Mapping[str, Position] | None = None,
    end_at: Mapping[str, Position] | None = None,
    entries_per_range: int = DEFAULT_ENTRIES_PER_RANGE,
) -> ReadPlan:
    """Split every topic's entries in ``(startAfter, min(endAt, lastConfirmedEntry)]`` into ranges
    of at most ``entries_per_range`` entries, never across a ledger (one range, one ensemble)."""
    if entries_per_range < 1:
        raise ValueError("entriesPerPartition must be at least 1")
    starts = {str(TopicName.parse(t)): p for t, p in (start_after or {}).items()}
    ends = {str(TopicName.parse(t)): p for t, p in (end_at or {}).items()}
    with ThreadPoolExecutor(max_workers=PLAN_CONCURRENCY) as pool:
        stats = list(pool.map(lambda t: _internal_stats(admin, t), topics))
    addresses, tls_bookies = bookie_directory(admin)
    ranges: list[LedgerRange] = []
    end_positions: dict[str, Position] = {}
    for name, doc in zip(topics, stats, strict=True):
        topic_ranges, end = plan_topic(
            name,
            doc,
            addresses,
            tls_bookies=tls_bookies,
            start_after=starts.get(name),
            end_at=ends.get(name),
            entries_per_range=entries_per_range,
        )
        ranges.extend(topic_ranges)
        end_positions[name] = end
    return ReadPlan(ranges, end_positions)


def plan_topic(
    topic: str,
    stats: Mapping[str, Any],
    addresses: Mapping[str, tuple[str, int]],
    *,
    tls_bookies: frozenset[str] = frozenset(),
    start_after: Position | None = None,
    end_at: Position | None = None,
    entries_per_range: int = DEFAULT_ENTRIES_PER_RANGE,
) -> tuple[list[LedgerRange], Position]:
    """The ranges of one partition topic from its internal stats, and its end position."""
    confirmed = parse_position(str(stats.get("lastConfirmedEntry", "-1:-1")))
    end = confirmed if end_at is None else min(end_at, confirmed)
    start = start_after if start_after is not None else (-1, -1)
    partition = TopicName.parse(topic).partition_index
    ranges: list[LedgerRange] = []
    for ledger in stats.get("ledgers", []):
        lid = int(ledger["ledgerId"])
        count = int(ledger.get("entries", 0))
        md = ledger.get("metadata")
        if count <= 0 or lid < start[0] or lid > end[0]:
            continue
        if md is None:
            raise ValueError(f"internalStats of {topic} has no metadata for ledger {lid} (asked with metadata=true)")
        first = start[1] + 1 if lid == start[0] else 0
        last = count - 1
        if lid == end[0]:
            last = min(last, end[1])
        if first > last:
            continue
        ids = {b for ens in md.get("ensembles", []) for b in ens.get("bookies", [])}
        bookies = {b: addresses[b] for b in sorted(ids) if b in addresses}
        closed = int(ledger.get("timestamp", 0) or 0)
        tls = tuple(sorted(b for b in bookies if b in tls_bookies))
        for lo in range(first, last + 1, entries_per_range):
            hi = min(last, lo + entries_per_range - 1)
            ranges.append(LedgerRange(topic, partition, lid, lo, hi, dict(md), bookies, closed, tls))
    if ranges:
        last_range = ranges[-1]
        return ranges, (last_range.ledger_id, last_range.last_entry)
    if start_after is not None:
        return ranges, start_after
    return ranges, end
