"""Shared dispatch on a real managed ledger: priority levels, batch-index acks, delayed delivery,
acks without a consumer and seeks."""

from __future__ import annotations

import pytest
from tests.broker.conftest import FakeSink, consumer, eventually, publish, subscription

from magnetar.broker.subscriptions.delayed_delivery import now_ms
from magnetar.managed_ledger import ManagedLedger
from magnetar.protocol import commands as c
from magnetar.protocol.errors import InvalidCommand


async def test_lower_priority_levels_are_served_first(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    a, b, low = consumer(sink, 1, permits=3), consumer(sink, 2, permits=3), consumer(sink, 3, permits=10, priority=1)
    for cons in (low, a, b):
        sub.add_consumer(cons, c.SUB_SHARED)
    for i in range(6):
        await publish(ml, f"m{i}".encode())
    await sink.wait_until(lambda: len(sink.messages) == 6)
    # Round robin within level 0 only, while it has permits.
    assert [m.consumer_id for m in sink.messages] == [1, 2, 1, 2, 1, 2]
    for i in range(2):
        await publish(ml, f"n{i}".encode())
    await sink.wait_until(lambda: len(sink.messages) == 8)
    assert [m.consumer_id for m in sink.messages[6:]] == [3, 3]
    assert {s["consumerName"]: s["priorityLevel"] for s in sub.stats()["consumers"]} == {"c1": 0, "c2": 0, "c3": 1}
    sub.close()


@pytest.mark.parametrize("sub_type", [c.SUB_SHARED, c.SUB_KEY_SHARED])
async def test_cumulative_acks_are_refused_on_shared_types(ml: ManagedLedger, sub_type: str) -> None:
    sink = FakeSink()
    sub = await subscription(ml, sub_type)
    cons = consumer(sink, 1, permits=10)
    sub.add_consumer(cons, sub_type)
    pos = await publish(ml, b"x")
    await sink.wait_until(lambda: len(sink.messages) == 1)
    with pytest.raises(InvalidCommand, match="cumulative"):
        sub.ack(cons, c.ACK_CUMULATIVE, [pos])
    assert not sub.cursor.is_acked(pos)
    sub.close()


async def test_batch_index_acks_are_carried_on_redelivery_and_cost_no_permits(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    cons = consumer(sink, 1, permits=100)
    sub.add_consumer(cons, c.SUB_SHARED)
    pos = await publish(ml, b"a", b"b", b"c", b"d")
    await sink.wait_until(lambda: len(sink.messages) == 1)
    assert sink.messages[0].acked is None and cons.permits == 96
    await sub.ack(cons, c.ACK_INDIVIDUAL, [], [(pos, 4, [0, 2])])
    assert cons.unacked[pos] == 2 and not sub.cursor.is_acked(pos)
    sub.negative_ack(cons, [pos])
    await sink.wait_until(lambda: len(sink.messages) == 2)
    again = sink.messages[1]
    assert again.pos == pos and list(again.acked or []) == [0, 2] and again.redelivery_count == 1
    assert cons.permits == 96 - 2  # only the two messages still unacknowledged
    await sub.ack(cons, c.ACK_INDIVIDUAL, [], [(pos, 4, [1, 3])])
    assert sub.cursor.is_acked(pos) and pos not in cons.unacked and pos not in sub.owner
    sub.close()


async def test_shared_holds_a_delayed_entry_until_its_time_and_others_flow_past_it(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=100), c.SUB_SHARED)
    deliver_at = now_ms() + 300
    delayed = await publish(ml, b"later", deliver_at=deliver_at)
    plain = await publish(ml, b"now")
    await sink.wait_until(lambda: len(sink.messages) == 1)
    assert sink.messages[0].pos == plain
    assert sub.stats()["msgDelayed"] == 1
    await sink.wait_until(lambda: len(sink.messages) == 2)
    assert now_ms() >= deliver_at and sink.messages[1].pos == delayed
    assert sub.stats()["msgDelayed"] == 0
    sub.close()


async def test_exclusive_delivers_a_delayed_entry_at_once(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_EXCLUSIVE)
    sub.add_consumer(consumer(sink, 1, permits=100), c.SUB_EXCLUSIVE)
    pos = await publish(ml, b"later", deliver_at=now_ms() + 60_000)
    await sink.wait_until(lambda: len(sink.messages) == 1)  # well before the minute is up
    assert sink.messages[0].pos == pos and sub.stats()["msgDelayed"] == 0
    sub.close()


async def test_ack_positions_drops_a_pending_delayed_entry(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=100), c.SUB_SHARED)
    skipped = await publish(ml, b"skipped", deliver_at=now_ms() + 200)
    await eventually(lambda: sub.stats()["msgDelayed"] == 1)
    await sub.ack_positions([skipped])
    assert sub.stats()["msgDelayed"] == 0 and sub.cursor.is_acked(skipped)
    sentinel = await publish(ml, b"sentinel", deliver_at=now_ms() + 400)
    await sink.wait_until(lambda: len(sink.messages) == 1)
    assert [m.pos for m in sink.messages] == [sentinel]
    sub.close()


async def test_reset_forgets_what_consumers_hold_and_delivers_again(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    cons = consumer(sink, 1, permits=100)
    sub.add_consumer(cons, c.SUB_SHARED)
    positions = [await publish(ml, f"m{i}".encode()) for i in range(3)]
    await sink.wait_until(lambda: len(sink.messages) == 3)
    sub.negative_ack(cons, [positions[0]])
    await sink.wait_until(lambda: len(sink.messages) == 4)
    await sub.ack(cons, c.ACK_INDIVIDUAL, [positions[1]])
    await sub.reset(ml.first_position)
    assert not cons.unacked and not sub.owner and not sub.redeliver
    await sink.wait_until(lambda: len(sink.messages) == 7)
    assert [m.pos for m in sink.messages[4:]] == positions
    assert all(m.redelivery_count == 0 for m in sink.messages[4:])
    sub.close()
