"""The guarded clock TTL, retention and delayed delivery age data by (``managed_ledger/clock.py``):
it follows the wall clock, but not a step of it. Driven by hand-set wall and monotonic readings;
``tests/faults/test_clock_jumps.py`` steps a real broker's clock with libfaketime."""

from __future__ import annotations

import pytest

from magnetar.managed_ledger.clock import GuardedClock


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def guarded(c: Clocks, **kw: object) -> GuardedClock:
    return GuardedClock(lambda: c.wall, lambda: c.mono, tolerance=1.0, slew=0.01, **kw)  # type: ignore[arg-type]


def test_follows_the_wall_clock_and_its_small_corrections() -> None:
    c = Clocks()
    g = guarded(c)
    c.advance(10)
    assert g.now() == c.wall
    c.wall += 0.4  # NTP-sized correction: followed
    c.advance(1)
    assert g.now() == c.wall
    assert g.jumps == 0


def test_a_forward_step_is_not_taken_only_slewed_towards() -> None:
    c = Clocks()
    g = guarded(c)
    start = g.now()
    c.wall += 3600  # the broker's clock set an hour ahead
    c.advance(100)
    now = g.now()
    assert now == pytest.approx(start + 100 + 1.0)  # 100 s of real time, plus 1 % of it
    assert g.jumps == 1
    assert g.offset == pytest.approx(3600 - 1.0)
    c.wall -= 3600  # undone: back in step, and followed again
    c.advance(5)
    assert g.now() == pytest.approx(c.wall, abs=1.1)
    c.advance(200)
    assert g.now() == c.wall
    assert g.jumps == 1


def test_a_backward_step_neither_stops_time_nor_runs_it_backwards() -> None:
    c = Clocks()
    g = guarded(c)
    start = g.now()
    c.wall -= 3600
    c.advance(100)
    assert g.now() == pytest.approx(start + 99.0)  # goes on, 1 % slower
    c.advance(100)
    assert g.now() == pytest.approx(start + 198.0)


def test_a_persistent_step_is_reached_at_the_slew_rate() -> None:
    c = Clocks()
    g = guarded(c)
    c.wall += 10
    for _ in range(12):
        c.advance(100)  # 1 s of slew per 100 s
        g.now()
    assert g.now() == c.wall  # within the tolerance after 9 s of slew: followed again


def test_off_it_is_the_wall_clock() -> None:
    c = Clocks()
    g = guarded(c, enabled=False)
    c.wall += 3600
    assert g.now() == c.wall


def test_the_broker_exports_the_steps_and_the_offset() -> None:
    """``broker/metrics.ClockCollector``: what an operator alerts on (the fault test checks it on
    a real broker whose clock libfaketime steps)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from tests.support.metrics import total

    from magnetar.broker.metrics.registry import ClockCollector

    c = Clocks()
    g = guarded(c)
    registry = CollectorRegistry()
    registry.register(ClockCollector(g))

    def scraped() -> tuple[float, float]:
        text = generate_latest(registry).decode()
        return total(text, "magnetar_broker_clock_steps_total"), total(text, "magnetar_broker_clock_offset_seconds")

    assert scraped() == (0.0, 0.0)
    c.wall += 3600
    c.advance(100)
    steps, offset = scraped()
    assert steps == 1 and offset == pytest.approx(3600 - 1.0)
    c.wall -= 3600
    c.advance(5)
    steps, offset = scraped()
    assert steps == 1 and abs(offset) <= 1.1  # back in step: the count stays, the offset goes
