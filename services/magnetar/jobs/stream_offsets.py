"""The streaming source's offsets and the arithmetic on them: how far each micro-batch reads.

No Spark and no network here (the reader in ``stream_reader`` feeds it internal stats), so the rules
are testable on their own:

- An offset is, per partition topic, the position ``(ledger, entry)`` of the last entry already
  handed to Spark (``startAfter`` of the next batch, as in the batch source), plus the name of the
  subscription that holds the query's progress on the brokers, and per topic how many gaps of
  trimmed data were skipped (``failOnDataLoss=false``). As JSON (what Spark writes to the query's
  checkpoint)::

      {"subscription": "magnetar-stream-3f2a...", "positions": {"persistent://t/ns/x": "12:345"},
       "lost": {"persistent://t/ns/x": 1}}

  ``lost`` is left out while nothing was lost, so an idle query's offset does not change.
- A batch ends at most at each topic's ``lastConfirmedEntry``: only entries the broker acknowledged
  to their producers, so a running producer is never read ahead of its acknowledgements.
- Read limits (``maxEntriesPerTrigger``, ``maxBytesPerTrigger``) are spread over the topics that
  have something to read by water-filling: each gets an equal share, and what a topic with little
  to read leaves over goes to the others. A limit is soft in one way only: a batch always takes at
  least one entry when there is one, or a limit below one entry would stall the query.
- Data loss: a position whose ledger is no longer in the topic's ledger list. That is normal when
  the query's own subscription was at or before the position (the broker trims only what every
  cursor has passed, so the ledger held nothing this query had not read yet); otherwise (the
  subscription was moved forward, by a TTL, a skip or a backlog eviction, or deleted) the entries
  after the position up to the next ledger are gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.jobs.topic_plan import Position, format_position, parse_position
from magnetar.protocol.topic_name import TopicName

EARLIEST: Position = (-1, -1)


class DataLossError(RuntimeError):
    """Entries a streaming query had not read yet are gone (the message names topic and range)."""


@dataclass(frozen=True)
class StreamOffset:
    """Where a query stands: the last entry read per partition topic (see the module docstring)."""

    subscription: str
    positions: dict[str, Position]
    lost: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "subscription": self.subscription,
            "positions": {t: format_position(self.positions[t]) for t in sorted(self.positions)},
        }
        if self.lost:
            doc["lost"] = {t: self.lost[t] for t in sorted(self.lost)}
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StreamOffset:
        try:
            positions = {str(t): parse_position(str(p)) for t, p in dict(doc["positions"]).items()}
            lost = {str(t): int(n) for t, n in dict(doc.get("lost") or {}).items()}
            return cls(str(doc["subscription"]), positions, lost)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not an offset of the magnetar streaming source: {doc!r} ({exc})") from None


@dataclass(frozen=True)
class Ledger:
    """One ledger of a topic as internalStats lists it: its entries and bytes."""

    ledger_id: int
    entries: int
    size: int

    @property
    def entry_bytes(self) -> float:
        return self.size / self.entries if self.entries > 0 else 0.0


@dataclass(frozen=True)
class TopicState:
    """What the internal stats of one partition topic say, as far as the stream needs it."""

    ledgers: tuple[Ledger, ...]
    confirmed: Position
    cursors: dict[str, Position]

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any]) -> TopicState:
        ledgers = tuple(
            Ledger(int(d["ledgerId"]), int(d.get("entries", 0)), int(d.get("size", 0)))
            for d in stats.get("ledgers", [])
        )
        cursors = {
            str(name): parse_position(str(doc.get("markDeletePosition", "-1:-1")))
            for name, doc in (stats.get("cursors") or {}).items()
        }
        return cls(ledgers, parse_position(str(stats.get("lastConfirmedEntry", "-1:-1"))), cursors)

    def earliest(self) -> Position:
        """Before the oldest stored entry (``(first ledger, -1)``), so that a trim of that ledger
        later, while the query has not read it, is seen as a loss."""
        return (self.ledgers[0].ledger_id, -1) if self.ledgers else EARLIEST

    def spans(self, after: Position) -> list[tuple[int, int, int, float]]:
        """``(ledger, first, last, bytes per entry)`` of every entry after ``after`` up to the last
        confirmed one."""
        out = []
        for ledger in self.ledgers:
            lid = ledger.ledger_id
            if lid < after[0] or lid > self.confirmed[0] or ledger.entries <= 0:
                continue
            first = after[1] + 1 if lid == after[0] else 0
            last = ledger.entries - 1
            if lid == self.confirmed[0]:
                last = min(last, self.confirmed[1])
            if first <= last:
                out.append((lid, first, last, ledger.entry_bytes))
        return out

    def available(self, after: Position) -> tuple[int, float]:
        """Entries after ``after`` and their bytes."""
        spans = self.spans(after)
        return sum(s[2] - s[1] + 1 for s in spans), sum((s[2] - s[1] + 1) * s[3] for s in spans)

    def advance(self, after: Position, entries: int) -> Position:
        """The position ``entries`` entries after ``after`` (at most the last confirmed one)."""
        pos = after
        for lid, first, last, _ in self.spans(after):
            if entries <= 0:
                break
            take = min(entries, last - first + 1)
            pos = (lid, first + take - 1)
            entries -= take
        return pos

    def check_loss(self, topic: str, after: Position, subscription: str) -> tuple[Position, str | None]:
        """``(where to read after, None)``, or, when entries after ``after`` were trimmed before this
        query read them, ``(the position just before what is left, what is missing)``."""
        ids = [ledger.ledger_id for ledger in self.ledgers]
        if after[0] < 0 or after[0] in ids:
            return after, None
        later = [lid for lid in ids if lid > after[0]]
        resume = (later[0], -1) if later else after
        cursor = self.cursors.get(subscription)
        if cursor is not None and cursor <= after:
            return resume, None  # trimmed by the rule that keeps what this query's cursor has not passed
        upto = f"up to before {later[0]}:0" if later else "up to the end of the topic"
        why = "moved ahead of the query" if cursor is not None else "missing"
        return resume, (
            f"topic {topic}: entries from {after[0]}:{after[1] + 1} {upto} are gone (ledger {after[0]} was "
            f"trimmed while the query's subscription {subscription} was {why})"
        )


def normal_topic(name: str) -> str:
    return str(TopicName.parse(name))


def water_fill(caps: Mapping[str, float], budget: float) -> dict[str, float]:
    """Share ``budget`` over ``caps`` equally, what a small cap leaves over going to the others."""
    out = {t: 0.0 for t in caps}
    left = float(budget)
    order = sorted((c, t) for t, c in caps.items() if c > 0)
    for i, (cap, topic) in enumerate(order):
        share = left / (len(order) - i)
        take = min(cap, share)
        out[topic] = take
        left -= take
    return out


def admit(
    states: Mapping[str, TopicState],
    starts: Mapping[str, Position],
    *,
    max_entries: int | None,
    max_bytes: int | None,
) -> dict[str, Position]:
    """Each topic's end position for the next batch under the entry and byte limits (None: none)."""
    avail = {t: states[t].available(starts[t]) for t in states}
    counts = {t: float(a[0]) for t, a in avail.items()}
    if max_entries is not None:
        counts = {t: float(int(n)) for t, n in water_fill(counts, max_entries).items()}
    if max_bytes is not None:
        per_entry = {t: (a[1] / a[0] if a[0] else 0.0) for t, a in avail.items()}
        caps = {t: counts[t] * per_entry[t] for t in counts}
        shares = water_fill(caps, max_bytes)
        counts = {
            t: float(min(counts[t], int(shares[t] / per_entry[t]) if per_entry[t] > 0 else counts[t])) for t in counts
        }
    if not any(counts.values()):
        for t in sorted(avail):
            if avail[t][0] > 0:
                counts[t] = 1.0  # progress: a limit below one entry still reads one
                break
    return {t: states[t].advance(starts[t], int(counts[t])) for t in states}
