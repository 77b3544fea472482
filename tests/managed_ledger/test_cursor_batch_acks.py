"""Batch-index acknowledgements on the cursor, and backlogs counted in messages (WIRE.md R20c).

Entries here are ``b"<messages>:<payload>"`` so that ``entry_messages`` can count a ledger read
back after a crash without the protocol's entry format.
"""

from __future__ import annotations

import json

from tests.managed_ledger.conftest import Stack

from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, Position
from magnetar.managed_ledger.counts import LedgerCounts

SMALL = ManagedLedgerConfig(max_entries_per_ledger=10, min_ledger_seconds=0, cursor_flush_delay=0.001)


def messages_in(data: bytes) -> int:
    return int(data.split(b":", 1)[0])


async def _open(stack: Stack, name: str) -> ManagedLedger:
    return await ManagedLedger.open(name, stack.store, stack.ledgers, SMALL, entry_messages=messages_in)


async def _add(ml: ManagedLedger, counts: list[int]) -> list[Position]:
    return [await ml.add_entry(f"{n}:x".encode(), messages=n) for n in counts]


async def test_partial_batch_acks_survive_a_crash_and_complete_the_entry(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/batch-crash")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    p = await _add(ml, [3, 1, 4])
    assert cursor.backlog == 8
    assert cursor.ack_batch_indexes(p[0], 3, [0, 2]) is False
    assert cursor.acked_indexes(p[0]) == frozenset({0, 2})
    assert cursor.backlog == 6
    await cursor.ack([])  # resolves once the partial ack is durable
    # No close: the next owner reopens the managed ledger as after kill -9.
    again = await _open(stack, "t/ns/batch-crash")
    c2 = again.cursors["sub"]
    assert c2.acked_indexes(p[0]) == frozenset({0, 2})
    assert not c2.is_acked(p[0])
    assert c2.backlog == 6
    assert c2.ack_batch_indexes(p[0], 3, [1]) is True
    assert c2.is_acked(p[0]) and c2.mark_delete == p[0]
    assert c2.acked_indexes(p[0]) is None
    assert c2.backlog == 5
    await c2.ack([])
    await again.close()
    third = await _open(stack, "t/ns/batch-crash")
    assert third.cursors["sub"].mark_delete == p[0]
    assert third.cursors["sub"].backlog == 5
    await third.close()


async def test_completing_an_entry_by_indexes_advances_over_individually_acked_ones(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/batch-advance")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    p = await _add(ml, [2, 1, 1])
    await cursor.ack([p[1]])
    assert cursor.mark_delete < p[0]
    assert cursor.ack_batch_indexes(p[0], 2, [1]) is False
    assert cursor.ack_batch_indexes(p[0], 2, [0, 1]) is True
    assert cursor.mark_delete == p[1]
    assert cursor.backlog == 1
    # Indexes of an entry already acknowledged are ignored, not recorded.
    assert cursor.ack_batch_indexes(p[0], 2, [0]) is True
    assert cursor.partial == {}
    await ml.close()


async def test_cumulative_ack_and_reset_drop_partial_records(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/batch-reset")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    p = await _add(ml, [4, 4, 4])
    cursor.ack_batch_indexes(p[0], 4, [0])
    cursor.ack_batch_indexes(p[2], 4, [1, 2])
    await cursor.ack_cumulative(p[0])
    assert cursor.acked_indexes(p[0]) is None
    assert cursor.acked_indexes(p[2]) == frozenset({1, 2})
    assert cursor.backlog == 8 - 2
    await cursor.reset(ml.first_position)
    assert cursor.partial == {}
    assert cursor.backlog == 12
    found = await stack.store.get(ml.cursor_path("sub"))
    assert found is not None and "batch" not in json.loads(found.value)
    await ml.close()


async def test_cursor_documents_without_batch_acks_still_load(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/old-doc")
    p = await _add(ml, [1, 1, 1])
    await stack.store.put(ml.cursor_path("old"), json.dumps({"md": list(p[0]), "acked": [[*p[2], p[2][1]]]}).encode())
    await ml.close()
    again = await _open(stack, "t/ns/old-doc")
    old = again.cursors["old"]
    assert old.mark_delete == p[0] and old.is_acked(p[2]) and not old.is_acked(p[1])
    assert old.partial == {} and old.backlog == 1
    await again.close()


async def test_backlog_counts_messages_across_ledgers_and_restarts(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/msg-backlog")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    counts = [1] * 10 + [5, 1, 7] + [2] * 9 + [1] * 3  # a uniform ledger, then batched ones
    p = await _add(ml, counts)
    assert len({pos.ledger_id for pos in p}) >= 3
    assert cursor.backlog == sum(counts) == ml.total_messages
    await cursor.ack([p[10], p[12]])  # 5 + 7 messages
    assert cursor.backlog == sum(counts) - 12
    await cursor.ack_cumulative(p[4])
    assert cursor.backlog == sum(counts[5:]) - 12
    await ml.close()
    # A closed uniform ledger stores no counts; a batched one does.
    uniform, batched = p[0].ledger_id, p[10].ledger_id
    assert await stack.store.get(ml.counts_path(uniform)) is None
    assert await stack.store.get(ml.counts_path(batched)) is not None
    again = await _open(stack, "t/ns/msg-backlog")
    assert again.cursors["sub"].backlog == sum(counts[5:]) - 12
    assert again.messages_of(p[12]) == 7 and again.messages_of(p[3]) == 1
    await again.close()


async def test_counts_of_a_ledger_left_open_by_a_crash_are_read_back(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/msg-crash")
    cursor = await ml.open_cursor("sub", start_at_earliest=True)
    p = await _add(ml, [3, 9, 1, 2])
    await cursor.ack([p[1]])
    # No close: the open ledger's counts were never stored.
    again = await _open(stack, "t/ns/msg-crash")
    assert again.cursors["sub"].backlog == 3 + 1 + 2
    assert [again.messages_of(x) for x in p] == [3, 9, 1, 2]
    # Recovery stored them: a later open needs no read back (and no entry_messages).
    await again.close()
    plain = await ManagedLedger.open("t/ns/msg-crash", stack.store, stack.ledgers, SMALL)
    assert [plain.messages_of(x) for x in p] == [3, 9, 1, 2]
    await plain.close()


async def test_deleting_the_managed_ledger_removes_stored_counts(stack: Stack) -> None:
    ml = await _open(stack, "t/ns/msg-delete")
    await ml.open_cursor("sub", start_at_earliest=True)
    await _add(ml, [2] * 25)
    await ml.delete()
    assert await stack.store.children(ml.counts_folder) == []


def test_single_message_ledgers_keep_no_per_entry_array() -> None:
    counts = LedgerCounts()
    for _ in range(1_000_000):
        counts.append(1)
    assert counts.nbytes == 0 and counts.total == 1_000_000 and counts.upto(499) == 500
    counts.append(7)  # the first batch: from now on 4 bytes an entry
    assert counts.nbytes == 4 * 1_000_001
    assert counts.total == 1_000_007 and counts.of_entry(1_000_000) == 7 and counts.of_entry(3) == 1
    small = LedgerCounts.of([1, 5, 2, 1])
    assert LedgerCounts.decode(small.encode()).per_entry() == [1, 5, 2, 1]
    small.truncate(2)
    assert small.per_entry() == [1, 5] and small.total == 6
