"""The planning and pushdown rules of the ``magnetar`` source on internalStats documents (no processes).

The documents have the shape ``GET .../internalStats?metadata=true`` answers (broker/admin/internal_stats.py);
the end-to-end behaviour against real bookies is in ``test_source.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

pytest.importorskip("pyspark")
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNull, LessThan

from magnetar.jobs.pushdown import Pushed, prune, take_filters
from magnetar.jobs.topic_plan import parse_positions, plan_topic

T = "persistent://public/default/t"
ADDR = {"b0": ("127.0.0.1", 1), "b1": ("127.0.0.1", 2), "b2": ("127.0.0.1", 3)}


def ledger(lid: int, entries: int, closed_ms: int = 0) -> dict[str, Any]:
    ens = [{"firstEntry": 0, "bookies": ["b0", "b1", "b2"]}]
    md = {"ensembleSize": 3, "writeQuorumSize": 2, "ackQuorumSize": 2, "ensembles": ens}
    return {"ledgerId": lid, "entries": entries, "timestamp": closed_ms, "metadata": md}


STATS = {
    "lastConfirmedEntry": "7:149",
    "ledgers": [ledger(3, 1000, 1_000), ledger(5, 0, 2_000), ledger(6, 250, 3_000), ledger(7, 300)],
}


def spans(ranges: list[Any]) -> list[tuple[int, int, int]]:
    return [(r.ledger_id, r.first_entry, r.last_entry) for r in ranges]


def test_plan_splits_ledgers_skips_empty_ones_and_stops_at_last_confirmed() -> None:
    ranges, end = plan_topic(T, STATS, ADDR, entries_per_range=400)
    # Ledger 7 has 300 entries stored, but only 0..149 were confirmed to producers when planned.
    assert spans(ranges) == [(3, 0, 399), (3, 400, 799), (3, 800, 999), (6, 0, 249), (7, 0, 149)]
    assert end == (7, 149)
    assert ranges[0].bookies == ADDR and ranges[0].partition == -1 and ranges[0].closed_at_ms == 1_000


def test_plan_between_start_after_and_end_at() -> None:
    ranges, end = plan_topic(T, STATS, ADDR, start_after=(3, 899), end_at=(6, 9), entries_per_range=400)
    assert spans(ranges) == [(3, 900, 999), (6, 0, 9)] and end == (6, 9)
    # endAt beyond what was confirmed is capped: an unacknowledged entry is never read.
    ranges, end = plan_topic(T, STATS, ADDR, start_after=(7, 100), end_at=(7, 299))
    assert spans(ranges) == [(7, 101, 149)] and end == (7, 149)
    # Nothing new: no range, and the end is the start (what the export keeps).
    ranges, end = plan_topic(T, STATS, ADDR, start_after=(7, 149))
    assert ranges == [] and end == (7, 149)


def test_positions_option() -> None:
    assert parse_positions('{"public/default/t": "3:5"}', "startAfter") == {T: (3, 5)}
    assert parse_positions(None, "endAt") == {}
    with pytest.raises(ValueError, match="ledger:entry"):
        parse_positions('{"t": "3"}', "startAfter")
    with pytest.raises(ValueError, match="JSON object"):
        parse_positions("[1]", "endAt")


def test_pushdown_takes_range_filters_and_hands_back_the_rest() -> None:
    ranges, _ = plan_topic(T, STATS, ADDR, entries_per_range=400)
    pushed = Pushed(slack_ms=0)
    by_ledger = GreaterThan(("ledger_id",), 3)
    by_entry = LessThan(("entry_id",), 100)
    by_time = GreaterThanOrEqual(("publish_time",), dt.datetime.fromtimestamp(2.5, tz=dt.UTC))
    by_key = EqualTo(("key",), "k")
    null = IsNull(("event_time",))
    back = list(take_filters([by_ledger, by_entry, by_time, by_key, null], pushed))
    # Ledger and entry filters are exact; publish time is re-checked by Spark; the rest is Spark's.
    assert back == [by_time, by_key, null]
    assert spans(prune(ranges, pushed)) == [(6, 0, 99), (7, 0, 99)]
    assert not pushed.keep_entry(5, 2_000) and pushed.keep_entry(5, 2_500) and not pushed.keep_entry(100, 2_600)


def test_publish_time_lower_bound_skips_ledgers_closed_before_it_with_slack() -> None:
    ranges, _ = plan_topic(T, STATS, ADDR)
    f = GreaterThan(("publish_time",), dt.datetime.fromtimestamp(1.5, tz=dt.UTC))
    tight, slack = Pushed(slack_ms=0), Pushed(slack_ms=1000)
    list(take_filters([f], tight))
    list(take_filters([f], slack))
    assert [r.ledger_id for r in prune(ranges, tight)] == [6, 7]  # ledger 3 closed at 1.0 s
    assert [r.ledger_id for r in prune(ranges, slack)] == [3, 6, 7]  # within the slack: read
    # An upper bound skips nothing (a message may be stored long after it was sealed).
    upper = Pushed(slack_ms=0)
    list(take_filters([LessThan(("publish_time",), dt.datetime.fromtimestamp(0.5, tz=dt.UTC))], upper))
    assert len(prune(ranges, upper)) == len(ranges)


def test_in_on_entry_id_is_applied_per_entry() -> None:
    ranges, _ = plan_topic(T, STATS, ADDR)
    pushed = Pushed()
    assert list(take_filters([In(("entry_id",), (3, 120))], pushed)) == []
    assert spans(prune(ranges, pushed)) == [(3, 3, 120), (6, 3, 120), (7, 3, 120)]
    assert pushed.keep_entry(3, 0) and not pushed.keep_entry(4, 0)
