"""Key_Shared dispatch on a real managed ledger: routing by key hash, per-consumer blocking,
per-key order when keys change hands (recently joined consumers, draining), STICKY holes."""

from __future__ import annotations

from collections.abc import Sequence

from tests.broker.conftest import FakeSink, consumer, dispatch_idle, publish, subscription

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol.entry import EntryMeta

LOW = [k for k in (f"low-{i}" for i in range(200)) if key_hash(k) <= 32768][:4]
HIGH = [k for k in (f"high-{i}" for i in range(200)) if key_hash(k) > 32768][:4]
LOWEST = next(k for k in (f"lowest-{i}" for i in range(200)) if key_hash(k) <= 16384)


class OrderSink(FakeSink):
    """Records a violation whenever a consumer gets an entry of a key while an earlier entry of
    that key is neither acknowledged nor already delivered to that same consumer."""

    def __init__(self) -> None:
        super().__init__()
        self.published: dict[Position, str] = {}
        self.acked: set[Position] = set()
        self.holder: dict[Position, int] = {}
        self.violations: list[str] = []

    def send_message(
        self,
        consumer_id: int,
        pos: Position,
        meta: EntryMeta,
        payload: bytes,
        redelivery_count: int,
        acked: Sequence[int] | None = None,
    ) -> None:
        key = str(meta.get("k", ""))
        for earlier, k in self.published.items():
            if k == key and earlier < pos and earlier not in self.acked and self.holder.get(earlier) != consumer_id:
                self.violations.append(f"{key}: {pos} to {consumer_id} before {earlier} was acked")
        self.holder[pos] = consumer_id
        super().send_message(consumer_id, pos, meta, payload, redelivery_count, acked)


async def _publish(ml: ManagedLedger, sink: OrderSink, key: str) -> Position:
    pos = await publish(ml, key.encode(), key=key)
    sink.published[pos] = key
    return pos


async def _ack(sub: Subscription, sink: OrderSink, cons: ServerConsumer, positions: list[Position]) -> None:
    sink.acked.update(positions)
    await sub.ack(cons, c.ACK_INDIVIDUAL, positions)


async def test_entries_go_to_the_owner_of_their_key_hash(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_KEY_SHARED)
    first, second = consumer(sink, 1, permits=100), consumer(sink, 2, permits=100)
    sub.add_consumer(first, c.SUB_KEY_SHARED)
    sub.add_consumer(second, c.SUB_KEY_SHARED)
    for key in LOW + HIGH:
        await publish(ml, b"x", key=key)
    await sink.wait_until(lambda: len(sink.messages) == 8)
    assert sorted(m.key for m in sink.of(2)) == sorted(LOW)  # the newcomer took [0, 32768]
    assert sorted(m.key for m in sink.of(1)) == sorted(HIGH)
    stats = {s["consumerName"]: s["keyHashRanges"] for s in sub.stats()["consumers"]}
    assert stats == {"c1": ["[32769, 65536]"], "c2": ["[0, 32768]"]}
    assert sub.stats()["keySharedMode"] == c.KEY_SHARED_AUTO_SPLIT
    sub.close()


async def test_a_consumer_without_permits_blocks_only_its_own_keys(ml: ManagedLedger) -> None:
    sink = OrderSink()
    sub = await subscription(ml, c.SUB_KEY_SHARED)
    high = consumer(sink, 1, permits=0)
    low = consumer(sink, 2, permits=100)
    sub.add_consumer(high, c.SUB_KEY_SHARED)
    sub.add_consumer(low, c.SUB_KEY_SHARED)
    for _ in range(3):
        for key in (HIGH[0], LOW[0]):
            await _publish(ml, sink, key)
    await sink.wait_until(lambda: len(sink.of(2)) == 3)
    assert sink.of(1) == [] and {m.key for m in sink.of(2)} == {LOW[0]}
    sub.flow(high, 100)
    await sink.wait_until(lambda: len(sink.of(1)) == 3)
    assert [m.pos for m in sink.of(1)] == sorted(p for p, k in sink.published.items() if k == HIGH[0])
    assert sink.violations == []
    sub.close()


