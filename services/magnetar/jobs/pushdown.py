"""Filter pushdown of the ``magnetar`` data source: which planned ranges a query can skip.

Spark (``spark.sql.python.filterPushdown.enabled``) hands the reader the conjuncts of a query's
filter as ``pyspark.sql.datasource`` filters. Without Spark imports here, a filter is taken by its
class name, column path and value, so the rules are plain functions.

- ``topic``, ``partition``, ``ledger_id`` (equal, <, <=, >, >=, in): every row of a range has the
  same value, so a range either matches entirely or not at all. These are honoured exactly and
  not handed back to Spark.
- ``entry_id`` (same comparisons): narrows each range's ``[first, last]`` and is tested per entry
  while reading (``keep_entry``: an ``in`` list leaves gaps); exact too.
- ``publish_time`` lower bounds (``>``, ``>=``, ``=``): a ledger closed before the bound holds no
  message published after it (a message is sealed by its producer before the broker stores it,
  and the ledger closes after), so the whole ledger is skipped; ``slack_ms`` tolerates producer
  clocks ahead of the broker's. Upper bounds do not skip ledgers: a message sealed long ago can be
  stored late (a producer resending after a reconnect keeps its publish time), so no ledger has a
  safe lower bound. Every publish-time filter is also applied per entry while reading, and handed
  back to Spark as well, which re-checks it: correctness never rests on the clock argument.

Anything else (other columns, ``Not``, null tests, string matches) goes back to Spark untouched.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.jobs.topic_plan import LedgerRange

RANGE_COLUMNS = ("topic", "partition", "ledger_id")
COMPARISONS = ("EqualTo", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual", "In")
DEFAULT_PUBLISH_TIME_SLACK_MS = 1000


def _compare(op: str, value: Any, bound: Any) -> bool:
    if op == "EqualTo":
        return bool(value == bound)
    if op == "GreaterThan":
        return bool(value > bound)
    if op == "GreaterThanOrEqual":
        return bool(value >= bound)
    if op == "LessThan":
        return bool(value < bound)
    if op == "LessThanOrEqual":
        return bool(value <= bound)
    if op == "In":
        return value in tuple(bound)
    raise ValueError(f"not a comparison: {op}")


def to_epoch_ms(value: Any) -> float:
    """A timestamp filter's literal (a ``datetime``; naive ones are taken as UTC) in epoch ms."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return float(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC).timestamp() * 1000
    raise TypeError(f"not a timestamp: {value!r}")


@dataclass(frozen=True)
class Condition:
    """One pushed comparison: ``column op value`` (``value`` a tuple for ``In``)."""

    column: str
    op: str
    value: Any

    def test(self, actual: Any) -> bool:
        return _compare(self.op, actual, self.value)


@dataclass
class Pushed:
    """The filters the reader took (plain data: the reader is pickled to the executors)."""

    ranges: list[Condition] = field(default_factory=list)  # on topic / partition / ledger_id
    entries: list[Condition] = field(default_factory=list)  # on entry_id
    publish: list[Condition] = field(default_factory=list)  # on publish_time, values in epoch ms
    slack_ms: int = DEFAULT_PUBLISH_TIME_SLACK_MS

    def keep_entry(self, entry_id: int, publish_ms: int) -> bool:
        """Whether the messages of an entry can match the entry-id and publish-time filters."""
        return all(c.test(entry_id) for c in self.entries) and all(c.test(publish_ms) for c in self.publish)

    @property
    def filters_entries(self) -> bool:
        """Whether ``keep_entry`` has anything to test (else the reader skips calling it)."""
        return bool(self.entries or self.publish)


def _column(f: Any) -> str | None:
    path = getattr(f, "attribute", None)
    return path[0] if isinstance(path, tuple) and len(path) == 1 else None


def take_filters(filters: Sequence[Any], pushed: Pushed) -> Iterable[Any]:
    """Record in ``pushed`` what can narrow the read; yield the filters Spark must still apply."""
    for f in filters:
        op = type(f).__name__
        column = _column(f)
        if op not in COMPARISONS or column is None:
            yield f
        elif column in RANGE_COLUMNS:
            pushed.ranges.append(Condition(column, op, tuple(f.value) if op == "In" else f.value))
        elif column == "entry_id":
            pushed.entries.append(Condition(column, op, tuple(f.value) if op == "In" else f.value))
        elif column == "publish_time":
            try:
                value = tuple(to_epoch_ms(v) for v in f.value) if op == "In" else to_epoch_ms(f.value)
            except TypeError:
                yield f
                continue
            pushed.publish.append(Condition(column, op, value))
            yield f  # re-checked by Spark too (see the module docstring)
        else:
            yield f


def _entry_bounds(rng: LedgerRange, conditions: list[Condition]) -> tuple[int, int] | None:
    """``rng``'s entries narrowed by the ``entry_id`` conditions (None when nothing is left)."""
    first, last = rng.first_entry, rng.last_entry
    for c in conditions:
        v = c.value
        if c.op == "EqualTo":
            first, last = max(first, int(v)), min(last, int(v))
        elif c.op == "GreaterThan":
            first = max(first, int(v) + 1)
        elif c.op == "GreaterThanOrEqual":
            first = max(first, int(v))
        elif c.op == "LessThan":
            last = min(last, int(v) - 1)
        elif c.op == "LessThanOrEqual":
            last = min(last, int(v))
        elif c.op == "In":
            wanted = [int(x) for x in v if first <= int(x) <= last]
            if not wanted:
                return None
            first, last = min(wanted), max(wanted)  # the ids between are dropped per entry (keep_entry)
    return (first, last) if first <= last else None


def _publish_lower_bound(conditions: list[Condition]) -> float | None:
    """The highest lower bound the publish-time conditions put on a matching message (ms)."""
    bound: float | None = None
    for c in conditions:
        if c.op in ("GreaterThan", "GreaterThanOrEqual", "EqualTo"):
            v = float(c.value)
        elif c.op == "In" and c.value:
            v = min(float(x) for x in c.value)
        else:
            continue
        bound = v if bound is None else max(bound, v)
    return bound


def prune(ranges: list[LedgerRange], pushed: Pushed) -> list[LedgerRange]:
    """The planned ranges a query with ``pushed`` filters still has to read."""
    lower = _publish_lower_bound(pushed.publish)
    out: list[LedgerRange] = []
    for rng in ranges:
        values = {"topic": rng.topic, "partition": rng.partition, "ledger_id": rng.ledger_id}
        if not all(c.test(values[c.column]) for c in pushed.ranges):
            continue
        if lower is not None and rng.closed_at_ms > 0 and rng.closed_at_ms + pushed.slack_ms < lower:
            continue  # closed (and so every message in it published) before the lower bound
        if pushed.entries:
            bounds = _entry_bounds(rng, pushed.entries)
            if bounds is None:
                continue
            if bounds != (rng.first_entry, rng.last_entry):
                rng = replace(rng, first_entry=bounds[0], last_entry=bounds[1])
        out.append(rng)
    return out
