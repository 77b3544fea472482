"""maxUnackedMessagesPerConsumer and maxUnackedMessagesPerSubscription on a real managed ledger.

A consumer that never acknowledges must not make the broker remember an unbounded number of
entries for it: on Shared and Key_Shared subscriptions dispatch stops at the limit and resumes when
acknowledgements bring the count down to half (Pulsar's rule). Exclusive and Failover are not
limited, as in Pulsar: a program that acknowledges cumulatively after reading 100,000 messages must
keep working.
"""

from __future__ import annotations

import pytest
from tests.broker.conftest import FakeSink, consumer, dispatch_idle, publish, subscription

from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol import commands as c


async def _publish(ml: ManagedLedger, n: int) -> list[Position]:
    return [await publish(ml, f"m{i}".encode()) for i in range(n)]


@pytest.mark.parametrize("sub_type", [c.SUB_SHARED, c.SUB_KEY_SHARED])
async def test_a_consumer_stops_at_its_limit_and_resumes_at_half(ml: ManagedLedger, sub_type: str) -> None:
    sink = FakeSink()
    sub = await subscription(ml, sub_type)
    sub.set_unacked_limits(10, 0)
    cons = consumer(sink, 1, permits=1000)
    sub.add_consumer(cons, sub_type)
    await _publish(ml, 30)
    await sink.wait_until(lambda: len(sink.messages) == 10)
    await dispatch_idle(sub)
    assert len(sink.messages) == 10, "dispatch went on past maxUnackedMessagesPerConsumer"
    assert cons.blocked and cons.permits == 990
    assert sub.stats()["consumers"][0]["blockedConsumerOnUnackedMsgs"] is True

    # Acknowledging 4 leaves 6 unacked, above half the limit (5): still blocked.
    await sub.ack(cons, c.ACK_INDIVIDUAL, [m.pos for m in sink.messages[:4]])
    await dispatch_idle(sub)
    assert len(sink.messages) == 10 and cons.blocked
    # One more brings it to 5: unblocked, and it is filled up to the limit again.
    await sub.ack(cons, c.ACK_INDIVIDUAL, [sink.messages[4].pos])
    await sink.wait_until(lambda: len(sink.messages) == 15)
    await dispatch_idle(sub)
    assert len(sink.messages) == 15 and cons.unacked_messages == 10 and cons.blocked
    sub.close()


async def test_other_consumers_keep_receiving_while_one_is_blocked(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.set_unacked_limits(5, 0)
    stuck, busy = consumer(sink, 1, permits=1000), consumer(sink, 2, permits=1000)
    sub.add_consumer(stuck, c.SUB_SHARED)
    sub.add_consumer(busy, c.SUB_SHARED)
    await _publish(ml, 40)
    # ``busy`` acknowledges everything it gets; ``stuck`` never does.
    while len(sink.messages) < 40:
        await sink.wait_until(lambda: any(m.pos in busy.unacked for m in sink.of(2)))
        await sub.ack(busy, c.ACK_INDIVIDUAL, [m.pos for m in sink.of(2) if m.pos in busy.unacked])
    assert len(sink.of(1)) == 5 and stuck.blocked
    assert len(sink.of(2)) == 35, "the acknowledging consumer must get everything the stuck one cannot take"
    sub.close()


async def test_the_subscription_stops_at_its_limit(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.set_unacked_limits(0, 12)
    a, b = consumer(sink, 1, permits=1000), consumer(sink, 2, permits=1000)
    sub.add_consumer(a, c.SUB_SHARED)
    sub.add_consumer(b, c.SUB_SHARED)
    await _publish(ml, 30)
    await sink.wait_until(lambda: len(sink.messages) == 12)
    await dispatch_idle(sub)
    assert len(sink.messages) == 12 and sub.blocked_on_unacked
    assert sub.stats()["blockedSubscriptionOnUnackedMsgs"] is True
    # Down to half (6): dispatch resumes until the limit again.
    await sub.ack(a, c.ACK_INDIVIDUAL, [m.pos for m in sink.of(1)])
    await sink.wait_until(lambda: len(sink.messages) > 12)
    await dispatch_idle(sub)
    assert sub.unacked_messages() == 12 and sub.blocked_on_unacked
    sub.close()


async def test_a_consumer_leaving_returns_its_entries_and_lifts_the_subscription_block(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    sub.set_unacked_limits(0, 8)
    gone = consumer(sink, 1, permits=1000)
    sub.add_consumer(gone, c.SUB_SHARED)
    await _publish(ml, 20)
    await sink.wait_until(lambda: len(sink.messages) == 8)
    await dispatch_idle(sub)
    assert sub.blocked_on_unacked
    fresh = consumer(sink, 2, permits=1000)
    sub.add_consumer(fresh, c.SUB_SHARED)
    sub.remove_consumer(gone)
    await sink.wait_until(lambda: len(sink.of(2)) == 8)
    assert [m.payload for m in sink.of(2)] == [m.payload for m in sink.of(1)], "the returned entries come first"
    sub.close()


@pytest.mark.parametrize("sub_type", [c.SUB_EXCLUSIVE, c.SUB_FAILOVER])
async def test_exclusive_and_failover_are_not_limited(ml: ManagedLedger, sub_type: str) -> None:
    sink = FakeSink()
    sub = await subscription(ml, sub_type)
    sub.set_unacked_limits(5, 7)
    cons = consumer(sink, 1, permits=1000)
    sub.add_consumer(cons, sub_type)
    await _publish(ml, 25)
    await sink.wait_until(lambda: len(sink.messages) == 25)
    assert not cons.blocked and not sub.blocked_on_unacked
    sub.close()


async def test_the_subscription_total_follows_its_consumers(ml: ManagedLedger) -> None:
    """The subscription's unacked total is kept by its consumers (no per-entry sum over them): it
    equals their sum through deliveries, acks and consumers leaving."""
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_SHARED)
    a, b = consumer(sink, 1, permits=1000), consumer(sink, 2, permits=1000)
    sub.add_consumer(a, c.SUB_SHARED)
    sub.add_consumer(b, c.SUB_SHARED)

    def consistent() -> bool:
        held = sum(x.unacked.messages for x in sub.dispatcher.consumers)
        return sub.unacked_messages() == held and sub.stats()["unackedMessages"] == held

    await _publish(ml, 20)
    await sink.wait_until(lambda: len(sink.messages) == 20)
    assert sub.unacked_messages() == 20 and consistent()
    await sub.ack(a, c.ACK_INDIVIDUAL, [m.pos for m in sink.of(1)][:3])
    assert consistent() and sub.unacked_messages() == 17
    held_by_b = b.unacked.messages
    sub.remove_consumer(b)  # its entries go back and are redelivered to ``a``
    await sink.wait_until(lambda: a.unacked.messages == 17)
    assert consistent() and sub.unacked_messages() == 17 and held_by_b > 0
    sub.remove_consumer(a)
    assert sub.unacked_messages() == 0
    sub.close()
