"""A consumer at the tail gets a new entry in the callback that made it durable (Subscription.on_added).

Real managed ledger and bookie storage (conftest.py); the client connection is ``FakeSink``. The
bookie's answer runs in a ``write_batch`` scope; the direct dispatch runs as that scope closes,
after the receipts' flushes. ``ScopeSink`` records whether each delivery happened inside such a
scope (the dispatch task of the usual round runs in a later loop turn, outside any).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.broker.conftest import CONFIG, FakeSink, consumer, open_ml, publish, subscription

from magnetar import write_batch
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record
from magnetar.protocol.entry import encode_entry


def entry(payload: bytes) -> bytes:
    meta, body = encode_batch([make_record(payload, None, None, 0, 0)], producer_name="p", first_sequence_id=0)
    return encode_entry(meta, body)


class ScopeSink(FakeSink):
    """A sink that notes, per delivery, whether it came inside a ``write_batch`` scope."""

    def __init__(self) -> None:
        super().__init__()
        self.in_scope: list[bool] = []

    def send_message(self, *args: Any, **kwargs: Any) -> None:
        self.in_scope.append(getattr(write_batch._local, "flushes", None) is not None)
        super().send_message(*args, **kwargs)


def seen_by_a_later_listener(ml: ManagedLedger, sink: FakeSink) -> list[int]:
    """How many messages the sink held each time an entry's listeners had run up to this one."""
    seen: list[int] = []
    ml.add_listener(lambda: seen.append(len(sink.messages)))
    return seen


@pytest.mark.parametrize("sub_type", [c.SUB_EXCLUSIVE, c.SUB_SHARED, c.SUB_FAILOVER, c.SUB_KEY_SHARED])
async def test_a_tail_consumer_gets_the_entry_within_its_add_callback(ml: ManagedLedger, sub_type: str) -> None:
    sink = ScopeSink()
    sub = await subscription(ml, sub_type)
    sub.add_consumer(consumer(sink, 1, permits=10), sub_type)
    first = await publish(ml, b"a")
    second = await publish(ml, b"b")
    assert [m.pos for m in sink.messages] == [first, second]
    assert sink.in_scope == [True, True]  # in the bookie's answer, not a later loop turn
    assert sub._task is None  # the dispatch round was never needed
    assert sub.cursor.read_position == ml.next_position(second)
    sub.close()


async def test_entries_of_one_group_commit_go_out_in_one_dispatch(ml: ManagedLedger) -> None:
    sink = ScopeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=100), c.SUB_SHARED)
    rounds: list[int] = []
    direct = sub._dispatch_from_cache

    def counted() -> bool:
        rounds.append(len(sink.messages))
        return direct()

    sub._dispatch_from_cache = counted  # type: ignore[method-assign]
    positions = await asyncio.gather(*(publish(ml, b"m%d" % i) for i in range(20)))
    assert sorted(m.pos for m in sink.messages) == sorted(positions) and all(sink.in_scope)
    # Fewer dispatches than entries: each ran for every entry its group commit made durable.
    assert len(rounds) < 20, rounds
    sub.close()


async def test_a_subscription_closed_before_the_scope_ends_delivers_nothing(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=10), c.SUB_SHARED)
    ml.add_listener(sub.close)  # runs after the subscription's own listener, before the scope ends
    await publish(ml, b"a")
    assert sink.messages == [] and sub._task is None


async def test_the_producers_receipt_comes_before_the_delivery(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=10), c.SUB_SHARED)
    at_receipt: list[int] = []
    done = asyncio.get_running_loop().create_future()

    def receipt(pos: Position | None, exc: BaseException | None) -> None:
        at_receipt.append(len(sink.messages))
        done.set_result(pos)

    ml.add_entry_with(entry(b"x"), receipt)
    pos = await done
    assert at_receipt == [0]  # the receipt ran first...
    assert [m.pos for m in sink.messages] == [pos]  # ...and the delivery still in the same callback
    sub.close()


async def test_a_consumer_without_permits_gets_the_entry_once_it_has_some(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    cons = consumer(sink, 1, permits=0)
    sub.add_consumer(cons, c.SUB_SHARED)
    seen = seen_by_a_later_listener(ml, sink)
    pos = await publish(ml, b"a")
    assert seen == [0] and not sink.messages
    sub.flow(cons, 5)
    await sink.wait_until(lambda: len(sink.messages) == 1)
    assert sink.messages[0].pos == pos
    sub.close()


async def test_pending_replays_go_first_through_the_dispatch_round(ml: ManagedLedger) -> None:
    """A negative ack puts an entry up for redelivery: the next new entry must not overtake it
    through the direct path, the round serves the replay first."""
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    cons = consumer(sink, 1, permits=10)
    sub.add_consumer(cons, c.SUB_SHARED)
    first = await publish(ml, b"a")
    await sink.wait_until(lambda: len(sink.messages) == 1)
    sub.negative_ack(cons, [first])
    second = await publish(ml, b"b")
    await sink.wait_until(lambda: len(sink.messages) == 3)
    assert [m.pos for m in sink.messages] == [first, first, second]
    sub.close()


@pytest.fixture
async def uncached_ml(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    """A managed ledger with no entry cache: every read goes to the bookie."""
    async with open_ml(tmp_path, dataclasses.replace(CONFIG, cache_bytes=0)) as ml:
        yield ml


async def test_an_entry_not_in_the_cache_is_read_from_the_bookie_by_the_round(uncached_ml: ManagedLedger) -> None:
    ml = uncached_ml
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=10), c.SUB_SHARED)
    seen = seen_by_a_later_listener(ml, sink)
    pos = await publish(ml, b"a")
    assert seen == [0]  # nothing cached: the direct path stood aside...
    await sink.wait_until(lambda: len(sink.messages) == 1)  # ...and the round read it from the bookie
    assert sink.messages[0].pos == pos and ml.read_cached(pos, 1) is None
    sub.close()
