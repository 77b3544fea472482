"""Failover dispatch on a real managed ledger: election, notifications and hand-over."""

from __future__ import annotations

from tests.broker.conftest import FakeSink, consumer, publish, subscription

from magnetar.managed_ledger import ManagedLedger
from magnetar.protocol import commands as c


async def test_active_is_first_by_priority_then_name_and_changes_are_pushed(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_FAILOVER)
    a, b, cc = consumer(sink, 1, "a", priority=1), consumer(sink, 2, "b"), consumer(sink, 3, "c")
    sub.add_consumer(a, c.SUB_FAILOVER)
    assert sink.active_changes == [(1, True)]
    sub.add_consumer(cc, c.SUB_FAILOVER)  # better level: takes over from a
    assert sink.active_changes[1:] == [(1, False), (3, True)]
    sub.add_consumer(b, c.SUB_FAILOVER)  # same level as c, earlier name
    assert sink.active_changes[3:] == [(3, False), (2, True)]
    assert sub.stats()["activeConsumerName"] == "b"
    sub.remove_consumer(b)
    assert sink.active_changes[5:] == [(3, True)]  # only the consumer whose role changed
    sub.add_consumer(consumer(sink, 4, "d"), c.SUB_FAILOVER)  # joins as a standby: told so
    assert sink.active_changes[6:] == [(4, False)]
    sub.close()


async def test_partition_i_is_served_by_the_i_mod_n_th_consumer_of_the_best_level(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_FAILOVER, topic="persistent://public/default/p-partition-3")
    for cid, name, prio in [(1, "a", 0), (2, "b", 0), (3, "c", 1)]:
        sub.add_consumer(consumer(sink, cid, name, priority=prio, permits=10), c.SUB_FAILOVER)
    assert sub.dispatcher.active_consumer is not None and sub.dispatcher.active_consumer.name == "b"  # 3 % 2
    pos = await publish(ml, b"x")
    await sink.wait_until(lambda: len(sink.messages) == 1)
    assert (sink.messages[0].consumer_id, sink.messages[0].pos) == (2, pos)
    sub.close()


async def test_standbys_get_nothing_and_a_new_active_gets_what_the_old_one_left_unacked(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_FAILOVER)
    old = consumer(sink, 1, "m", permits=10)
    standby = consumer(sink, 2, "z", permits=10)
    sub.add_consumer(old, c.SUB_FAILOVER)
    sub.add_consumer(standby, c.SUB_FAILOVER)
    positions = [await publish(ml, f"m{i}".encode()) for i in range(3)]
    await sink.wait_until(lambda: len(sink.messages) == 3)
    assert {m.consumer_id for m in sink.messages} == {1}
    await sub.ack(old, c.ACK_INDIVIDUAL, [positions[0]])
    # A consumer with an earlier name joins: it becomes active and gets the unacked entries.
    new = consumer(sink, 3, "a", permits=10)
    sub.add_consumer(new, c.SUB_FAILOVER)
    await sink.wait_until(lambda: len(sink.of(3)) == 2)
    assert [m.pos for m in sink.of(3)] == positions[1:]
    assert all(m.redelivery_count == 0 for m in sink.of(3))  # a rewind, not a redelivery
    assert not old.unacked and not standby.unacked
    # The active one leaves: the next in line gets what it held, counted as redelivered.
    sub.remove_consumer(new)
    await sink.wait_until(lambda: len(sink.of(1)) == 5)
    assert [(m.pos, m.redelivery_count) for m in sink.of(1)[3:]] == [(positions[1], 1), (positions[2], 1)]
    assert sink.of(2) == []
    sub.close()
