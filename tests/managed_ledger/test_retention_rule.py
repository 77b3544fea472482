"""The trimming rule as a pure function (``managed_ledger/retention_rule.py``): the broker's
``ManagedLedger.trimmable`` and the Spark sweep's report both call it, so its cases are checked here
once, without a broker; ``tests/integration/test_retention_policies.py`` checks the broker applies it."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.retention_rule import Removal, removable_ledgers, slowest_position

MB = 1024 * 1024
NOW = 1_000_000.0


@dataclass
class L:
    ledger_id: int
    entries: int
    size: int
    closed_at: float


def log(n: int = 5, *, size: int = MB, age: float = 3600.0) -> list[L]:
    """``n`` closed ledgers of 10 entries, ``age`` seconds old, then the open one (id n+1)."""
    return [L(i, 10, size, NOW - age) for i in range(1, n + 1)] + [L(n + 1, 3, size, 0.0)]


def run(ledgers: list[L], slowest: Position, minutes: int, mb: int, *, current: int | None = None) -> list[Removal]:
    return removable_ledgers(
        ledgers,
        current=ledgers[-1].ledger_id if current is None else current,
        slowest=slowest,
        now=NOW,
        retention_minutes=minutes,
        retention_mb=mb,
    )


def test_no_retention_removes_every_consumed_ledger_and_stops_at_the_first_unconsumed() -> None:
    got = run(log(), Position(3, 4), 0, 0)  # ledger 3 is half consumed
    assert got == [Removal(1, "consumed-no-retention"), Removal(2, "consumed-no-retention")]


def test_the_ledger_being_written_is_never_removed_even_fully_consumed() -> None:
    ledgers = log()
    assert [r.ledger_id for r in run(ledgers, Position(6, 2), 0, 0)] == [1, 2, 3, 4, 5]


def test_infinite_retention_removes_nothing() -> None:
    assert run(log(), Position(6, 2), -1, -1) == []


def test_time_limit_removes_ledgers_closed_longer_ago_only() -> None:
    ledgers = [L(1, 10, MB, NOW - 7200), L(2, 10, MB, NOW - 7000), L(3, 10, MB, NOW - 60), L(4, 0, 0, 0.0)]
    got = run(ledgers, Position(3, 9), 60, -1)  # one hour
    assert got == [Removal(1, "retention-time"), Removal(2, "retention-time")]


def test_size_limit_keeps_at_least_the_limit_counting_unconsumed_bytes() -> None:
    # 5 closed 1 MB ledgers + 1 MB being written = 6 MB; keep at least 3 MB.
    got = run(log(), Position(6, 2), -1, 3)
    assert got == [Removal(1, "retention-size"), Removal(2, "retention-size"), Removal(3, "retention-size")]
    # The unconsumed bytes count toward the limit: with ledger 4 unconsumed, still 3 go.
    assert [r.ledger_id for r in run(log(), Position(3, 9), -1, 3)] == [1, 2, 3]


def test_either_limit_removes_and_time_is_the_reason_named_first() -> None:
    got = run(log(age=7200), Position(6, 2), 60, 1)
    assert {r.reason for r in got} == {"retention-time"}
    assert [r.ledger_id for r in got] == [1, 2, 3, 4, 5]


def test_an_empty_closed_ledger_goes_when_the_walk_reaches_it() -> None:
    ledgers = [L(1, 0, 0, NOW - 10), L(2, 10, MB, NOW - 10), L(3, 0, 0, 0.0)]
    assert run(ledgers, Position(2, 9), 60, -1) == [Removal(1, "empty-ledger")]


def test_slowest_is_the_oldest_cursor_or_retain_from_or_everything_without_cursors() -> None:
    last = Position(6, 2)
    assert slowest_position([Position(4, 1), Position(2, 9)], None, last) == Position(2, 9)
    assert slowest_position([Position(4, 1)], Position(3, 0), last) == Position(3, 0)
    assert slowest_position([Position(4, 1)], Position(5, 0), last) == Position(4, 1)
    assert slowest_position([], None, last) == last
    assert slowest_position([], Position(1, 5), last) == Position(1, 5)
