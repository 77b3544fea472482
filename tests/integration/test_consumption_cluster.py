"""Consumption semantics across a kill -9 of the broker that owns the topic, in a real cluster.

etcd, one bookie and two brokers as processes (``LocalCluster``). Each scenario kills the owning
broker with SIGKILL in the middle of something stateful in the broker's memory: a Failover
takeover, a Key_Shared consumer joining, a thousand pending delayed messages, a retry chain that
ends in the dead letter topic. The other broker takes the topic over (lease expiry), the killed
one is restarted, and the scenario checks what a Pulsar user relies on: nothing acknowledged is
lost, per-key order holds, delayed messages are never early, and each message ends in the DLQ
exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta

import pytest
from tests.support.cluster import LocalCluster, Proc, two_broker_cluster

import magnetar
from magnetar.client.errors import Timeout

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "consumption-cluster")


def owner(cluster: LocalCluster, topic: str) -> Proc:
    async def ask() -> str | None:
        async with cluster.metadata() as md:
            return await md.topic_owner(topic)

    broker_id = asyncio.run(ask())
    assert broker_id is not None, f"{topic} has no owner"
    return cluster.broker_by_id(broker_id)


def kill_owner(cluster: LocalCluster, topic: str) -> Proc:
    """kill -9 the owner; the caller restarts it once the scenario has moved on."""
    proc = owner(cluster, topic)
    proc.kill9()
    return proc


def client(cluster: LocalCluster) -> magnetar.Client:
    return magnetar.Client(cluster.service_url, operation_timeout_seconds=30)


def drain(consumer: magnetar.Consumer, want: int, within: float = 60.0) -> list[magnetar.Message]:
    """Receive (and acknowledge) until ``want`` messages arrived or ``within`` seconds passed."""
    out: list[magnetar.Message] = []
    deadline = time.monotonic() + within
    while len(out) < want and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=500)
        except Timeout:
            continue
        out.append(msg)
        consumer.acknowledge(msg)
    return out


def test_failover_takeover_across_an_owner_kill9(cluster: LocalCluster, topic: str) -> None:
    with client(cluster) as c:
        producer = c.create_producer(topic, batching_enabled=False)
        sent = [f"m{i}".encode() for i in range(100)]
        for m in sent:
            producer.send(m)
        failover = magnetar.ConsumerType.Failover
        earliest = magnetar.InitialPosition.Earliest
        a = c.subscribe(topic, "fo", consumer_type=failover, consumer_name="a", initial_position=earliest)
        b = c.subscribe(topic, "fo", consumer_type=failover, consumer_name="b", initial_position=earliest)
        # "a" sorts first, so it is the active consumer: it gets messages, "b" none.
        got_a = [a.receive(timeout_millis=10_000) for _ in range(50)]
        for m in got_a[:40]:
            a.acknowledge(m)
        with pytest.raises(Timeout):
            b.receive(timeout_millis=300)
        killed = kill_owner(cluster, topic)
        a.close()  # the takeover happens while the topic moves to the other broker
        got_b = drain(b, 60, within=90)
        killed.start()
        acked_by_a = {m.data() for m in got_a[:40]}
        seen_by_b = {m.data() for m in got_b}
        assert acked_by_a | seen_by_b == set(sent), "a message acknowledged by nobody was not redelivered"
        assert {m.data() for m in got_a[40:]} <= seen_by_b, "a's unacknowledged messages must go to b"
        order = [sent.index(m.data()) for m in got_b]
        assert order == sorted(order), "Failover delivers in order"


def test_key_shared_join_keeps_per_key_order_across_an_owner_kill9(cluster: LocalCluster, topic: str) -> None:
    keys = [f"k{i}" for i in range(20)]
    with client(cluster) as c:
        producer = c.create_producer(topic, batching_type=magnetar.BatchingType.KeyBased)
        key_shared = magnetar.ConsumerType.KeyShared
        earliest = magnetar.InitialPosition.Earliest
        c1 = c.subscribe(topic, "ks", consumer_type=key_shared, consumer_name="c1", initial_position=earliest)
        for seq in range(30):
            for k in keys:
                producer.send_async(f"{k}:{seq}".encode(), _ignore, partition_key=k)
        producer.flush()
        first = drain(c1, 200)
        killed = kill_owner(cluster, topic)
        c2 = c.subscribe(topic, "ks", consumer_type=key_shared, consumer_name="c2", initial_position=earliest)
        received: list[tuple[str, int, str]] = [(*_key_seq(m), "c1") for m in first]
        done: set[bytes] = {m.data() for m in first}
        consumers = (("c1", c1), ("c2", c2))

        def take(until: int, within: float) -> None:
            deadline = time.monotonic() + within
            while len(done) < until and time.monotonic() < deadline:
                for name, cons in consumers:
                    try:
                        msg = cons.receive(timeout_millis=50)
                    except Timeout:
                        continue
                    received.append((*_key_seq(msg), name))
                    done.add(msg.data())
                    cons.acknowledge(msg)

        take(600, within=90)
        killed.start()
        assert len(done) == 600, f"{600 - len(done)} messages never delivered"
        # Both consumers are attached to the new owner now: the key range is split between them,
        # so a new round of every key reaches both (whichever of them re-joined last waited for
        # the keys it took over to be acknowledged elsewhere first).
        deadline = time.monotonic() + 30
        while not (c1.is_connected() and c2.is_connected()) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the consumers' attachment (no event to wait on here)
        assert c1.is_connected() and c2.is_connected()
        mark = len(received)
        for k in keys:
            producer.send_async(f"{k}:30".encode(), _ignore, partition_key=k)
        producer.flush()
        take(620, within=60)
        assert len(done) == 620, f"{620 - len(done)} messages of the last round never delivered"
        by_key: dict[str, list[int]] = defaultdict(list)
        for key, seq, _ in received:
            by_key[key].append(seq)
        for key, seqs in by_key.items():
            firsts = list(dict.fromkeys(seqs))  # first delivery of each message, in delivery order
            assert firsts == sorted(firsts), f"key {key} delivered out of order: {firsts}"
        assert {name for *_, name in received[mark:]} == {"c1", "c2"}, "the key range was not split"


def _ignore(result: object, msg_id: object) -> None:
    """``send_async`` callback: the test checks delivery, and ``flush`` waits for the receipts."""


def _key_seq(msg: magnetar.Message) -> tuple[str, int]:
    key, seq = msg.data().decode().split(":")
    return key, int(seq)


def test_pending_delayed_messages_survive_an_owner_kill9(cluster: LocalCluster, topic: str) -> None:
    with client(cluster) as c:
        consumer = c.subscribe(topic, "delayed", consumer_type=magnetar.ConsumerType.Shared)
        producer = c.create_producer(topic)
        due: dict[bytes, int] = {}
        for i in range(1000):
            at = int(time.time() * 1000) + 4000 + (i % 20) * 100
            body = f"d{i}".encode()
            producer.send_async(body, _ignore, deliver_at=at)
            due[body] = at
        producer.flush()
        killed = kill_owner(cluster, topic)
        got: dict[bytes, int] = {}
        deadline = time.monotonic() + 90
        while len(got) < len(due) and time.monotonic() < deadline:
            try:
                msg = consumer.receive(timeout_millis=500)
            except Timeout:
                continue
            got.setdefault(msg.data(), int(time.time() * 1000))
            consumer.acknowledge(msg)
        killed.start()
        assert set(got) == set(due), f"{len(set(due) - set(got))} delayed messages lost"
        early = [body for body, t in got.items() if t < due[body]]
        assert not early, f"{len(early)} delivered early, e.g. {early[:3]}"


def test_retry_chain_ends_in_the_dlq_exactly_once_across_an_owner_kill9(cluster: LocalCluster, topic: str) -> None:
    dlq = f"{topic}-retry-DLQ"
    policy = magnetar.ConsumerDeadLetterPolicy(max_redeliver_count=2, initial_subscription_name="audit")
    with client(cluster) as c:
        consumer = c.subscribe(
            topic, "retry", consumer_type=magnetar.ConsumerType.Shared, retry_enable=True, dead_letter_policy=policy
        )
        producer = c.create_producer(topic)
        sent = {f"r{i}".encode() for i in range(50)}
        for body in sorted(sent):
            producer.send(body)
        attempts: dict[bytes, int] = defaultdict(int)
        killed: Proc | None = None
        deadline = time.monotonic() + 120
        last = time.monotonic()
        # Until every message had its three attempts and nothing more came for three seconds.
        while time.monotonic() < deadline and (sum(attempts.values()) < 150 or time.monotonic() - last < 3):
            try:
                msg = consumer.receive(timeout_millis=500)
            except Timeout:
                continue
            last = time.monotonic()
            attempts[msg.data()] += 1
            consumer.reconsume_later(msg, timedelta(milliseconds=200))
            if killed is None and sum(attempts.values()) >= 60:
                killed = kill_owner(cluster, topic)
        assert killed is not None
        killed.start()
        audit = c.subscribe(dlq, "audit", consumer_type=magnetar.ConsumerType.Shared)
        in_dlq = [m.data() for m in drain(audit, len(sent) + 10, within=30)]
        assert sorted(in_dlq) == sorted(sent), "each message must end in the DLQ exactly once"
        # The first delivery and two retries each; one more where an acknowledgement died with the broker.
        assert set(attempts) == sent and all(n >= 3 for n in attempts.values()), attempts
