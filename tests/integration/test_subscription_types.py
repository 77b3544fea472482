"""Subscription types against a real standalone, spoken over the raw protocol (WIRE.md R20b-R20d):
Failover election and take-over, Shared priority levels, Key_Shared routing, ranges and join
order, batch-index acknowledgements."""

from __future__ import annotations

import time
from typing import Any

from tests.protocol.wire import Wire, open_consumer, open_producer, session, stats
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash
from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record


def send(wire: Wire, producer_id: int, seq: int, *payloads: bytes, key: str | None = None) -> tuple[int, int]:
    """Publish one entry (a batch when several payloads) and return its (ledger, entry)."""
    records = [make_record(p, None, key, 0, seq + i) for i, p in enumerate(payloads)]
    meta, payload = encode_batch(
        records, producer_name="wire", first_sequence_id=seq, batched=len(payloads) > 1, key=key
    )
    wire.send(c.send(producer_id, seq, meta, payload))
    receipt = wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f["seq"] == seq)
    assert receipt["t"] == c.SEND_RECEIPT, receipt
    return receipt["ledger"], receipt["entry"]


def message(wire: Wire, consumer_id: int) -> Any:
    return wire.next(lambda f: f.get("t") == c.MESSAGE and f["consumer_id"] == consumer_id)


def active_change(wire: Wire, consumer_id: int) -> bool:
    frame = wire.next(lambda f: f.get("t") == c.ACTIVE_CONSUMER_CHANGE and f["consumer_id"] == consumer_id)
    return bool(frame["is_active"])


def test_failover_delivers_to_the_active_consumer_and_a_standby_takes_over(
    standalone: StandaloneProcess, topic: str
) -> None:
    with (
        session(standalone.service_url) as prod,
        session(standalone.service_url) as a,
        session(standalone.service_url) as b,
    ):
        open_consumer(b, topic, "fo", 2, c.SUB_FAILOVER, consumer_name="b", initial_position="Earliest")
        assert active_change(b, 2) is True
        open_consumer(a, topic, "fo", 1, c.SUB_FAILOVER, consumer_name="a")
        assert active_change(a, 1) is True  # "a" sorts before "b"
        assert active_change(b, 2) is False
        for wire, cid in ((a, 1), (b, 2)):
            wire.send(c.flow(cid, 100))
        open_producer(prod, topic)
        sent = [send(prod, 1, i, f"m{i}".encode()) for i in range(3)]
        got = [message(a, 1) for _ in sent]
        assert [(m["ledger"], m["entry"]) for m in got] == sent
        a.request(c.ack(1, c.ACK_CUMULATIVE, [sent[0]]))  # cumulative is fine on Failover
        assert stats(standalone, topic)["subscriptions"]["fo"]["activeConsumerName"] == "a"
        a.close()  # the active consumer goes away: b takes over what it left unacked
        assert active_change(b, 2) is True
        again = [message(b, 2) for _ in sent[1:]]
        assert [(m["ledger"], m["entry"]) for m in again] == sent[1:]
        assert all(m["redelivery_count"] == 1 for m in again)


def test_shared_serves_the_lowest_priority_level_while_it_has_permits(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "prio", 1, c.SUB_SHARED, initial_position="Earliest", priority_level=1)
        open_consumer(wire, topic, "prio", 2, c.SUB_SHARED, priority_level=0)
        wire.send(c.flow(1, 100), c.flow(2, 2))
        open_producer(wire, topic)
        for i in range(4):
            send(wire, 1, i, f"m{i}".encode())
        first = [message(wire, 2) for _ in range(2)]
        rest = [message(wire, 1) for _ in range(2)]
        assert [m["entry"] for m in first] < [m["entry"] for m in rest]
        consumers = stats(standalone, topic)["subscriptions"]["prio"]["consumers"]
        assert sorted(s["priorityLevel"] for s in consumers) == [0, 1]


def test_key_shared_routes_each_key_to_the_owner_of_its_hash(standalone: StandaloneProcess, topic: str) -> None:
    keys = [f"key-{i}" for i in range(12)]
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "ks", 1, c.SUB_KEY_SHARED, initial_position="Earliest", consumer_name="c1")
        open_consumer(wire, topic, "ks", 2, c.SUB_KEY_SHARED, consumer_name="c2")
        wire.send(c.flow(1, 1000), c.flow(2, 1000))
        open_producer(wire, topic)
        for i, key in enumerate(keys * 2):
            send(wire, 1, i, key.encode(), key=key)
        expected_2 = [k for k in keys * 2 if key_hash(k) <= 32768]  # the second consumer split off [0, 32768]
        expected_1 = [k for k in keys * 2 if key_hash(k) > 32768]
        got_1 = [message(wire, 1)["meta"]["k"] for _ in expected_1]
        got_2 = [message(wire, 2)["meta"]["k"] for _ in expected_2]
        assert (got_1, got_2) == (expected_1, expected_2)  # and in publish order per consumer
        sub = stats(standalone, topic)["subscriptions"]["ks"]
        assert {s["consumerName"]: s["keyHashRanges"] for s in sub["consumers"]} == {
            "c1": ["[32769, 65536]"],
            "c2": ["[0, 32768]"],
        }


