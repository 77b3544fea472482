"""Producer delivery options against a real standalone: delayed messages, entry keys, key-based batching.

What the producer puts in each entry's ``meta`` (``k``, ``dt``, ``n``, ``b``; WIRE.md R29, R20e) is
read back raw, through a ``subscribe`` on a plain protocol connection, so these tests see exactly
what the broker stored and dispatches.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
from tests.protocol.wire import next_message, open_consumer, session
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.protocol import commands as c
from magnetar.protocol.batch import decode_batch

Shared = magnetar.ConsumerType.Shared
Earliest = magnetar.InitialPosition.Earliest


def _now_ms() -> int:
    return int(time.time() * 1000)


def raw_entries(sa: StandaloneProcess, topic: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` entries of ``topic`` as the broker dispatches them (an Exclusive raw subscription)."""
    with session(sa.service_url) as wire:
        open_consumer(wire, topic, "raw-meta", 1, initial_position="Earliest")
        wire.send(c.flow(1, 100_000))
        return [next_message(wire, 1) for _ in range(count)]


def keys_of(frame: dict[str, Any]) -> list[str | None]:
    """The per-message routing key of each message of an entry (ordering key, else partition key)."""
    keys: list[str | None] = []
    for record in decode_batch(frame["meta"], frame["payload"]):
        keys.append(record[5] if len(record) > 5 else record[2])
    return keys


# ---------------------------------------------------------------------------------------------- delayed


@pytest.mark.parametrize("how", ["deliver_after", "deliver_at"])
def test_a_delayed_message_is_not_received_on_a_shared_subscription_before_its_time(
    standalone: StandaloneProcess, topic: str, how: str
) -> None:
    delay_ms = 1500
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "delayed", consumer_type=Shared)
        producer = client.create_producer(topic)
        producer.send(b"before")
        not_before = _now_ms() + delay_ms
        if how == "deliver_after":
            delayed_id = producer.send(b"delayed", deliver_after=timedelta(milliseconds=delay_ms))
        else:
            delayed_id = producer.send(b"delayed", deliver_at=not_before)
        producer.send(b"after")
        got: dict[bytes, int] = {}
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=200)
            except magnetar.Timeout:
                continue
            got[msg.data()] = _now_ms()
            consumer.acknowledge(msg)
    assert set(got) == {b"before", b"delayed", b"after"}
    assert got[b"delayed"] >= not_before, "a delayed message was delivered before its time"
    # Alone in its entry, not batched: batch index -1, as Pulsar's ids of unbatched messages.
    assert delayed_id.batch_index() == -1


def test_a_delayed_message_goes_alone_in_its_entry_with_dt_and_keeps_send_order(
    standalone: StandaloneProcess, topic: str
) -> None:
    at = _now_ms() + 60_000
    sent: list[Any] = []
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_max_publish_delay_ms=60_000)
        producer.send_async(b"a", lambda res, mid: sent.append((res, mid)))
        producer.send_async(b"b", lambda res, mid: sent.append((res, mid)))
        producer.send_async(b"late", lambda res, mid: sent.append((res, mid)), deliver_at=at, partition_key="pk")
        producer.send_async(b"c", lambda res, mid: sent.append((res, mid)))
        producer.flush()
    assert [res for res, _ in sent] == [magnetar.Result.Ok] * 4
    entries = raw_entries(standalone, topic, 3)  # an Exclusive subscription gets delayed ones at once (R20e)
    first, delayed, last = entries
    assert [r[0] for r in decode_batch(first["meta"], first["payload"])] == [b"a", b"b"]
    assert "dt" not in first["meta"]
    assert delayed["meta"]["dt"] == at
    assert (delayed["meta"]["n"], delayed["meta"]["b"], delayed["meta"]["k"]) == (1, False, "pk")
    assert [r[0] for r in decode_batch(delayed["meta"], delayed["payload"])] == [b"late"]
    assert [r[0] for r in decode_batch(last["meta"], last["payload"])] == [b"c"]
    assert sent[2][1].batch_index() == -1 and sent[3][1].batch_index() == 0


