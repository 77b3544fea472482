"""The queue checker, in the manner of Jepsen's total-queue checker: judge a history of sends and reads.

A *history* is every send a producer attempted (``Op``: the value, and how the send ended: ``ok``
with the message id the broker acknowledged, ``fail`` when the send certainly did not happen, or
``unknown`` when the producer cannot know: timed out, connection lost, an error after the broker
may already have written it) and every message a final drain read (``Read``: value and position).

Counts:

- **lost**: acknowledged ``ok`` and never read. The one thing a durable queue must never do.
- **duplicated**: values read at more than one distinct position (a resend after reconnect that had
  in fact been stored). The same position delivered twice is a *redelivery*, not a duplicate in
  the log, and is counted apart (``redelivered``).
- **reordered**: per producer, over the *first* occurrence of each of its values in read order, the
  values that come after a value the producer sent later. Duplicates do not count here.
  ``reordered_acked`` is the same count over acknowledged values only (a reorder among values the
  producer was told had failed is still a violation of per-producer order, but a milder one).
- **inconsistent**: positions seen with two different values, counting both reads and the message
  ids acknowledged to producers (an ack that names a position holding another value is a lie).
- **unexpected**: values read that no producer ever attempted.
- **failed_read**: values whose send failed *definitely* but which were read anyway.
- **recovered**: ``unknown`` sends that turned out to be stored (informational).
- **deduplicated**: ``ok`` sends acknowledged with id -1:-1, a resend the broker recognised as a
  duplicate and did not store again (informational): such a value must still be read, exactly
  once, at the position its first copy went to, so it counts in lost and duplicated like any other,
  but its -1:-1 is no position and takes no part in the inconsistency check.

A run is valid when lost, inconsistent, reordered, unexpected and failed_read are all zero.

Two judgements cover the consumption workloads (``delivery``): for a live Shared subscription
whose consumers negatively acknowledge some messages, **lost_live** counts acknowledged sends
that no live consumer ever acknowledged (nacks and redeliveries must not drop anything); for
delayed messages, **early** counts reads before the message's deliver-at time, and the lateness
of the first delivery of each delayed value is summarised as p50/p99/max milliseconds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
PENDING = "pending"

Position = tuple[int, int, int]  # (ledger, entry, batch index); a non-batched message has index 0


def position(ledger: int, entry: int, batch_index: int = -1) -> Position:
    return (int(ledger), int(entry), max(int(batch_index), 0))


def make_value(producer: int, seq: int) -> str:
    return f"p{producer}-{seq}"


def parse_value(value: str) -> tuple[int, int] | None:
    """``"p3-17"`` -> ``(3, 17)``; None for anything no producer of the workload sends."""
    if not value.startswith("p") or "-" not in value:
        return None
    head, _, tail = value[1:].partition("-")
    if not head.isdigit() or not tail.isdigit():
        return None
    return int(head), int(tail)


@dataclass
class Op:
    """One send: invoked at ``t_invoke`` (monotonic seconds), completed at ``t_complete``."""

    producer: int
    seq: int
    value: str
    t_invoke: float
    status: str = PENDING
    t_complete: float | None = None
    pos: Position | None = None
    error: str | None = None
    via: str | None = None  # the broker that acknowledged it, when known
    deliver_at: int | None = None  # wall-clock ms before which it must not be delivered (delayed)


@dataclass(frozen=True)
class Read:
    value: str
    pos: Position | None
    t: float = 0.0
    wall_ms: int = 0  # wall-clock ms at receipt (delayed-delivery judgement)
    redelivery_count: int = 0


@dataclass
class CheckResult:
    attempted: int = 0
    ok: int = 0
    failed: int = 0
    unknown: int = 0
    read: int = 0  # distinct values read
    lost: int = 0
    duplicated: int = 0
    redelivered: int = 0
    reordered: int = 0
    reordered_acked: int = 0
    inconsistent: int = 0
    unexpected: int = 0
    failed_read: int = 0
    recovered: int = 0
    deduplicated: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not (self.lost or self.inconsistent or self.reordered or self.unexpected or self.failed_read)

    def counts(self) -> dict[str, int]:
        d = asdict(self)
        d.pop("examples")
        return d

    def summary(self) -> str:
        text = " ".join(f"{k}={v}" for k, v in self.counts().items())
        bad = {k: v for k, v in self.examples.items() if v}
        return text + (f" examples={json.dumps(bad)}" if bad else "")


def _example(examples: dict[str, list[str]], kind: str, text: str, limit: int = 5) -> None:
    items = examples.setdefault(kind, [])
    if len(items) < limit:
        items.append(text)


def check(ops: Iterable[Op], reads: Sequence[Read]) -> CheckResult:
    """Judge the history. ``reads`` must be in the order the drain received them."""
    res = CheckResult()
    ex = res.examples
    by_value: dict[str, Op] = {}
    for op in ops:
        res.attempted += 1
        by_value[op.value] = op
        if op.status == OK:
            res.ok += 1
        elif op.status == FAIL:
            res.failed += 1
        else:
            res.unknown += 1

    # Positions -> values, from reads and from acknowledgements.
    at: dict[Position, set[str]] = defaultdict(set)
    for op in by_value.values():
        if op.status == OK and op.pos is not None:
            if op.pos[0] < 0:  # -1:-1: acknowledged as a duplicate of a copy stored before
                res.deduplicated += 1
                continue
            at[op.pos].add(op.value)
    positions_of: dict[str, set[Position | None]] = defaultdict(set)
    reads_of: dict[str, int] = defaultdict(int)
    first_order: list[str] = []
    for r in reads:
        if r.pos is not None:
            at[r.pos].add(r.value)
        if r.value not in reads_of:
            first_order.append(r.value)
        reads_of[r.value] += 1
        positions_of[r.value].add(r.pos)

    for pos, values in at.items():
        if len(values) > 1:
            res.inconsistent += 1
            _example(ex, "inconsistent", f"{pos}: {sorted(values)}")

    res.read = len(reads_of)
    for value, n in reads_of.items():
        distinct = len(positions_of[value])
        if distinct > 1:
            res.duplicated += distinct - 1
            _example(ex, "duplicated", f"{value} at {sorted(p for p in positions_of[value] if p is not None)}")
        if n > distinct:
            res.redelivered += n - distinct
        sent = by_value.get(value)
        if sent is None:
            res.unexpected += 1
            _example(ex, "unexpected", value)
        elif sent.status == FAIL:
            res.failed_read += 1
            _example(ex, "failed_read", f"{value} ({sent.error})")
        elif sent.status != OK:
            res.recovered += 1

    for op in by_value.values():
        if op.status == OK and op.value not in reads_of:
            res.lost += 1
            _example(ex, "lost", f"{op.value} acked at {op.pos} via {op.via}")

    # Order: the first occurrence of each value, per producer, must follow the send order.
    res.reordered = _reorders(first_order, ex, "reordered")
    acked = {v for v, op in by_value.items() if op.status == OK}
    res.reordered_acked = _reorders([v for v in first_order if v in acked], ex, "reordered_acked")
    return res


def _reorders(first_order: Sequence[str], ex: dict[str, list[str]], kind: str) -> int:
    count = 0
    highest: dict[int, int] = {}
    for value in first_order:
        parsed = parse_value(value)
        if parsed is None:
            continue
        producer, seq = parsed
        top = highest.get(producer, -1)
        if seq < top:
            count += 1
            _example(ex, kind, f"{value} read after p{producer}-{top}")
        else:
            highest[producer] = seq
    return count


@dataclass
class DeliveryResult:
    """Judgement of the live consumers of a consumption workload (nacks, delayed delivery)."""

    acked_sends: int = 0
    acked_live: int = 0  # distinct acknowledged sends that a live consumer acknowledged
    lost_live: int = 0
    redelivered_reads: int = 0  # live reads with redelivery_count > 0
    delayed: int = 0  # acknowledged sends with a deliver-at time that were read
    early: int = 0
    lateness_ms: dict[str, float] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not (self.lost_live or self.early)

    def counts(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("examples")
        return d

    def summary(self) -> str:
        bad = {k: v for k, v in self.examples.items() if v}
        return " ".join(f"{k}={v}" for k, v in self.counts().items()) + (f" examples={json.dumps(bad)}" if bad else "")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least 1
    return float(ordered[int(rank) - 1])


def delivery(ops: Iterable[Op], live_reads: Sequence[Read], live_acked: set[str]) -> DeliveryResult:
    """Judge the live subscription: nothing acknowledged to a producer is missing from what live
    consumers acknowledged, and no delayed message was read before its deliver-at time."""
    res = DeliveryResult()
    ex = res.examples
    sent = {op.value: op for op in ops if op.status == OK}
    res.acked_sends = len(sent)
    res.acked_live = len(live_acked & sent.keys())
    for value, op in sent.items():
        if value not in live_acked:
            res.lost_live += 1
            _example(ex, "lost_live", f"{value} acked at {op.pos}, never acknowledged by a live consumer")
    res.redelivered_reads = sum(1 for r in live_reads if r.redelivery_count > 0)
    first: dict[str, int] = {}
    for r in live_reads:
        op = sent.get(r.value)
        if op is None or op.deliver_at is None:
            continue
        if r.wall_ms < op.deliver_at:
            res.early += 1
            _example(ex, "early", f"{r.value} read at {r.wall_ms}, {op.deliver_at - r.wall_ms} ms before its time")
        if r.value not in first:
            first[r.value] = r.wall_ms - op.deliver_at
    res.delayed = len(first)
    if first:
        late = list(first.values())
        res.lateness_ms = {
            "p50": percentile(late, 50),
            "p99": percentile(late, 99),
            "max": float(max(late)),
        }
    return res
