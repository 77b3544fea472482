"""Topic compaction on a real standalone (broker/compaction/, WIRE.md R46a-R46d).

Each test produces keyed messages, compacts through the admin API (or lets the threshold do it)
and reads with ``is_read_compacted=True``: the latest value of each key, tombstones (empty
payloads) removing keys, batches of many keys compacted message by message, the tail after the
horizon read as usual, the view surviving kill -9, and the ledgers before the horizon trimmed
once consumed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.admin import topic_path
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar
from magnetar import InitialPosition, MessageId


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone for the module, with a short compaction monitor interval and small ledgers."""
    with run_standalone(
        tmp_path_factory.mktemp("compaction"),
        "--broker-service-compaction-monitor-interval-in-seconds",
        "0.2",
        "--managed-ledger-max-entries-per-ledger",
        "50",
        "--managed-ledger-min-ledger-rollover-time-minutes",
        "0",
    ) as sa:
        yield sa


def compact(sa: StandaloneProcess, topic: str, timeout: float = 60.0) -> dict[str, Any]:
    status, _ = admin_call(sa, "PUT", topic_path(topic) + "/compaction")
    assert status == 204
    return wait_compacted(sa, topic, timeout)


def wait_compacted(sa: StandaloneProcess, topic: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        _, doc = admin_call(sa, "GET", topic_path(topic) + "/compaction")
        if doc["status"] in ("SUCCESS", "ERROR"):
            assert doc == {"status": "SUCCESS", "lastError": ""}
            return dict(doc)
        assert time.monotonic() < deadline, doc
        time.sleep(0.05)


def send_all(producer: Any, items: list[tuple[str | None, bytes]]) -> None:
    failed: list[Any] = []

    def sent(result: Any, _msg_id: Any) -> None:
        if result != magnetar.Result.Ok:
            failed.append(result)

    for key, value in items:
        producer.send_async(value, sent, partition_key=key)
    producer.flush()
    assert not failed


def read_compacted(client: Any, topic: str, *, compacted: bool = True, timeout_ms: int = 1000) -> list[Any]:
    """Everything a reader from the earliest message gets (until has_message_available says no)."""
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=compacted)
    out = []
    try:
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=timeout_ms))
    finally:
        reader.close()
    return out