def test_delivery_options_of_the_wrong_type_are_refused_with_value_error(
    standalone: StandaloneProcess, topic: str
) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic)
        with pytest.raises(ValueError, match="deliver_after"):
            producer.send(b"x", deliver_after=1500)
        with pytest.raises(ValueError, match="deliver_at"):
            producer.send(b"x", deliver_at=timedelta(seconds=1))
        assert producer.send(b"fine").entry_id() >= 0  # nothing was reserved or queued by the refusals


# ---------------------------------------------------------------------------------------------- keys


def test_default_batching_gives_a_mixed_batch_the_first_key_and_a_lone_keyed_message_its_key(
    standalone: StandaloneProcess, topic: str
) -> None:
    with magnetar.Client(standalone.service_url) as client:
        batched = client.create_producer(topic, batching_max_publish_delay_ms=60_000)
        for payload, key in ((b"n0", None), (b"m1", "k1"), (b"m2", "k2")):
            batched.send_async(payload, lambda res, mid: None, partition_key=key)
        batched.flush()
        single = client.create_producer(topic, batching_enabled=False)
        single.send(b"s", partition_key="p", ordering_key="o")
        single.send(b"plain")
    mixed, keyed, plain = raw_entries(standalone, topic, 3)
    assert mixed["meta"]["n"] == 3 and mixed["meta"]["k"] == "k1"  # the first key in the batch
    assert keyed["meta"]["k"] == "o"  # the ordering key wins over the partition key
    assert keys_of(keyed) == ["o"]
    assert "k" not in plain["meta"]


def test_key_based_batching_puts_one_key_in_each_entry(standalone: StandaloneProcess, topic: str) -> None:
    keys = ["k0", "k1", "k2", None]
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "kb", initial_position=Earliest)
        producer = client.create_producer(
            topic, batching_type=magnetar.BatchingType.KeyBased, batching_max_publish_delay_ms=60_000
        )
        sent = []
        for i in range(40):
            key = keys[i % len(keys)]
            producer.send_async(f"{key}:{i}".encode(), lambda res, mid: None, partition_key=key)
            sent.append(f"{key}:{i}".encode())
        producer.flush()
        by_entry: dict[tuple[int, int], list[str]] = defaultdict(list)
        received = []
        for _ in sent:
            msg = consumer.receive(timeout_millis=10_000)
            received.append(msg.data())
            by_entry[msg.message_id().position].append(msg.partition_key())
            consumer.acknowledge(msg)
    # Per key, the order is the send order (the entries of different keys may interleave).
    for key in keys:
        mine = [m for m in received if m.startswith(f"{key}:".encode())]
        assert mine == [m for m in sent if m.startswith(f"{key}:".encode())]
    assert len(by_entry) == 4, "one batch per key"
    assert all(len(set(ks)) == 1 for ks in by_entry.values()), f"keys share an entry: {dict(by_entry)}"
    metas = {keys_of(e)[0]: e["meta"] for e in raw_entries(standalone, topic, 4)}
    assert {k: m.get("k") for k, m in metas.items()} == {"k0": "k0", "k1": "k1", "k2": "k2", None: None}


def test_key_based_batching_keys_by_the_ordering_key_first(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(
            topic, batching_type=magnetar.BatchingType.KeyBased, batching_max_publish_delay_ms=60_000
        )
        for i in range(6):
            producer.send_async(b"%d" % i, lambda res, mid: None, partition_key="same", ordering_key=f"o{i % 2}")
        producer.flush()
    entries = raw_entries(standalone, topic, 2)
    assert sorted(e["meta"]["k"] for e in entries) == ["o0", "o1"]
    assert all(len(set(keys_of(e))) == 1 and e["meta"]["n"] == 3 for e in entries)


def test_a_custom_sequence_id_reaches_the_consumer(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "seq", initial_position=Earliest)
        producer = client.create_producer(topic)
        producer.send(b"auto")
        producer.send(b"custom", sequence_id=4242)
        assert consumer.receive(timeout_millis=10_000).sequence_id() == 0
        assert consumer.receive(timeout_millis=10_000).sequence_id() == 4242
