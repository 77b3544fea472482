"""Message deduplication on a real standalone (broker/topics/dedup.py, WIRE.md R40a-R40d).

With deduplication on, a message whose (producer name, sequence id) was stored already is answered
with id -1:-1 and not stored again: after a producer is created again with the same name, after a
live policy change, and after the broker is killed with SIGKILL and restarted (the snapshot of the
sequence ids plus a replay of the entries after it).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import LocalCluster, Proc, two_broker_cluster
from tests.support.standalone import StandaloneProcess, run_standalone
from tests.support.standalone import admin_call as call

import magnetar
from magnetar.cli import admin as admin_cli
from magnetar.metadata import paths
from magnetar.protocol.errors import ProducerBusy


def _topic_path(topic: str) -> str:
    return topic.removeprefix("persistent://")


def _stats(sa: StandaloneProcess, topic: str) -> dict[str, object]:
    status, body = call(sa, "GET", f"/admin/v2/persistent/{_topic_path(topic)}/stats")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def _wait_status(sa: StandaloneProcess, topic: str, want: str, within: float = 10.0) -> None:
    """The policy reaches the loaded topic through a metadata watch: wait for it (bounded)."""
    deadline = time.monotonic() + within
    while (got := _stats(sa, topic).get("deduplicationStatus")) != want:
        if time.monotonic() > deadline:
            pytest.fail(f"deduplicationStatus of {topic} is {got!r}, not {want!r}, after {within} s")
        time.sleep(0.05)  # polling interval


def _read_all(client: magnetar.Client, topic: str, sub: str, quiet_ms: int = 1500) -> list[bytes]:
    consumer = client.subscribe(topic, sub, initial_position=magnetar.InitialPosition.Earliest)
    got: list[bytes] = []
    try:
        while True:
            try:
                msg = consumer.receive(timeout_millis=quiet_ms)
            except magnetar.Timeout:
                return got
            got.append(msg.data())
            consumer.acknowledge(msg)
    finally:
        consumer.close()


def _snapshot(sa: StandaloneProcess, topic: str) -> dict[str, Any] | None:
    """The topic's deduplication snapshot as stored (WIRE.md R40d), read from the standalone's LMDB
    metadata store without disturbing it (a read-only LMDB reader next to the broker)."""
    import lmdb
    import msgpack

    key = paths.managed_ledger_property(topic, "dedup-snapshot").encode()
    env = lmdb.open(str(sa.data_dir / "metadata"), readonly=True, max_dbs=3, subdir=True)
    try:
        with env.begin(db=env.open_db(b"kv", create=False)) as txn:
            raw = txn.get(key)
    finally:
        env.close()
    if raw is None:
        return None
    doc: dict[str, Any] = json.loads(msgpack.unpackb(raw)[2])
    return doc


def _dedup_namespace(sa: StandaloneProcess) -> str:
    ns = f"dedup/ns-{uuid.uuid4().hex[:8]}"
    call(sa, "PUT", "/admin/v2/tenants/dedup", {})
    assert call(sa, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    assert call(sa, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True)[0] == 204
    return ns


def test_a_resend_after_the_producer_is_created_again_is_not_stored(standalone: StandaloneProcess) -> None:
    ns = _dedup_namespace(standalone)
    topic = f"persistent://{ns}/t"
    client = magnetar.Client(standalone.service_url)
    try:
        client.subscribe(topic, "all", initial_position=magnetar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name="orders", batching_enabled=False)
        first = [producer.send(b"m%d" % i) for i in range(10)]
        assert all(m.ledger_id() >= 0 for m in first)
        producer.close()

        again = client.create_producer(topic, producer_name="orders", batching_enabled=False)
        assert again.last_sequence_id() == 9  # the broker's answer, not the client's memory
        resent = [again.send(b"m%d" % i, sequence_id=i) for i in range(5, 10)]
        assert [(m.ledger_id(), m.entry_id()) for m in resent] == [(-1, -1)] * 5  # Pulsar's id of a duplicate
        assert again.send(b"m10").ledger_id() >= 0  # the next id goes on from 10
        stats = _stats(standalone, topic)
        assert stats["deduplicationStatus"] == "Enabled"
        assert stats["msgInCounter"] == 11
        assert _read_all(client, topic, "all") == [b"m%d" % i for i in range(11)]
    finally:
        client.close()


def test_a_batched_resend_with_custom_sequence_ids_is_not_stored(standalone: StandaloneProcess) -> None:
    ns = _dedup_namespace(standalone)
    topic = f"persistent://{ns}/batched"
    client = magnetar.Client(standalone.service_url)
    try:
        client.subscribe(topic, "all", initial_position=magnetar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name="src", batching_max_publish_delay_ms=50)
        for i in range(100, 120, 2):  # custom ids with gaps: the meta carries the highest (hs)
            producer.send_async(b"v%d" % i, lambda _res, _mid: None, sequence_id=i)
        producer.flush()
        producer.close()
        again = client.create_producer(topic, producer_name="src", batching_max_publish_delay_ms=50)
        assert again.last_sequence_id() == 118
        receipts: list[magnetar.MessageId] = []
        for i in range(110, 122, 2):
            again.send_async(b"v%d" % i, lambda _res, mid: receipts.append(mid), sequence_id=i)
        again.flush()
        # 110..118 travel in one batch with 120: a batch is judged by its first id, as in Pulsar,
        # so the whole batch is a duplicate (120 included); a batch starting at 120 would be stored.
        assert len(receipts) == 6 and all(m.ledger_id() == -1 for m in receipts)
        assert again.send(b"v122", sequence_id=122).ledger_id() >= 0
        values = _read_all(client, topic, "all")
        assert values == [b"v%d" % i for i in range(100, 120, 2)] + [b"v122"]
    finally:
        client.close()


def test_a_second_producer_with_a_connected_name_is_refused(standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/dedup-busy-{uuid.uuid4().hex[:8]}"
    client = magnetar.Client(standalone.service_url)
    try:
        first = client.create_producer(topic, producer_name="only-one")
        with pytest.raises(ProducerBusy, match="Producer with name 'only-one' is already connected"):
            client.create_producer(topic, producer_name="only-one")
        first.close()
        client.create_producer(topic, producer_name="only-one").close()
    finally:
        client.close()


def test_deduplication_turns_on_and_off_on_a_live_topic(standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/dedup-live-{uuid.uuid4().hex[:8]}"
    policy = f"/admin/v2/persistent/{_topic_path(topic)}/deduplicationEnabled"
    client = magnetar.Client(standalone.service_url)
    try:
        client.subscribe(topic, "all", initial_position=magnetar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name="live", batching_enabled=False)
        producer.send(b"a", sequence_id=0)
        assert _stats(standalone, topic)["deduplicationStatus"] == "Disabled"
        assert producer.send(b"a-again", sequence_id=0).ledger_id() >= 0  # off: stored twice

        assert call(standalone, "POST", policy, True)[0] == 204
        assert call(standalone, "GET", policy) == (200, True)
        _wait_status(standalone, topic, "Enabled")
        producer.send(b"b", sequence_id=1)
        assert producer.send(b"b-again", sequence_id=1).ledger_id() == -1  # on: not stored

        assert call(standalone, "POST", policy, False)[0] == 204
        _wait_status(standalone, topic, "Disabled")
        assert producer.send(b"b-third", sequence_id=1).ledger_id() >= 0  # off again: stored
        assert _read_all(client, topic, "all") == [b"a", b"a-again", b"b", b"b-third"]
        status, ns = call(standalone, "GET", "/admin/v2/namespaces/public/default")
        assert status == 200 and "deduplicationEnabled" not in ns["unenforced"]
    finally:
        client.close()


def test_magnetar_admin_sets_deduplication_as_pulsar_admin(standalone: StandaloneProcess, capsys) -> None:  # type: ignore[no-untyped-def]
    call(standalone, "PUT", "/admin/v2/tenants/dedup", {})
    ns = f"dedup/cli-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{ns}/t"
    base = ["--admin-url", standalone.admin_url]
    assert admin_cli.main([*base, "namespaces", "create", ns]) == 0
    assert admin_cli.main([*base, "namespaces", "set-deduplication", ns, "--enable"]) == 0
    assert admin_cli.main([*base, "namespaces", "set-deduplication-snapshot-interval", ns, "-i", "30"]) == 0
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/deduplication") == (200, True)
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/deduplicationSnapshotInterval") == (200, 30)
    assert admin_cli.main([*base, "topics", "create", topic]) == 0
    assert admin_cli.main([*base, "topics", "set-deduplication", topic, "--disable"]) == 0
    capsys.readouterr()
    assert admin_cli.main([*base, "topics", "get-deduplication", topic]) == 0
    assert capsys.readouterr().out.strip() == "false"
    assert admin_cli.main([*base, "topics", "remove-deduplication", topic]) == 0
    assert call(standalone, "GET", f"/admin/v2/persistent/{_topic_path(topic)}/deduplicationEnabled") == (200, None)


@pytest.mark.durability
def test_kill9_then_a_resend_of_the_same_ids_stores_no_duplicate(tmp_path: Path) -> None:
    """Snapshots every 10 entries (broker default on): 25 sends, kill -9, restart, resend all 25."""
    flags = ("--broker-deduplication-enabled", "--broker-deduplication-entries-interval", "10")
    topic = f"persistent://public/default/dedup-kill-{uuid.uuid4().hex[:8]}"
    with run_standalone(tmp_path, *flags) as sa:
        client = magnetar.Client(sa.service_url)
        client.subscribe(topic, "verify", initial_position=magnetar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, producer_name="crash", batching_enabled=False)
        for i in range(25):
            producer.send_async(b"c%d" % i, lambda _res, _mid: None)
        producer.flush()
        deadline = time.monotonic() + 10  # the snapshot of entry 20 is written in the background
        while (snap := _snapshot(sa, topic)) is None or snap["position"][1] < 19:
            assert time.monotonic() < deadline, f"no snapshot past entry 19: {snap}"
            time.sleep(0.02)  # polling interval
        assert snap["producers"] == {"crash": snap["position"][1]}  # seq i is entry i
        sa.kill9()
        client.close()

        sa.start()
        client = magnetar.Client(sa.service_url)
        try:
            again = client.create_producer(topic, producer_name="crash", batching_enabled=False)
            assert again.last_sequence_id() == 24
            ids = [again.send(b"c%d" % i, sequence_id=i) for i in range(15, 25)]
            assert all(m.ledger_id() == -1 for m in ids)
            assert _read_all(client, topic, "verify") == [b"c%d" % i for i in range(25)]
            log = sa.log_path.read_text(errors="replace")
            pattern = r"deduplication of \S+ enabled: 1 producers from the snapshot at \S+, (\d+) entries"
            recovered = re.findall(pattern, log)
            assert recovered, "the restarted broker did not start from the snapshot"
            assert int(recovered[-1]) == 24 - snap["position"][1]  # only the entries after the snapshot
        finally:
            client.close()


# ---------------------------------------------------------------------------------------------- cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "dedup-cluster")


def _post(cluster: LocalCluster, path: str, body: object, method: str = "POST") -> int:
    req = urllib.request.Request(
        cluster.admin_urls[0] + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(resp.status)


def _owner(cluster: LocalCluster, topic: str) -> Proc:
    async def ask() -> str | None:
        async with cluster.metadata() as md:
            return await md.topic_owner(topic)

    broker_id = asyncio.run(ask())
    assert broker_id is not None, f"{topic} has no owner"
    return cluster.broker_by_id(broker_id)


@pytest.mark.faults
@pytest.mark.timeout(240)
def test_owner_kill9_mid_stream_then_a_resend_through_the_new_owner(cluster: LocalCluster) -> None:
    """kill -9 of the owning broker while a producer streams; its reconnection resends what was in
    flight, and afterwards the same name resends every id through the new owner: every message is
    stored exactly once."""
    ns = f"public/dedup-{uuid.uuid4().hex[:8]}"
    assert _post(cluster, f"/admin/v2/namespaces/{ns}", None, "PUT") == 204
    assert _post(cluster, f"/admin/v2/namespaces/{ns}/deduplication", True) == 204
    topic = f"persistent://{ns}/stream"
    total, kill_after = 3000, 1200
    client = magnetar.Client(cluster.service_url, operation_timeout_seconds=30)
    try:
        client.subscribe(topic, "verify", initial_position=magnetar.InitialPosition.Earliest).close()
        producer = client.create_producer(
            topic,
            producer_name="stream",
            batching_max_messages=50,
            batching_max_publish_delay_ms=2,
            max_pending_messages=500,
            block_if_queue_full=True,
            send_timeout_millis=0,
        )
        acked: dict[int, magnetar.MessageId] = {}
        lock = threading.Lock()
        enough = threading.Event()

        def on_sent(i: int) -> Callable[[Any, Any], None]:
            def callback(result: Any, msg_id: Any) -> None:
                if result == magnetar.Result.Ok:
                    with lock:
                        acked[i] = msg_id
                        if len(acked) >= kill_after:
                            enough.set()

            return callback

        victim: Proc | None = None
        for i in range(total):
            producer.send_async(b"s%d" % i, on_sent(i))
            if victim is None and enough.is_set():
                victim = _owner(cluster, topic)
                victim.kill9()  # mid-stream: batches are in flight
        producer.flush()
        assert victim is not None and len(acked) == total
        producer.close()
        deduplicated_in_stream = sum(1 for m in acked.values() if m.ledger_id() == -1)

        again = client.create_producer(topic, producer_name="stream", batching_enabled=False)
        assert again.last_sequence_id() == total - 1
        for i in range(total - 20, total):  # the tail again, through the new owner
            assert again.send(b"s%d" % i, sequence_id=i).ledger_id() == -1
        again.close()
        victim.start()

        values = _read_all(client, topic, "verify", quiet_ms=3000)
        assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicates stored"
        assert set(values) == {b"s%d" % i for i in range(total)}, "lost messages"
        assert values == [b"s%d" % i for i in range(total)]
        print(f"DEDUP cluster: {total} sent, {deduplicated_in_stream} answered -1:-1 during the failover")
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- trimming


def _ledgers(sa: StandaloneProcess, topic: str) -> list[int]:
    status, body = call(sa, "GET", f"/admin/v2/persistent/{_topic_path(topic)}/internalStats")
    assert status == 200, body
    return [int(x["ledgerId"]) for x in body["ledgers"]]


def _mark_delete(sa: StandaloneProcess, topic: str, sub: str) -> str | None:
    status, body = call(sa, "GET", f"/admin/v2/persistent/{_topic_path(topic)}/internalStats")
    assert status == 200, body
    cursor = body["cursors"].get(sub)
    return None if cursor is None else str(cursor["markDeletePosition"])


def _poll(what: str, predicate: Callable[[], Any], within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {within} s waiting for {what}"
        time.sleep(0.05)  # polling interval
    return value


def _produce_and_ack(
    sa: StandaloneProcess, client: magnetar.Client, topic: str, sends: list[tuple[Any, bytes]]
) -> list[magnetar.MessageId]:
    """Send each (producer, body) as one entry, receive and acknowledge them all on the
    subscription ``acked``, and wait until its mark-delete position is the last of them: nothing is
    left for a consumer, so only retention (0 here) or a feature can keep the ledgers."""
    consumer = client.subscribe(topic, "acked", initial_position=magnetar.InitialPosition.Earliest)
    try:
        ids = [producer.send(body) for producer, body in sends]
        for _, body in sends:
            msg = consumer.receive(timeout_millis=10_000)
            assert msg.data() == body
            consumer.acknowledge(msg)
    finally:
        consumer.close()
    last = f"{ids[-1].ledger_id()}:{ids[-1].entry_id()}"
    _poll(f"the acknowledgements on {topic}", lambda: _mark_delete(sa, topic, "acked") == last)
    return ids


@pytest.mark.durability
@pytest.mark.timeout(180)
def test_deduplication_holds_back_trimming_until_its_next_snapshot(tmp_path: Path) -> None:
    """Ledgers of 10 entries, no snapshot by count or time during the test: what was written after
    the snapshot stays although a subscription acknowledged it (a topic without deduplication, for
    contrast, loses its consumed ledgers); the snapshot written when the topic is unloaded lets
    them go; and the ledgers kept after it are what the replay after a kill -9 reads, so a resend
    of the last ids stores nothing."""
    flags = (
        "--broker-deduplication-enabled",
        "--managed-ledger-max-entries-per-ledger",
        "10",
        "--managed-ledger-min-ledger-rollover-time-minutes",
        "0",
        "--broker-deduplication-entries-interval",
        "1000000",
        "--broker-deduplication-snapshot-interval-seconds",
        "3600",
        "--retention-check-interval-seconds",
        "0.2",
    )
    topic = f"persistent://public/default/dedup-trim-{uuid.uuid4().hex[:8]}"
    with run_standalone(tmp_path, *flags) as sa:
        call(sa, "PUT", "/admin/v2/tenants/dedup", {})
        ns = f"dedup/off-{uuid.uuid4().hex[:8]}"
        assert call(sa, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
        assert call(sa, "POST", f"/admin/v2/namespaces/{ns}/deduplication", False)[0] == 204
        control = f"persistent://{ns}/control"

        # 1. Deduplication on: its first snapshot is at the start, so nothing after it may go.
        client = magnetar.Client(sa.service_url)
        producer = client.create_producer(topic, producer_name="keep", batching_enabled=False)
        first = _poll("the first snapshot", lambda: _snapshot(sa, topic))
        assert first["producers"] == {}
        plain = client.create_producer(control, producer_name="keep", batching_enabled=False)
        assert _stats(sa, control)["deduplicationStatus"] == "Disabled"
        ids = _produce_and_ack(sa, client, topic, [(producer, b"d%d" % i) for i in range(35)])
        ctl = _produce_and_ack(sa, client, control, [(plain, b"c%d" % i) for i in range(35)])
        written = sorted({m.ledger_id() for m in ids})
        assert len(written) == 4  # 10 + 10 + 10 + 5 entries
        # The control topic trims its three consumed ledgers (after the acks, at roll-over and on
        # the retention check every 0.2 s) ...
        ctl_full = sorted({m.ledger_id() for m in ctl})[:3]
        _poll("the control topic's trimming", lambda: not set(ctl_full) & set(_ledgers(sa, control)))
        # ... the deduplicated one, acknowledged earlier, keeps every ledger after its snapshot.
        assert set(written) <= set(_ledgers(sa, topic)), "ledgers after the snapshot were trimmed"
        assert _snapshot(sa, topic) == first
        assert tuple(first["position"]) < (ids[0].ledger_id(), ids[0].entry_id())
        client.close()

        # 2. Unloading the topic (the graceful stop unloads every topic) takes a snapshot at the
        # last entry: now the consumed ledgers go.
        sa.stop()
        snap = _snapshot(sa, topic)
        assert snap is not None
        assert snap == {"position": [ids[-1].ledger_id(), ids[-1].entry_id()], "producers": {"keep": 34}}
        sa.start()
        client = magnetar.Client(sa.service_url)
        producer = client.create_producer(topic, producer_name="keep", batching_enabled=False)
        assert producer.last_sequence_id() == 34
        _poll("trimming after the snapshot", lambda: not set(written) & set(_ledgers(sa, topic)))

        # 3. 20 more of "keep" (sequence ids 35..54, two full ledgers) and 5 of another producer
        # (in the next ledger), acknowledged: kept again, the snapshot is behind them.
        filler = client.create_producer(topic, producer_name="filler", batching_enabled=False)
        sends = [(producer, b"d%d" % i) for i in range(35, 55)] + [(filler, b"f%d" % i) for i in range(5)]
        ids = _produce_and_ack(sa, client, topic, sends)
        kept = sorted({m.ledger_id() for m in ids[:20]})
        assert len(kept) == 2 and ids[20].ledger_id() > kept[-1]
        plain = client.create_producer(control, producer_name="keep", batching_enabled=False)
        ctl = _produce_and_ack(sa, client, control, [(plain, b"c%d" % i) for i in range(35, 60)])
        ctl_full = sorted({m.ledger_id() for m in ctl})[:2]
        _poll("the control topic's trimming", lambda: not set(ctl_full) & set(_ledgers(sa, control)))
        assert set(kept) <= set(_ledgers(sa, topic)), "ledgers after the snapshot were trimmed"
        assert _snapshot(sa, topic) == snap

        # 4. kill -9: the restarted broker replays those 25 entries. "keep"'s ids are only in the
        # two ledgers kept for the replay, so its resend of the last ten stores nothing.
        sa.kill9()
        client.close()
        sa.start()
        client = magnetar.Client(sa.service_url)
        try:
            again = client.create_producer(topic, producer_name="keep", batching_enabled=False)
            assert again.last_sequence_id() == 54
            resent = [again.send(b"d%d" % i, sequence_id=i) for i in range(45, 55)]
            assert [(m.ledger_id(), m.entry_id()) for m in resent] == [(-1, -1)] * 10
            assert again.send(b"d55", sequence_id=55).ledger_id() >= 0
            assert _stats(sa, topic)["msgInCounter"] == 1  # only d55 was stored since the restart
            consumer = client.subscribe(topic, "acked")
            assert consumer.receive(timeout_millis=10_000).data() == b"d55"  # not a resent one first
            consumer.close()
            log = sa.log_path.read_text(errors="replace")
            local = re.escape(topic.rsplit("/", 1)[1])
            pattern = rf"deduplication of \S*{local} enabled: (\d+) producers from the snapshot at (\S+), (\d+) entries"
            recovered = re.findall(pattern, log)
            assert recovered[-1] == ("2", f"{snap['position'][0]}:{snap['position'][1]}", "25")
        finally:
            client.close()