def test_key_shared_sticky_ranges_must_not_overlap(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(
            wire, topic, "st", 1, c.SUB_KEY_SHARED, key_shared_mode=c.KEY_SHARED_STICKY, key_ranges=[[0, 1000]]
        )
        clash = wire.request(
            c.subscribe(
                topic, "st", 2, c.SUB_KEY_SHARED, key_shared_mode=c.KEY_SHARED_STICKY, key_ranges=[[1000, 2000]]
            )
        )
        assert (clash["t"], clash["code"]) == (c.ERROR, "ConsumerBusy")
        mixed = wire.request(c.subscribe(topic, "st", 3, c.SUB_KEY_SHARED))  # AUTO_SPLIT on a STICKY subscription
        assert (mixed["t"], mixed["code"]) == (c.ERROR, "ConsumerBusy")
        open_consumer(
            wire, topic, "st", 4, c.SUB_KEY_SHARED, key_shared_mode=c.KEY_SHARED_STICKY, key_ranges=[[1001, 2000]]
        )


def test_key_shared_joiner_gets_no_newer_message_of_a_key_before_older_ones_are_acked(
    standalone: StandaloneProcess, topic: str
) -> None:
    keys = [f"order-{i}" for i in range(16)]
    moving = [k for k in keys if key_hash(k) <= 32768]  # the keys a second consumer will take
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "join", 1, c.SUB_KEY_SHARED, initial_position="Earliest", consumer_name="old")
        wire.send(c.flow(1, 1000))
        open_producer(wire, topic)
        before = [send(wire, 1, i, k.encode(), key=k) for i, k in enumerate(keys)]
        held = [message(wire, 1) for _ in before]
        open_consumer(wire, topic, "join", 2, c.SUB_KEY_SHARED, consumer_name="new")
        wire.send(c.flow(2, 1000))
        assert set(stats(standalone, topic)["subscriptions"]["join"]["consumersAfterMarkDeletePosition"]) == {"new"}
        after = [send(wire, 1, 100 + i, k.encode(), key=k) for i, k in enumerate(keys)]
        # The old consumer keeps its keys flowing; the newcomer's wait.
        for _ in range(len(keys) - len(moving)):
            assert message(wire, 1)["meta"]["k"] not in moving
        wire.request(c.ack(1, c.ACK_INDIVIDUAL, [[m["ledger"], m["entry"]] for m in held[:-1]]))
        # The ack response comes after the cursor flush: a dispatch the ack allowed is written first.
        assert not [f for f in wire.inbox if f.get("t") == c.MESSAGE and f["consumer_id"] == 2]
        wire.request(c.ack(1, c.ACK_INDIVIDUAL, [[held[-1]["ledger"], held[-1]["entry"]]]))
        got = [message(wire, 2) for _ in moving]
        assert [(m["ledger"], m["entry"]) for m in got] == [p for p, k in zip(after, keys, strict=True) if k in moving]


def test_batch_index_acks_come_back_with_the_redelivered_entry(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "bi", 1, c.SUB_SHARED, initial_position="Earliest")
        wire.send(c.flow(1, 100))
        open_producer(wire, topic)
        ledger, entry = send(wire, 1, 0, b"a", b"b", b"c")
        assert message(wire, 1)["meta"]["n"] == 3
        answer = wire.request(c.ack(1, c.ACK_INDIVIDUAL, [], batch_acks=[[ledger, entry, 3, [0, 2]]]))
        assert answer["t"] == c.ACK_RESPONSE
        wire.send(c.redeliver(1))
        again = message(wire, 1)
        assert (again["entry"], list(again["acked"]), again["redelivery_count"]) == (entry, [0, 2], 1)
        sub = stats(standalone, topic)["subscriptions"]["bi"]
        assert sub["consumers"][0]["unackedMessages"] == 1
        wire.request(c.ack(1, c.ACK_INDIVIDUAL, [], batch_acks=[[ledger, entry, 3, [1]]]))
        assert stats(standalone, topic)["subscriptions"]["bi"]["msgBacklog"] == 0


def test_key_shared_with_the_client_keeps_each_key_on_one_consumer_in_order(
    standalone: StandaloneProcess, topic: str
) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        consumers = [
            client.subscribe(topic, "ks-client", consumer_type=magnetar.ConsumerType.KeyShared, consumer_name=name)
            for name in ("c1", "c2")
        ]
        producer = client.create_producer(topic, batching_enabled=False)
        keys = [f"user-{i}" for i in range(8)]
        for i in range(40):
            producer.send(f"{i}".encode(), partition_key=keys[i % len(keys)])
        seen: dict[str, list[tuple[int, str]]] = {}
        got = 0
        deadline = time.monotonic() + 15
        while got < 40:
            assert time.monotonic() < deadline, f"only {got} of 40 messages arrived"
            for index, consumer in enumerate(consumers):
                try:
                    msg = consumer.receive(timeout_millis=100)
                except magnetar.Timeout:
                    continue
                seen.setdefault(msg.partition_key(), []).append((int(msg.data()), f"c{index + 1}"))
                consumer.acknowledge(msg)
                got += 1
        for key, items in seen.items():
            assert len({who for _, who in items}) == 1, f"{key} went to both consumers"
            assert [n for n, _ in items] == sorted(n for n, _ in items), f"{key} out of order"
        owners = {items[0][1] for items in seen.values()}
        expected = {"c2" if key_hash(k) <= 32768 else "c1" for k in keys}
        assert owners == expected
    finally:
        client.close()
