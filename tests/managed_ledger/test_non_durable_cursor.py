"""Non-durable cursors (readers, WIRE.md R20f): in memory only, never loaded back, and they do
not hold back trimming (Pulsar's NonDurableCursor)."""

from __future__ import annotations

from tests.managed_ledger.conftest import Stack

from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, Position

SMALL = ManagedLedgerConfig(max_entries_per_ledger=10, min_ledger_seconds=0, cursor_flush_delay=0.001)


async def test_non_durable_cursor_is_never_stored_or_loaded(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/reader", stack.store, stack.ledgers, SMALL)
    p = [await ml.add_entry(f"{i}".encode()) for i in range(5)]
    reader = ml.open_non_durable_cursor("reader-1", p[1])
    assert reader.read_position == p[2] and reader.backlog == 3
    assert ml.open_non_durable_cursor("reader-1", p[0]) is reader
    assert "reader-1" not in ml.cursors
    ack = reader.ack([p[2]])
    assert ack.done()  # nothing to write
    assert reader.mark_delete == p[2]
    await ml.close()
    assert not await stack.store.exists(ml.cursor_path("reader-1"))
    again = await ManagedLedger.open("t/ns/reader", stack.store, stack.ledgers, SMALL)
    assert again.cursors == {} and again.non_durable_cursors == {}
    await again.close()


async def test_readers_do_not_hold_back_trimming_and_move_past_trimmed_ledgers(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/reader-trim", stack.store, stack.ledgers, SMALL)
    sub = await ml.open_cursor("sub", start_at_earliest=True)
    reader = ml.open_non_durable_cursor("reader", ml.first_position)
    p = [await ml.add_entry(f"{i}".encode()) for i in range(25)]
    await reader.ack([p[15]])  # an acknowledged position inside a ledger about to go
    await sub.ack_cumulative(p[-1])
    trimmed = await ml.trim()
    assert p[0].ledger_id in trimmed and p[15].ledger_id in trimmed
    assert reader.mark_delete == ml.first_position
    assert reader.read_position == Position(ml.ledger_ids[0], 0)
    assert reader.acked == set()
    assert reader.backlog == ml.entries_after(ml.first_position)
    ml.close_non_durable_cursor("reader")
    assert ml.non_durable_cursors == {}
    await ml.close()


async def test_a_reader_opened_before_the_oldest_entry_starts_at_it(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/reader-old", stack.store, stack.ledgers, SMALL)
    p = [await ml.add_entry(f"{i}".encode()) for i in range(3)]
    reader = ml.open_non_durable_cursor("r", Position(-1, -1))
    assert reader.mark_delete == ml.first_position and reader.read_position == p[0]
    await ml.close()