def as_dict(messages: list[Any]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for m in messages:
        out[m.partition_key()] = m.data()
    return out


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[Any]:
    c = magnetar.Client(standalone.service_url)
    yield c
    c.close()


def hold(client: Any, topic: str) -> None:
    """A durable subscription at the start, so that ledgers (50 entries here) are not trimmed
    at roll-over before a compaction reads them (no subscription and retention 0 keep nothing)."""
    client.subscribe(topic, "hold", initial_position=InitialPosition.Earliest).close()


def test_latest_value_per_key_and_tombstones(standalone: StandaloneProcess, client: Any, topic: str) -> None:
    hold(client, topic)
    producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
    items: list[tuple[str | None, bytes]] = [(f"k{i % 5}", f"v{i}".encode()) for i in range(50)]
    items += [("k3", b""), ("k4", b"gone"), ("k4", b""), (None, b"keyless")]
    send_all(producer, items)
    compact(standalone, topic)
    got = read_compacted(client, topic)
    # k0..k2 keep their last values; k3 and k4 end in tombstones; the keyless message is dropped.
    assert [(m.partition_key(), m.data()) for m in got] == [("k0", b"v45"), ("k1", b"v46"), ("k2", b"v47")]
    # Survivors keep their original message ids: the same as a plain reader sees for them.
    plain = read_compacted(client, topic, compacted=False)
    assert len(plain) == len(items)
    original = {(m.partition_key(), m.data()): str(m.message_id()) for m in plain}
    assert [str(m.message_id()) for m in got] == [original[(m.partition_key(), m.data())] for m in got]
    _, stats = admin_call(standalone, "GET", topic_path(topic) + "/stats")
    assert stats["compaction"]["lastCompactionRemovedEventCount"] == len(items) - 3
    assert stats["compaction"]["lastCompactionSucceedTimestamp"] > 0
    assert "__compaction" in stats["subscriptions"]
    _, internal = admin_call(standalone, "GET", topic_path(topic) + "/internalStats")
    assert internal["compactedLedger"]["entries"] == 3 and internal["compactedLedger"]["ledgerId"] >= 0
    producer.close()


def test_batches_of_many_keys_compact_message_by_message(
    standalone: StandaloneProcess, client: Any, topic: str
) -> None:
    hold(client, topic)
    producer = client.create_producer(
        topic, block_if_queue_full=True, batching_max_messages=100, batching_max_publish_delay_ms=50
    )
    expected: dict[str, bytes] = {}
    items: list[tuple[str | None, bytes]] = []
    for i in range(2000):
        key = f"key-{(i * 7) % 300}"
        value = f"{key}={i}".encode()
        items.append((key, value))
        expected[key] = value
    for i in range(0, 300, 10):  # a tombstone for every tenth key
        items.append((f"key-{i}", b""))
        expected.pop(f"key-{i}")
    send_all(producer, items)
    compact(standalone, topic)
    got = read_compacted(client, topic)
    assert len(got) == len(expected) == 270
    assert as_dict(got) == expected
    # Batched survivors keep their batch index, and a consumer acknowledges them by those ids.
    assert any(m.message_id().batch_index() > 0 for m in got)
    consumer = client.subscribe(
        topic, "sub", initial_position=InitialPosition.Earliest, is_read_compacted=True, receiver_queue_size=50
    )
    seen = {}
    for _ in range(270):
        m = consumer.receive(timeout_millis=10_000)
        seen[m.partition_key()] = m.data()
        consumer.acknowledge(m)
    assert seen == expected
    consumer.close()
    _, stats = admin_call(standalone, "GET", topic_path(topic) + "/stats")
    # What compaction removed counts as consumed: nothing is left in the backlog.
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 0
    producer.close()


def test_compacted_view_then_tail_and_plain_readers_see_everything(
    standalone: StandaloneProcess, client: Any, topic: str
) -> None:
    hold(client, topic)
    producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
    send_all(producer, [(f"k{i % 3}", f"old{i}".encode()) for i in range(30)])
    compact(standalone, topic)
    send_all(producer, [("k0", b"new0"), ("k9", b"new9"), ("k0", b"newer0")])
    got = [(m.partition_key(), m.data()) for m in read_compacted(client, topic)]
    # The compacted view up to the horizon, then every message after it, uncompacted.
    assert got == [
        ("k0", b"old27"),
        ("k1", b"old28"),
        ("k2", b"old29"),
        ("k0", b"new0"),
        ("k9", b"new9"),
        ("k0", b"newer0"),
    ]
    assert len(read_compacted(client, topic, compacted=False)) == 33
    # A second compaction merges the previous view with the tail.
    compact(standalone, topic)
    assert as_dict(read_compacted(client, topic)) == {"k0": b"newer0", "k1": b"old28", "k2": b"old29", "k9": b"new9"}
    assert len(read_compacted(client, topic)) == 4
    # Seek on a compacted consumer uses the original ids; it resumes after the message sought.
    consumer = client.subscribe(topic, "seeker", initial_position=InitialPosition.Earliest, is_read_compacted=True)
    first = [consumer.receive(timeout_millis=10_000) for _ in range(4)]
    consumer.seek(first[1].message_id())
    again = consumer.receive(timeout_millis=10_000)
    assert (again.partition_key(), again.data()) == (first[2].partition_key(), first[2].data())
    consumer.close()
    producer.close()


def test_read_compacted_refused_on_shared(standalone: StandaloneProcess, client: Any, topic: str) -> None:
    with pytest.raises(magnetar.MagnetarError, match="exclusive or failover"):
        client.subscribe(topic, "shared", consumer_type=magnetar.ConsumerType.Shared, is_read_compacted=True)


def test_status_transitions_and_conflict(standalone: StandaloneProcess, client: Any, topic: str) -> None:
    hold(client, topic)
    _, doc = admin_call(standalone, "GET", topic_path(topic) + "/compaction")
    assert doc == {"status": "NOT_RUN", "lastError": ""}
    producer = client.create_producer(
        topic, block_if_queue_full=True, batching_max_messages=1000, batching_max_publish_delay_ms=20
    )
    send_all(producer, [(f"k{i % 5000}", b"x" * 20) for i in range(150_000)])
    status, _ = admin_call(standalone, "PUT", topic_path(topic) + "/compaction")
    assert status == 204
    _, doc = admin_call(standalone, "GET", topic_path(topic) + "/compaction")
    assert doc["status"] == "RUNNING"
    status, body = admin_call(standalone, "PUT", topic_path(topic) + "/compaction")
    assert status == 409 and "already in progress" in body["reason"]
    wait_compacted(standalone, topic)
    assert len(read_compacted(client, topic)) == 5000
    producer.close()


def test_automatic_compaction_by_threshold(standalone: StandaloneProcess, client: Any, topic: str) -> None:
    hold(client, topic)
    producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
    send_all(producer, [("k", f"v{i}".encode()) for i in range(20)])
    time.sleep(0.5)  # a monitor round without a threshold: nothing happens
    _, doc = admin_call(standalone, "GET", topic_path(topic) + "/compaction")
    assert doc["status"] == "NOT_RUN"
    status, _ = admin_call(standalone, "POST", topic_path(topic) + "/compactionThreshold", 100)
    assert status == 204
    _, value = admin_call(standalone, "GET", topic_path(topic) + "/compactionThreshold")
    assert value == 100
    wait_compacted(standalone, topic, timeout=30)
    assert [m.data() for m in read_compacted(client, topic)] == [b"v19"]
    producer.close()


def test_trimming_after_compaction_keeps_every_key(standalone: StandaloneProcess, client: Any, topic: str) -> None:
    """Ledgers (50 entries each here) before the horizon go once consumed; the view keeps every key."""
    holder = client.subscribe(topic, "holder", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
    send_all(producer, [(f"k{i}", f"first{i}".encode()) for i in range(100)])  # two full ledgers
    send_all(producer, [(f"k{i}", f"second{i}".encode()) for i in range(0, 100, 2)])
    compact(standalone, topic)
    _, internal = admin_call(standalone, "GET", topic_path(topic) + "/internalStats")
    first_ledger = internal["ledgers"][0]["ledgerId"]
    for _ in range(150):
        holder.acknowledge(holder.receive(timeout_millis=10_000))
    holder.close()
    deadline = time.monotonic() + 30
    while True:  # the acks let the consumed ledgers before the horizon be trimmed (retention 0)
        _, internal = admin_call(standalone, "GET", topic_path(topic) + "/internalStats")
        if internal["ledgers"][0]["ledgerId"] != first_ledger:
            break
        assert time.monotonic() < deadline, internal
        time.sleep(0.1)
    expected = {f"k{i}": (f"second{i}" if i % 2 == 0 else f"first{i}").encode() for i in range(100)}
    assert as_dict(read_compacted(client, topic)) == expected
    consumer = client.subscribe(topic, "late", initial_position=InitialPosition.Earliest, is_read_compacted=True)
    assert as_dict([consumer.receive(timeout_millis=10_000) for _ in range(100)]) == expected
    consumer.close()
    producer.close()


def test_a_reader_halfway_through_the_view_is_not_moved_by_trimming(
    standalone: StandaloneProcess, client: Any, topic: str
) -> None:
    """Trimming moves readers left behind deleted ledgers up to the first stored entry; one still
    reading the compacted view must stay where it is, or it skips the survivors it has not read."""
    holder = client.subscribe(topic, "holder", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
    send_all(producer, [(f"k{i}", f"first{i}".encode()) for i in range(100)])  # two full ledgers
    send_all(producer, [(f"k{i}", f"second{i}".encode()) for i in range(0, 100, 2)])
    compact(standalone, topic)
    reader = client.create_reader(topic, MessageId.earliest, receiver_queue_size=1, is_read_compacted=True)
    got = [reader.read_next(timeout_millis=10_000) for _ in range(10)]
    _, internal = admin_call(standalone, "GET", topic_path(topic) + "/internalStats")
    first_ledger = internal["ledgers"][0]["ledgerId"]
    for _ in range(150):
        holder.acknowledge(holder.receive(timeout_millis=10_000))
    wait_for(
        "the ledgers before the horizon to be trimmed",
        lambda: (
            admin_call(standalone, "GET", topic_path(topic) + "/internalStats")[1]["ledgers"][0]["ledgerId"]
            != first_ledger
        ),
        timeout=30,
    )
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=10_000))
    expected = {f"k{i}": (f"second{i}" if i % 2 == 0 else f"first{i}").encode() for i in range(100)}
    assert len(got) == 100 and as_dict(got) == expected
    reader.close()
    holder.close()
    producer.close()


@pytest.mark.durability
def test_compacted_view_survives_kill9(tmp_path: Path) -> None:
    topic = f"persistent://public/default/survive-{uuid.uuid4().hex[:8]}"
    with run_standalone(tmp_path) as sa:
        client = magnetar.Client(sa.service_url)
        producer = client.create_producer(
            topic, block_if_queue_full=True, batching_max_messages=50, batching_max_publish_delay_ms=10
        )
        send_all(producer, [(f"k{i % 40}", f"v{i}".encode()) for i in range(400)] + [("k0", b"")])
        compact(sa, topic)
        before = as_dict(read_compacted(client, topic))
        client.close()
        sa.kill9()
        sa.start()
        client = magnetar.Client(sa.service_url)
        after = read_compacted(client, topic)
        assert len(after) == 39 and as_dict(after) == before
        assert "k0" not in before
        # And a compaction after the restart builds on the recorded view.
        producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=False)
        send_all(producer, [("k1", b"latest")])
        compact(sa, topic)
        assert as_dict(read_compacted(client, topic))["k1"] == b"latest"
        client.close()
