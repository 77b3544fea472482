"""Non-persistent topics (``non-persistent://``) against a real standalone (WIRE.md R43a-R43c).

Nothing is stored; a message reaches only the consumers connected when it is published; a
subscription whose consumers have no permits left drops it and counts the drop; the admin API
answers with Pulsar's non-persistent stats and refuses the cursor verbs.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from tests.protocol.wire import Wire, next_message, open_consumer, open_producer, publish, session
from tests.support.admin import topic_path, topic_stats
from tests.support.metrics import scrape, total
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar.metadata import paths
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record
from magnetar.protocol.topic_name import TopicName

RECEIVE_MS = 10_000


@pytest.fixture
def topic() -> str:
    return f"non-persistent://public/default/np-{uuid.uuid4().hex[:10]}"


def poll(check: Any, timeout: float = 5.0) -> Any:
    """``check()`` until it returns something truthy (rates are sampled once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def send_keyed(wire: Wire, producer_id: int, seq: int, key: str) -> None:
    meta, payload = encode_batch(
        [make_record(f"k{seq}".encode(), None, key, 0, seq)], producer_name="wire", first_sequence_id=seq, key=key
    )
    wire.send(c.send(producer_id, seq, meta, payload))
    assert wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f["seq"] == seq)["t"] == c.SEND_RECEIPT


def drain(wire: Wire, consumer_id: int) -> list[Any]:
    """Every message already pushed to ``consumer_id``: a ping's pong comes after them (the
    broker writes a connection's frames in order)."""
    wire.send(c.ping())
    wire.next_t(c.PONG)
    got = [f for f in wire.inbox if f.get("t") == c.MESSAGE and f["consumer_id"] == consumer_id]
    wire.inbox = [f for f in wire.inbox if f not in got]
    return got


