"""ManagedLedger: roll-over, reads across ledgers, recovery after a writer dies, cursors."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.managed_ledger.conftest import Stack

from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, Position
from magnetar.managed_ledger.cursor import from_ranges, to_ranges

SMALL = ManagedLedgerConfig(max_entries_per_ledger=10, min_ledger_seconds=0, cursor_flush_delay=0.001)


async def _read_all(ml: ManagedLedger, start: Position) -> list[bytes]:
    out: list[bytes] = []
    pos = start
    while True:
        got = await ml.read_entries(pos, 7)
        if not got:
            return out
        out.extend(d for _, d in got)
        pos = ml.next_position(got[-1][0])


async def test_rollover_spreads_entries_over_ledgers_and_reads_back_in_order(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/roll", stack.store, stack.ledgers, SMALL)
    await ml.open_cursor("holds-data", start_at_earliest=True)  # without one, passed ledgers are trimmed
    payloads = [f"e{i}".encode() for i in range(35)]
    positions = await asyncio.gather(*(ml.add_entry(p) for p in payloads))
    assert positions == sorted(positions)
    assert len(set(p.ledger_id for p in positions)) >= 4
    assert ml.total_entries == 35
    assert await _read_all(ml, ml.first_position) == payloads
    await ml.close()


async def test_reopen_after_close_keeps_entries_and_cursors(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/reopen", stack.store, stack.ledgers, SMALL)
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    positions = [await ml.add_entry(f"{i}".encode()) for i in range(15)]
    await cursor.ack(positions[:5])
    await cursor.ack([positions[7]])
    await ml.close()
    ml2 = await ManagedLedger.open("t/ns/reopen", stack.store, stack.ledgers, SMALL)
    assert ml2.total_entries == 15
    c2 = ml2.cursors["sub"]
    assert c2.mark_delete == positions[4]
    assert c2.is_acked(positions[7]) and not c2.is_acked(positions[6])
    assert c2.backlog == 15 - 6
    assert await _read_all(ml2, c2.read_position) == [f"{i}".encode() for i in range(5, 15)]
    await ml2.close()


async def test_writer_that_dies_is_recovered_with_every_acknowledged_entry(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/crash", stack.store, stack.ledgers, ManagedLedgerConfig())
    acked = [await ml.add_entry(f"{i}".encode()) for i in range(20)]
    # No close(): the ledger stays OPEN in metadata, as after kill -9.
    ml2 = await ManagedLedger.open("t/ns/crash", stack.store, stack.ledgers, ManagedLedgerConfig())
    assert ml2.total_entries == 20
    assert await _read_all(ml2, ml2.first_position) == [f"{i}".encode() for i in range(20)]
    # The recovered ledger is fenced: the dead writer can no longer add to it.
    try:
        await ml.add_entry(b"zombie")
    except Exception as exc:
        assert "fenced" in type(exc).__name__.lower() or "fenced" in str(exc).lower()
    else:
        raise AssertionError("the old writer could still append after recovery")
    assert acked[-1] < ml2.last_confirmed or ml2.last_confirmed == acked[-1]
    new = await ml2.add_entry(b"after")
    assert new > acked[-1]
    await ml2.close()


async def test_empty_last_ledger_is_dropped_on_recovery(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/empty", stack.store, stack.ledgers, SMALL)
    await ml.add_entry(b"x")
    await ml.close()
    for _ in range(3):  # each open creates a ledger; empty ones must not pile up
        again = await ManagedLedger.open("t/ns/empty", stack.store, stack.ledgers, SMALL)
        await again.close()
    final = await ManagedLedger.open("t/ns/empty", stack.store, stack.ledgers, SMALL)
    assert len(final.ledger_ids) <= 2
    assert final.total_entries == 1
    await final.close()


async def test_cursor_latest_starts_after_existing_entries(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/latest", stack.store, stack.ledgers, SMALL)
    for i in range(3):
        await ml.add_entry(f"old{i}".encode())
    cursor = await ml.open_cursor("late")
    assert not cursor.has_more()
    await ml.add_entry(b"new")
    assert cursor.has_more()
    assert await _read_all(ml, cursor.read_position) == [b"new"]
    await ml.close()


async def test_cumulative_ack_and_reset(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/cum", stack.store, stack.ledgers, SMALL)
    cursor = await ml.open_cursor("c", start_at_earliest=True)
    positions = [await ml.add_entry(b"e") for _ in range(25)]
    await cursor.ack([positions[20]])
    await cursor.ack_cumulative(positions[12])
    assert cursor.mark_delete == positions[12]
    assert cursor.backlog == 25 - 13 - 1
    await cursor.reset(positions[2])
    assert cursor.backlog == 25 - 3
    assert cursor.read_position == positions[3]
    await ml.close()


@settings(max_examples=60, deadline=None)
@given(st.permutations(list(range(30))), st.integers(0, 30))
def test_mark_delete_is_the_longest_acknowledged_prefix(order: list[int], n_acked: int) -> None:
    """Model check of the cursor rule, on the cursor's own range encoding and advance logic."""
    positions = [Position(1 + i // 10, i % 10) for i in range(30)]
    acked = {positions[i] for i in order[:n_acked]}
    assert from_ranges(to_ranges(acked)) == acked
    prefix = 0
    while prefix < 30 and positions[prefix] in acked:
        prefix += 1
    # A fresh in-memory ledger view: three full ledgers of ten entries.

    class _View:
        def next_position(self, pos: Position) -> Position:
            lid, eid = pos
            if lid == 0:
                return Position(1, 0)
            return Position(lid, eid + 1) if eid + 1 < 10 else Position(lid + 1, 0)

    from magnetar.managed_ledger.cursor import ManagedCursor

    cursor = ManagedCursor.__new__(ManagedCursor)
    cursor.ml = _View()  # type: ignore[assignment]
    cursor.mark_delete = Position(0, 0)
    cursor.acked = set(acked)
    cursor.read_position = Position(1, 0)
    cursor._advance()
    expected = positions[prefix - 1] if prefix else Position(0, 0)
    assert cursor.mark_delete == expected
    assert cursor.acked == {p for p in acked if p > expected}


async def test_a_failed_ledger_is_left_for_a_new_one_on_the_next_add(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/fail", stack.store, stack.ledgers, ManagedLedgerConfig())
    await ml.open_cursor("c", start_at_earliest=True)
    first = [await ml.add_entry(f"{i}".encode()) for i in range(5)]
    failed_ledger = first[0].ledger_id
    await stack.ledgers.open(failed_ledger, recovery=True)  # fences it, as a takeover would
    try:
        await ml.add_entry(b"lost-write")
    except Exception as exc:
        assert "fenced" in str(exc).lower() or "Fenced" in type(exc).__name__
    else:
        raise AssertionError("an add to a fenced ledger succeeded")
    after = await ml.add_entry(b"after")
    assert after.ledger_id != failed_ledger
    assert ml.entries_in(failed_ledger) == 5
    assert await _read_all(ml, ml.first_position) == [b"0", b"1", b"2", b"3", b"4", b"after"]
    await ml.close()


async def test_a_full_ledger_rolls_over_only_once_it_is_old_enough(stack: Stack) -> None:
    """managedLedgerMinLedgerRolloverTimeMinutes: a ledger past its entry limit keeps taking adds
    until it reaches the minimum age; the first add after that goes to a new ledger."""
    config = ManagedLedgerConfig(max_entries_per_ledger=5, min_ledger_seconds=600, cursor_flush_delay=0.001)
    ml = await ManagedLedger.open("t/ns/young", stack.store, stack.ledgers, config)
    await ml.open_cursor("c", start_at_earliest=True)
    young = [await ml.add_entry(f"{i}".encode()) for i in range(12)]
    assert {p.ledger_id for p in young} == {young[0].ledger_id}
    assert ml.entries_in(young[0].ledger_id) == 12
    ml._current_created -= 600  # the ledger is now ten minutes old, as if the time had passed
    after = await ml.add_entry(b"after")
    assert after.ledger_id != young[0].ledger_id
    assert ml.ledger_ids[:2] == [young[0].ledger_id, after.ledger_id]
    assert await _read_all(ml, ml.first_position) == [f"{i}".encode() for i in range(12)] + [b"after"]
    await ml.close()
