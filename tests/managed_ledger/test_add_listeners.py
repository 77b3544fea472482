"""The publish path without futures: ``ManagedLedger.add_entry_with`` and the in-process bookie's
``add_callback`` call their listeners directly, in entry order, from the turn of the loop in which
the group commit was resolved (each future callback in between cost one more turn: about 0.1 ms of
a message's publish latency at low load). Real storage, real ledgers (conftest.py)."""

from __future__ import annotations

import asyncio

import pytest
from tests.managed_ledger.conftest import Stack

from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, Position
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import AlreadyClosed, ChecksumError

SMALL = ManagedLedgerConfig(max_entries_per_ledger=10, min_ledger_seconds=0, cursor_flush_delay=0.001)


class _Outcomes:
    """Listener outcomes, with whether each arrived while the storage was resolving a commit."""

    def __init__(self, stack: Stack) -> None:
        self.got: list[tuple[Position | None, BaseException | None, bool]] = []
        self.all_in = asyncio.Event()
        self.expected = 0
        self.resolving = False
        storage = stack.storage
        resolve = storage._resolve

        def traced(items: object) -> None:
            self.resolving = True
            try:
                resolve(items)  # type: ignore[arg-type]
            finally:
                self.resolving = False

        storage._resolve = traced  # type: ignore[method-assign]

    def listener(self, pos: Position | None, exc: BaseException | None) -> None:
        self.got.append((pos, exc, self.resolving))
        if len(self.got) == self.expected:
            self.all_in.set()


async def test_listeners_run_in_entry_order_inside_the_commit_resolution(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/direct", stack.store, stack.ledgers, ManagedLedgerConfig())
    out = _Outcomes(stack)
    out.expected = 50
    for i in range(50):
        ml.add_entry_with(f"m{i}".encode(), out.listener)
    assert out.got == []  # never called synchronously
    await asyncio.wait_for(out.all_in.wait(), 10)
    positions = [pos for pos, _, _ in out.got]
    assert all(exc is None for _, exc, _ in out.got)
    assert positions == sorted(positions) and len(set(positions)) == 50
    # Direct: every listener ran while the storage was resolving its group commit, not a turn later.
    assert all(inside for _, _, inside in out.got)
    got = await ml.read_entries(positions[0], 50)
    assert [d for _, d in got] == [f"m{i}".encode() for i in range(50)]
    await ml.close()


async def test_adds_queued_behind_a_rollover_keep_their_order(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/queued", stack.store, stack.ledgers, SMALL)
    await ml.open_cursor("holds-data", start_at_earliest=True)
    out = _Outcomes(stack)
    out.expected = 35
    for i in range(35):  # every 10 a roll-over starts, and the adds after it wait in the queue
        ml.add_entry_with(f"q{i}".encode(), out.listener)
    await asyncio.wait_for(out.all_in.wait(), 10)
    positions = [pos for pos, _, _ in out.got]
    assert all(exc is None for _, exc, _ in out.got)
    assert positions == sorted(positions)
    assert len({p.ledger_id for p in positions if p is not None}) >= 4
    await ml.close()


async def test_a_refused_add_raises_at_once_and_a_queued_one_fails_through_its_listener(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/refused", stack.store, stack.ledgers, SMALL)
    out = _Outcomes(stack)
    refusal = AlreadyClosed("producer fenced")
    with pytest.raises(AlreadyClosed):
        ml.add_entry_with(b"x", out.listener, precondition=lambda: refusal)
    for i in range(10):
        ml.add_entry_with(f"f{i}".encode(), out.listener)
    out.expected = 11
    # The 11th waits behind the roll-over; its precondition fails when it is issued.
    ml.add_entry_with(b"late", out.listener, precondition=lambda: refusal)
    await asyncio.wait_for(out.all_in.wait(), 10)
    assert [exc for _, exc, _ in out.got[:10]] == [None] * 10
    assert out.got[10][:2] == (None, refusal)
    await ml.close()
    with pytest.raises(AlreadyClosed):
        ml.add_entry_with(b"after close", out.listener)


async def test_add_entry_cancelled_while_queued_is_not_stored(stack: Stack) -> None:
    ml = await ManagedLedger.open("t/ns/cancel", stack.store, stack.ledgers, SMALL)
    await ml.open_cursor("holds-data", start_at_earliest=True)
    first = [asyncio.ensure_future(ml.add_entry(f"c{i}".encode())) for i in range(10)]
    await asyncio.sleep(0)  # the ten are issued; the next add waits for the roll-over
    waiting = asyncio.ensure_future(ml.add_entry(b"cancelled"))
    after = asyncio.ensure_future(ml.add_entry(b"after"))
    await asyncio.sleep(0)
    waiting.cancel()
    positions = await asyncio.gather(*first)
    last = await after
    assert waiting.cancelled()
    assert ml.total_entries == 11  # the ten and "after": the cancelled add was never issued
    assert last.ledger_id != positions[-1].ledger_id and last.entry_id == 0
    assert await ml.read_entries(last, 5) == [(last, b"after")]
    await ml.close()


async def test_storage_add_callback_answers_durable_adds_and_refusals_never_synchronously(stack: Stack) -> None:
    storage = stack.storage
    answers: list[BaseException | None] = []
    done = asyncio.Event()

    def answered(exc: BaseException | None) -> None:
        answers.append(exc)
        if len(answers) == 2:
            done.set()

    storage.add_callback(77, 0, b"good", crc32c(b"good"), -1, answered)
    storage.add_callback(77, 1, b"bad", crc32c(b"bad") ^ 1, -1, answered)
    assert answers == []
    await asyncio.wait_for(done.wait(), 10)
    assert sorted(answers, key=lambda e: e is not None)[0] is None
    assert any(isinstance(e, ChecksumError) for e in answers)
    assert storage.read_sync(77, 0).data == b"good"