def test_receipts_are_0_0_and_only_connected_consumers_get_messages(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        early = client.subscribe(topic, "early")
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(3)]
        assert {(m.ledger_id(), m.entry_id()) for m in ids} == {(0, 0)}  # Pulsar's id for every such send
        assert [early.receive(RECEIVE_MS).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
        late = client.subscribe(topic, "late", initial_position=magnetar.InitialPosition.Earliest)
        producer.send(b"m3")
        assert early.receive(RECEIVE_MS).data() == b"m3"
        got = late.receive(RECEIVE_MS)
        assert got.data() == b"m3"  # not m0..m2: they went to who was there when they came
        assert (got.message_id().ledger_id(), got.message_id().entry_id()) == (0, 0)
        late.acknowledge(got)  # accepted (and ignored)
        with pytest.raises(magnetar.Timeout):
            late.receive(300)
    stats = topic_stats(standalone, topic)
    assert stats["storageSize"] == 0 and stats["msgInCounter"] == 4
    assert stats["subscriptions"] == {}  # a subscription goes with its last consumer
    status, _ = admin_call(standalone, "GET", "/admin/v2/persistent/" + TopicName.parse(topic).path + "/stats")
    assert status == 404  # no persistent topic (no record) was made behind it


def test_a_slow_consumer_drops_and_counts_while_a_fast_subscription_gets_everything(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "slow", 1, c.SUB_EXCLUSIVE)
        open_consumer(wire, topic, "fast", 2, c.SUB_SHARED)
        wire.send(c.flow(1, 5), c.flow(2, 1000))
        open_producer(wire, topic)
        for seq in range(20):
            receipt = publish(wire, 1, seq, f"m{seq}".encode())
            assert receipt["t"] == c.SEND_RECEIPT and (receipt["ledger"], receipt["entry"]) == (0, 0)
        assert len(drain(wire, 1)) == 5  # its receiver queue was full after 5: the rest dropped
        assert len(drain(wire, 2)) == 20
        stats = topic_stats(standalone, topic)
        assert stats["subscriptions"]["slow"]["msgDropCounter"] == 15
        assert stats["subscriptions"]["fast"]["msgDropCounter"] == 0
        assert stats["msgDropCounter"] == 15 and stats["msgOutCounter"] == 25
        assert poll(lambda: topic_stats(standalone, topic)["subscriptions"]["slow"]["msgDropRate"] > 0)
        assert stats["publishers"][0]["msgDropRate"] == 0.0
        # The per-subscription drop rate, read at scrape time while the subscription is there.
        text = scrape(standalone.admin_url + "/metrics", timeout=10)
        rate = re.search(
            rf'^magnetar_subscription_msg_drop_rate{{subscription="slow",topic="{topic}"}} (\S+)$', text, re.M
        )
        assert rate is not None and float(rate.group(1)) > 0, text[-2000:]
        wire.send(c.flow(1, 10))  # permits back: the next messages reach it again
        publish(wire, 1, 20, b"m20")
        assert next_message(wire, 1)["payload"]
    metrics = poll(lambda: _metric(standalone, "magnetar_broker_messages_dropped_total") >= 15)
    assert metrics
    text = scrape(standalone.admin_url + "/metrics", timeout=10)
    assert f'subscription="slow",topic="{topic}"' not in text, "a subscription gone with its consumer is not reported"


def admin_cli(sa: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``magnetar-admin`` as a user runs it."""
    command = [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def _metric(sa: StandaloneProcess, name: str) -> float:
    return total(scrape(sa.admin_url + "/metrics", timeout=10), name)


def test_shared_spreads_key_shared_keeps_keys_and_exclusive_refuses_a_second_consumer(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "sh", 1, c.SUB_SHARED)
        open_consumer(wire, topic, "sh", 2, c.SUB_SHARED)
        open_consumer(wire, topic, "ks", 3, c.SUB_KEY_SHARED)
        open_consumer(wire, topic, "ks", 4, c.SUB_KEY_SHARED)
        open_consumer(wire, topic, "ex", 5, c.SUB_EXCLUSIVE)
        answer = wire.request(c.subscribe(topic, "ex", 6, c.SUB_EXCLUSIVE))
        assert answer["t"] == c.ERROR and answer["code"] == "ConsumerBusy", answer
        wire.send(*(c.flow(cid, 100) for cid in (1, 2, 3, 4, 5)))
        open_producer(wire, topic)
        for seq in range(10):
            send_keyed(wire, 1, seq, "same-key")
        shared = [len(drain(wire, cid)) for cid in (1, 2)]
        assert shared == [5, 5]  # round-robin over consumers with permits
        keyed = sorted(len(drain(wire, cid)) for cid in (3, 4))
        assert keyed == [0, 10]  # one key, one owner
        assert len(drain(wire, 5)) == 10


def test_a_reader_gets_what_comes_after_it_connected_and_seek_and_last_id_answer_as_pulsar(
    standalone: StandaloneProcess, topic: str
) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        reader = client.create_reader(topic, magnetar.MessageId.earliest)
        producer.send(b"after")
        assert reader.read_next(RECEIVE_MS).data() == b"after"
        with pytest.raises(magnetar.Unsupported, match="not supported on non-persistent topic"):
            reader.has_message_available()
        reader.seek(magnetar.MessageId.earliest)  # succeeds and changes nothing (nothing is kept)
        producer.send(b"later")
        assert reader.read_next(RECEIVE_MS).data() == b"later"


def test_admin_creates_lists_reports_refuses_cursor_verbs_and_deletes(
    standalone: StandaloneProcess, topic: str
) -> None:
    path = topic_path(topic)
    assert admin_call(standalone, "PUT", path) == (204, None)
    assert admin_call(standalone, "PUT", path)[0] == 409
    status, listed = admin_call(standalone, "GET", "/admin/v2/non-persistent/public/default")
    assert status == 200 and topic in listed
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s1", consumer_name="c1")
        producer = client.create_producer(topic, producer_name="p1")
        producer.send(b"x")
        consumer.receive(RECEIVE_MS)
        stats = topic_stats(standalone, topic)
        assert stats["publishers"][0]["producerName"] == "p1" and "msgDropRate" in stats["publishers"][0]
        assert stats["subscriptions"]["s1"]["consumers"][0]["consumerName"] == "c1"
        assert stats["subscriptions"]["s1"]["msgBacklog"] == 0 and "msgDropRate" in stats["subscriptions"]["s1"]
        assert admin_call(standalone, "GET", path + "/subscriptions") == (200, ["s1"])
        for verb in ("skip/1", "skip_all", "expireMessages/10", "resetcursor/0"):
            status, body = admin_call(standalone, "POST", f"{path}/subscription/s1/{verb}")
            assert status == 405 and "non-persistent topic is not allowed" in body["reason"], (verb, body)
        status, body = admin_call(standalone, "POST", f"{path}/subscription/s1/skip/1")
        assert body["reason"] == "Skip messages on a non-persistent topic is not allowed"
        status, body = admin_call(standalone, "PUT", path.replace(topic.rsplit("/", 1)[1], "parted") + "/partitions", 2)
        assert status == 405 and "not supported" in body["reason"]
        assert admin_call(standalone, "DELETE", path)[0] == 409  # clients still connected
        cli = admin_cli(standalone, "topics", "stats", topic)
        assert cli.returncode == 0 and '"msgDropRate"' in cli.stdout, cli.stderr
        cli = admin_cli(standalone, "topics", "list", "public/default")
        assert cli.returncode == 0 and topic in cli.stdout.split(), cli.stderr
    assert admin_call(standalone, "DELETE", path) == (204, None)
    assert topic not in admin_call(standalone, "GET", "/admin/v2/non-persistent/public/default")[1]
    assert admin_call(standalone, "GET", path + "/stats")[0] == 404


def test_nothing_is_stored_and_a_restart_loses_the_messages_not_the_topic(
    fresh_standalone: StandaloneProcess, topic: str
) -> None:
    sa = fresh_standalone
    with magnetar.Client(sa.service_url) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(50):
            producer.send_async(f"m{i}".encode(), lambda _result, _msg_id: None)
        producer.flush()
        assert len([consumer.receive(RECEIVE_MS) for _ in range(50)]) == 50
    sa.stop()
    stored = asyncio.run(_stored(sa, topic))
    assert stored == (False, False, []), stored  # no managed ledger, no topic record, no ledger
    sa.start()
    with magnetar.Client(sa.service_url) as client:
        consumer = client.subscribe(topic, "sub", initial_position=magnetar.InitialPosition.Earliest)
        with pytest.raises(magnetar.Timeout):
            consumer.receive(300)  # the 50 are gone, by design
        producer = client.create_producer(topic)
        producer.send(b"again")
        assert consumer.receive(RECEIVE_MS).data() == b"again"


async def _stored(sa: StandaloneProcess, topic: str) -> tuple[bool, bool, list[str]]:
    """What the metadata store holds for ``topic`` (read from the stopped standalone's LMDB)."""
    store = await LmdbMetadataStore.open(sa.data_dir / "metadata")
    try:
        name = TopicName.parse(topic)
        ml = await store.exists(paths.managed_ledger(name))
        record = await store.exists(paths.topic(name.tenant, name.namespace, name.local_name))
        ledgers = await store.children(paths.LEDGERS) if await store.exists(paths.LEDGERS) else []
        return ml, record, ledgers
    finally:
        await store.close()
