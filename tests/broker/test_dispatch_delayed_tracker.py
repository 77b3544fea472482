"""The delayed-delivery tracker alone: order, never early, bounded memory with the SQLite tier."""

from __future__ import annotations

import asyncio
import random

from magnetar.broker.subscriptions.delayed_delivery import DelayedDeliveryTracker, now_ms
from magnetar.managed_ledger import Position


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


async def drain(tracker: DelayedDeliveryTracker, now: int) -> list[Position]:
    """Everything due at ``now``, loading the disk tier as needed."""
    out: list[Position] = []
    while True:
        got = tracker.pop_due(1_000_000, now)
        out.extend(got)
        await tracker.idle()
        if not got and not tracker.has_due(now):
            return out


async def test_entries_come_out_in_deliver_at_order_and_never_before_their_time() -> None:
    clock = Clock(1_000)
    tracker = DelayedDeliveryTracker(lambda: None, clock=clock)
    tracker.add(Position(1, 0), 1_500)
    tracker.add(Position(1, 1), 1_200)
    tracker.add(Position(1, 2), 1_200)
    assert len(tracker) == 3
    assert tracker.pop_due(10, 1_199) == [] and not tracker.has_due(1_199)
    assert tracker.pop_due(10, 1_200) == [Position(1, 1), Position(1, 2)]
    assert tracker.pop_due(10, 1_499) == []
    assert tracker.pop_due(10, 1_500) == [Position(1, 0)]
    assert len(tracker) == 0
    tracker.close()


async def test_a_large_backlog_spills_to_disk_and_memory_stays_bounded() -> None:
    clock = Clock(0)
    tracker = DelayedDeliveryTracker(lambda: None, memory_limit=64, spill_batch=50, clock=clock)
    rng = random.Random(7)
    wanted = {Position(3, i): rng.randrange(1, 10_000) for i in range(2_000)}
    for pos, at in wanted.items():
        tracker.add(pos, at)
        assert tracker.in_memory <= 65
    await tracker.idle()
    assert len(tracker) == 2_000
    assert tracker.in_memory <= 65 and tracker.on_disk > 1_500
    # Half-way: exactly the entries due by then, none later.
    half = await drain(tracker, 5_000)
    assert sorted(half) == sorted(p for p, at in wanted.items() if at <= 5_000)
    assert [wanted[p] for p in half] == sorted(wanted[p] for p in half)
    # Entries added now land on either tier and still come out in order.
    for i in range(200):
        pos = Position(4, i)
        wanted[pos] = 5_001 + rng.randrange(0, 10_000)
        tracker.add(pos, wanted[pos])
    rest = await drain(tracker, 1_000_000)
    assert [wanted[p] for p in rest] == sorted(wanted[p] for p in rest)
    assert sorted(half + rest) == sorted(wanted)
    assert len(tracker) == 0
    tracker.close()


async def test_removed_entries_are_never_released_wherever_they_sit() -> None:
    tracker = DelayedDeliveryTracker(lambda: None, memory_limit=16, spill_batch=10, clock=Clock(0))
    positions = [Position(5, i) for i in range(300)]
    for i, pos in enumerate(positions):
        tracker.add(pos, 100 + i)
    await tracker.idle()
    assert tracker.on_disk > 200
    gone = positions[0:5] + positions[150:160] + positions[290:]  # memory, disk and the tail
    tracker.remove(gone)
    await tracker.idle()
    assert len(tracker) == 300 - len(gone)
    released = await drain(tracker, 10_000)
    assert released == [p for p in positions if p not in gone]
    tracker.close()


async def test_clear_forgets_both_tiers() -> None:
    tracker = DelayedDeliveryTracker(lambda: None, memory_limit=8, spill_batch=10, clock=Clock(0))
    for i in range(100):
        tracker.add(Position(6, i), 50 + i)
    await tracker.idle()
    tracker.clear()
    assert len(tracker) == 0 and await drain(tracker, 10_000) == []
    tracker.add(Position(6, 1), 10)  # usable again after a clear
    assert await drain(tracker, 10) == [Position(6, 1)]
    tracker.close()


async def test_the_timer_calls_back_at_the_deliver_time_not_before() -> None:
    fired = asyncio.Event()
    seen: list[int] = []

    def on_due() -> None:
        seen.append(now_ms())
        fired.set()

    tracker = DelayedDeliveryTracker(on_due)
    at = now_ms() + 80
    tracker.add(Position(7, 0), at)
    tracker.add(Position(7, 1), at + 10_000)
    await asyncio.wait_for(fired.wait(), 5)
    assert seen[0] >= at
    assert tracker.has_due() and tracker.pop_due(10) == [Position(7, 0)]
    assert not tracker.has_due()
    tracker.close()
