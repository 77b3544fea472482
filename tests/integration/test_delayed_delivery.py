"""Delayed delivery against a real standalone (WIRE.md R20e): Shared and Key_Shared hold a message
until its deliver-at time and let others pass; Exclusive and Failover deliver it at once; pending
delayed messages survive kill -9, arriving neither early nor never."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.protocol.wire import Wire, open_consumer, open_producer, session, stats
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.broker.subscriptions.delayed_delivery import now_ms
from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record


def send(wire: Wire, seq: int, payload: bytes, deliver_at: int | None = None) -> tuple[int, int]:
    records = [make_record(payload, None, None, 0, seq)]
    meta, data = encode_batch(
        records, producer_name="wire", first_sequence_id=seq, batched=False, deliver_at=deliver_at
    )
    wire.send(c.send(1, seq, meta, data))
    receipt = wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f["seq"] == seq)
    assert receipt["t"] == c.SEND_RECEIPT, receipt
    return receipt["ledger"], receipt["entry"]


def receive(wire: Wire, consumer_id: int = 1) -> tuple[tuple[int, int], int]:
    """The next message's position and the time it arrived (ms)."""
    frame: Any = wire.next(lambda f: f.get("t") == c.MESSAGE and f["consumer_id"] == consumer_id)
    return (frame["ledger"], frame["entry"]), now_ms()


@pytest.mark.parametrize("sub_type", [c.SUB_SHARED, c.SUB_KEY_SHARED])
def test_a_delayed_message_waits_for_its_time_and_others_pass_it(
    standalone: StandaloneProcess, topic: str, sub_type: str
) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "d", 1, sub_type, initial_position="Earliest")
        wire.send(c.flow(1, 100))
        open_producer(wire, topic)
        deliver_at = now_ms() + 1_500
        delayed = send(wire, 0, b"later", deliver_at)
        plain = send(wire, 1, b"now")
        assert receive(wire)[0] == plain
        assert stats(standalone, topic)["subscriptions"]["d"]["msgDelayed"] == 1
        pos, arrived = receive(wire)
        assert pos == delayed and arrived >= deliver_at
        assert stats(standalone, topic)["subscriptions"]["d"]["msgDelayed"] == 0


@pytest.mark.parametrize("sub_type", [c.SUB_EXCLUSIVE, c.SUB_FAILOVER])
def test_exclusive_and_failover_deliver_a_delayed_message_at_once(
    standalone: StandaloneProcess, topic: str, sub_type: str
) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "d", 1, sub_type, initial_position="Earliest")
        wire.send(c.flow(1, 100))
        open_producer(wire, topic)
        deliver_at = now_ms() + 60_000
        delayed = send(wire, 0, b"later", deliver_at)
        pos, arrived = receive(wire)  # the wire's 15 s timeout is well within the minute
        assert pos == delayed and arrived < deliver_at


@pytest.mark.durability
def test_pending_delayed_messages_survive_kill9_and_are_not_early(
    fresh_standalone: StandaloneProcess, topic: str
) -> None:
    sa = fresh_standalone
    base = now_ms() + 3_000
    with session(sa.service_url) as wire:
        open_consumer(wire, topic, "d", 1, c.SUB_SHARED, initial_position="Earliest")
        wire.send(c.flow(1, 100))
        open_producer(wire, topic)
        due = {send(wire, i, f"m{i}".encode(), base + 300 * i): base + 300 * i for i in range(3)}
        marker = send(wire, 3, b"marker")
        assert receive(wire)[0] == marker  # the delayed ones were read past, into the tracker
        wire.request(c.ack(1, c.ACK_INDIVIDUAL, [marker]))
        assert stats(sa, topic)["subscriptions"]["d"]["msgDelayed"] == 3
    sa.kill9()
    sa.start()
    with session(sa.service_url) as wire:
        open_consumer(wire, topic, "d", 1, c.SUB_SHARED)
        wire.send(c.flow(1, 100))
        got = dict(receive(wire) for _ in due)
        assert set(got) == set(due)
        assert all(got[pos] >= due[pos] for pos in due), (got, due)


def test_deliver_after_from_the_client_is_not_delivered_early(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(topic, "d-client", consumer_type=magnetar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        earliest = now_ms() + 1_000
        producer.send(b"later", deliver_after=timedelta(seconds=1))
        producer.send(b"now")
        assert consumer.receive(timeout_millis=10_000).data() == b"now"
        msg = consumer.receive(timeout_millis=10_000)
        assert msg.data() == b"later" and now_ms() >= earliest
    finally:
        client.close()
