"""Trimming: ledgers every cursor has passed are deleted unless retention keeps them;
unacknowledged data is never deleted."""

from __future__ import annotations

import dataclasses

import pytest
from tests.managed_ledger.conftest import Stack

from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig
from magnetar.protocol.errors import MagnetarError

SMALL = ManagedLedgerConfig(max_entries_per_ledger=10, min_ledger_seconds=0, cursor_flush_delay=0.001)


async def _fill(ml: ManagedLedger, n: int) -> list:  # type: ignore[type-arg]
    return [await ml.add_entry(f"{i}".encode()) for i in range(n)]


async def test_consumed_ledgers_are_deleted_and_unconsumed_ones_kept(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/trim", stack.store, stack.ledgers, SMALL)
    fast = await ml.open_cursor("fast", start_at_earliest=True)
    slow = await ml.open_cursor("slow", start_at_earliest=True)
    positions = await _fill(ml, 45)  # ledgers of 10: four closed, one being written
    first_ledgers = ml.ledger_ids[:3]
    await fast.ack_cumulative(positions[-1])
    await slow.ack_cumulative(positions[19])  # the slow cursor has passed the first two ledgers
    await ml.trim()
    assert ml.ledger_ids[0] == first_ledgers[2]
    for lid in first_ledgers[:2]:
        with pytest.raises(MagnetarError):
            await stack.ledgers.get_metadata(lid)
    # Everything the slow cursor has not acknowledged is still readable.
    got = await ml.read_entries(slow.read_position, 100)
    assert got[0][1] == b"20"
    assert slow.backlog == 25
    await ml.close()
    reopened = await ManagedLedger.open("t/ns/trim", stack.store, stack.ledgers, SMALL)
    assert reopened.ledger_ids[0] == first_ledgers[2]
    assert reopened.cursors["slow"].backlog == 25
    await reopened.close()


async def test_retention_size_keeps_recent_consumed_ledgers(stack: Stack) -> None:
    keep = dataclasses.replace(SMALL, retention_mb=-1, retention_minutes=-1)
    ml = await ManagedLedger.open("t/ns/keep", stack.store, stack.ledgers, keep)
    cursor = await ml.open_cursor("c", start_at_earliest=True)
    positions = await _fill(ml, 35)
    await cursor.ack_cumulative(positions[-1])
    assert await ml.trim() == []
    assert ml.total_entries == 35
    await ml.close()


async def test_time_retention_expires_consumed_ledgers(stack: Stack) -> None:
    cfg = dataclasses.replace(SMALL, retention_mb=-1, retention_minutes=1)
    ml = await ManagedLedger.open("t/ns/ttl", stack.store, stack.ledgers, cfg)
    cursor = await ml.open_cursor("c", start_at_earliest=True)
    positions = await _fill(ml, 25)
    await cursor.ack_cumulative(positions[-1])
    import time

    assert ml.trimmable(now=time.time()) == []  # within the minute
    assert ml.trimmable(now=time.time() + 120) == ml.ledger_ids[:2]  # both closed ledgers expired
    await ml.close()


async def test_trim_is_triggered_by_acknowledgement(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/auto", stack.store, stack.ledgers, SMALL)
    cursor = await ml.open_cursor("c", start_at_earliest=True)
    positions = await _fill(ml, 25)
    before = ml.ledger_ids
    await cursor.ack_cumulative(positions[-1])
    task = ml._trim_task
    assert task is not None
    await task
    assert ml.ledger_ids == before[2:]
    await ml.close()