async def test_a_joining_consumer_waits_until_earlier_entries_are_acked(ml: ManagedLedger) -> None:
    sink = OrderSink()
    sub = await subscription(ml, c.SUB_KEY_SHARED)
    old = consumer(sink, 1, permits=1000)
    sub.add_consumer(old, c.SUB_KEY_SHARED)
    before = [await _publish(ml, sink, key) for key in LOW + HIGH for _ in range(2)]
    await sink.wait_until(lambda: len(sink.messages) == len(before))
    new = consumer(sink, 2, permits=1000)
    sub.add_consumer(new, c.SUB_KEY_SHARED)  # takes the LOW keys, which `old` still holds
    joined_at = sub.cursor.read_position
    assert sub.stats()["consumersAfterMarkDeletePosition"] == {"c2": str(joined_at)}
    after = [await _publish(ml, sink, key) for key in LOW + HIGH]
    await sink.wait_until(lambda: len(sink.of(1)) == len(before) + len(HIGH))
    assert sink.of(2) == []  # held back: earlier entries of its keys are still unacked
    await _ack(sub, sink, old, before[:-1])
    assert sink.of(2) == []  # one entry before the join point is still unacked
    await _ack(sub, sink, old, before[-1:])
    await sink.wait_until(lambda: len(sink.of(2)) == len(LOW))
    assert sorted(m.pos for m in sink.of(2)) == sorted(p for p in after if sink.published[p] in LOW)
    assert sub.stats()["consumersAfterMarkDeletePosition"] == {}
    assert sink.violations == []
    sub.close()


async def test_allow_out_of_order_lifts_the_join_rule(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_KEY_SHARED)
    sub.add_consumer(consumer(sink, 1, permits=100), c.SUB_KEY_SHARED)
    await publish(ml, b"x", key=LOW[0])
    await sink.wait_until(lambda: len(sink.messages) == 1)
    sub.add_consumer(consumer(sink, 2, permits=100, out_of_order=True), c.SUB_KEY_SHARED)
    assert sub.stats()["consumersAfterMarkDeletePosition"] == {}
    await publish(ml, b"y", key=LOW[1])
    await sink.wait_until(lambda: len(sink.of(2)) == 1)
    sub.close()


async def test_an_entry_waiting_when_its_key_moves_waits_for_the_old_owner_to_drain(ml: ManagedLedger) -> None:
    sink = OrderSink()
    sub = await subscription(ml, c.SUB_KEY_SHARED)
    helper = consumer(sink, 1, permits=100)  # ends up with [32769, 65536]
    old = consumer(sink, 2, permits=1)  # takes [0, 32768]
    sub.add_consumer(helper, c.SUB_KEY_SHARED)
    sub.add_consumer(old, c.SUB_KEY_SHARED)
    first = await _publish(ml, sink, LOWEST)
    await sink.wait_until(lambda: len(sink.messages) == 1)
    second = await _publish(ml, sink, LOWEST)  # `old` has no permits left: it waits in replay
    await _publish(ml, sink, HIGH[0])
    await sink.wait_until(lambda: len(sink.of(1)) == 1)
    assert second in sub.redeliver and not sub.cursor.has_more()
    new = consumer(sink, 3, permits=100)
    sub.add_consumer(new, c.SUB_KEY_SHARED)  # splits [0, 32768]: LOWEST moves to `new`
    assert sub.dispatcher.select(key_hash(LOWEST)) is new
    assert sub.recently_joined[new] > second  # the join rule lets `second` through: draining holds it
    await dispatch_idle(sub)
    assert sink.of(3) == []
    await _ack(sub, sink, old, [first])
    await sink.wait_until(lambda: len(sink.of(3)) == 1)
    assert sink.of(3)[0].pos == second
    assert sink.violations == []
    sub.close()


async def test_sticky_hashes_nobody_declared_wait_for_a_consumer_that_covers_them(ml: ManagedLedger) -> None:
    sink = FakeSink()
    sub = await subscription(ml, c.SUB_KEY_SHARED)
    low_hash = key_hash(LOW[0])
    sub.add_consumer(
        consumer(sink, 1, permits=100, mode=c.KEY_SHARED_STICKY, ranges=[(low_hash, low_hash)]), c.SUB_KEY_SHARED
    )
    await publish(ml, b"x", key=HIGH[0])
    mine = await publish(ml, b"y", key=LOW[0])
    await sink.wait_until(lambda: len(sink.messages) == 1)
    assert sink.messages[0].pos == mine
    high_hash = key_hash(HIGH[0])
    sub.add_consumer(
        consumer(sink, 2, permits=100, mode=c.KEY_SHARED_STICKY, ranges=[(high_hash, 65535)]), c.SUB_KEY_SHARED
    )
    await sink.wait_until(lambda: len(sink.of(2)) == 1)
    assert sink.of(2)[0].key == HIGH[0]
    sub.close()
