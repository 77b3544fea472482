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

A run is valid when lost, inconsistent, reordered, unexpected and failed_read are all zero.
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


@dataclass(frozen=True)
class Read:
    value: str
    pos: Position | None
    t: float = 0.0


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
