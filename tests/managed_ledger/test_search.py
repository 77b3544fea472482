"""Finding the first entry whose key (publish time) reaches a target: binary search, then the
bounded walk back over producers' out-of-order keys (managed_ledger/search.py, WIRE.md R20a)."""

from __future__ import annotations

from tests.managed_ledger.conftest import Stack

from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, Position
from magnetar.managed_ledger.search import first_reaching

SMALL = ManagedLedgerConfig(max_entries_per_ledger=4, min_ledger_seconds=0, cursor_flush_delay=0.001)


def key(data: bytes) -> int:
    return int(data)


async def _log(stack: Stack, name: str, keys: list[int]) -> tuple[ManagedLedger, list[Position]]:
    ml = await ManagedLedger.open(name, stack.store, stack.ledgers, SMALL)
    await ml.open_cursor("keep", start_at_earliest=True)
    return ml, [await ml.add_entry(str(k).encode()) for k in keys]


async def test_sorted_keys_find_the_lower_bound_across_ledgers(stack: Stack) -> None:
    ml, p = await _log(stack, "t/ns/sorted", [10, 20, 20, 30, 40, 40, 50, 60, 70, 80])
    assert len({pos.ledger_id for pos in p}) >= 3
    assert await first_reaching(ml, key, 0) == p[0]
    assert await first_reaching(ml, key, 20, slack=0) == p[1]
    assert await first_reaching(ml, key, 21, slack=0) == p[3]
    assert await first_reaching(ml, key, 45) == p[6]
    assert await first_reaching(ml, key, 80) == p[9]
    assert await first_reaching(ml, key, 81) is None
    await ml.close()


async def test_out_of_order_keys_within_the_slack_move_the_answer_back(stack: Stack) -> None:
    # A producer whose clock runs ahead logged 5000 before the others' 4000 and 4500.
    ml, p = await _log(stack, "t/ns/disorder", [100, 5000, 4000, 4500, 6000, 7000])
    assert await first_reaching(ml, key, 4800, slack=0) == p[4]  # the binary search alone: Pulsar's answer
    assert await first_reaching(ml, key, 4800, slack=1000) == p[1]  # 5000 is published after 4800 too
    # Far below the target, the walk stops: the 100 is not a reason to look further back.
    assert await first_reaching(ml, key, 6500, slack=1000) == p[5]
    # The binary search may end past the last entry; the walk back still finds 5000.
    ml2, q = await _log(stack, "t/ns/disorder-tail", [5000, 4000, 4100])
    assert await first_reaching(ml2, key, 4500, slack=0) is None
    assert await first_reaching(ml2, key, 4500, slack=1000) == q[0]
    await ml.close()
    await ml2.close()
