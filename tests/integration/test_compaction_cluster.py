"""Topic compaction in a real cluster (broker/compaction/, WIRE.md R46a-R46d): triggered through a
broker that does not own the topic (the admin call is forwarded to the owner), and the compacted
view still read exactly after the owner is killed with SIGKILL and the topic moves.

etcd, one bookie and two brokers as processes (``two_broker_cluster``). The compacted ledger and
its record live in the bookie and the metadata store, so the broker that takes the topic over
serves the same view (read back from the compacted ledger), followed by what was published after
the kill.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.cluster import LocalCluster, two_broker_cluster
from tests.support.polling import wait_for

import magnetar
from magnetar import InitialPosition, MessageId

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "compaction-cluster")


def _owner_id(cluster: LocalCluster, topic: str) -> str | None:
    async def ask() -> str | None:
        async with cluster.metadata() as md:
            return await md.topic_owner(topic)

    return asyncio.run(ask())


def _admin(cluster: LocalCluster, broker: int, method: str, topic: str, suffix: str) -> tuple[int, Any]:
    """``method`` on ``broker``'s own admin API (no fallback to another broker): status and JSON."""
    url = f"{cluster.admin_urls[broker]}/admin/v2/persistent/{topic.split('://', 1)[1]}/{suffix}"
    req = urllib.request.Request(url, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.strip() else None


def _send_all(producer: Any, items: list[tuple[str, bytes]]) -> list[MessageId]:
    """Send keyed messages asynchronously; their message ids, in sending order."""
    ids: list[Any] = [None] * len(items)
    failed: list[Any] = []

    def on_sent(i: int) -> Any:
        def callback(result: Any, msg_id: Any) -> None:
            if result == magnetar.Result.Ok:
                ids[i] = msg_id
            else:
                failed.append(result)

        return callback

    for i, (key, value) in enumerate(items):
        producer.send_async(value, on_sent(i), partition_key=key)
    producer.flush()
    assert not failed and all(m is not None for m in ids), failed
    return ids


def _read(client: magnetar.Client, topic: str, *, compacted: bool) -> list[magnetar.Message]:
    """Everything a reader from the earliest message gets, until has_message_available says no."""
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=compacted)
    out = []
    try:
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=10_000))
    finally:
        reader.close()
    return out


def _id(m: Any) -> tuple[int, int, int]:
    return (m.ledger_id(), m.entry_id(), m.batch_index())


def test_compaction_forwarded_to_the_owner_survives_an_owner_kill9(cluster: LocalCluster, topic: str) -> None:
    with magnetar.Client(cluster.service_url, operation_timeout_seconds=30) as client:
        # A durable subscription at the start keeps every ledger, so a plain reader can show
        # that the compacted view is not simply the topic as stored.
        client.subscribe(topic, "hold", initial_position=InitialPosition.Earliest).close()
        producer = client.create_producer(
            topic, block_if_queue_full=True, batching_max_messages=20, batching_max_publish_delay_ms=5
        )
        items: list[tuple[str, bytes]] = [(f"k{i % 10}", f"v{i}".encode()) for i in range(300)]
        # Tombstones: k3 removed; k5 removed then written again; k7 removed twice.
        items += [("k3", b""), ("k5", b""), ("k5", b"revived"), ("k7", b""), ("k7", b"")]
        ids = _send_all(producer, items)

        latest: dict[str, tuple[bytes, Any]] = {}
        for (key, value), msg_id in zip(items, ids, strict=True):
            latest[key] = (value, msg_id)
        view = sorted(((k, v, _id(m)) for k, (v, m) in latest.items() if v), key=lambda s: s[2])
        assert [k for k, _, _ in view] == ["k0", "k1", "k2", "k4", "k6", "k8", "k9", "k5"]

        owner_id = _owner_id(cluster, topic)
        assert owner_id is not None, f"{topic} has no owner"
        owner_proc = cluster.broker_by_id(owner_id)
        owner = cluster.broker_index(owner_proc)
        other = 1 - owner

        # Compact through the broker that does NOT own the topic: it forwards to the owner.
        assert _admin(cluster, other, "GET", topic, "compaction") == (200, {"status": "NOT_RUN", "lastError": ""})
        status, body = _admin(cluster, other, "PUT", topic, "compaction")
        assert status == 204, body

        def finished() -> dict[str, Any] | None:
            _, doc = _admin(cluster, other, "GET", topic, "compaction")
            return doc if doc["status"] in ("SUCCESS", "ERROR") else None

        assert wait_for("the compaction", finished, timeout=60) == {"status": "SUCCESS", "lastError": ""}
        # The run happened on the owner (the status is the memory of the broker that ran it), and
        # the other broker neither ran it nor took the topic.
        assert _admin(cluster, owner, "GET", topic, "compaction") == (200, {"status": "SUCCESS", "lastError": ""})
        _, stats = _admin(cluster, owner, "GET", topic, "stats")
        assert stats["compaction"]["lastCompactionSucceedTimestamp"] > 0
        assert stats["compaction"]["lastCompactionRemovedEventCount"] == len(items) - len(view)
        _, internal = _admin(cluster, owner, "GET", topic, "internalStats")
        assert internal["compactedLedger"]["entries"] >= 1
        assert _owner_id(cluster, topic) == owner_id

        before = _read(client, topic, compacted=True)
        assert [(m.partition_key(), m.data(), _id(m.message_id())) for m in before] == view

        owner_proc.kill9()
        # Published after the kill: the producer reconnects to the broker that takes the topic over.
        tail: list[tuple[str, bytes]] = [("k1", b"after-1"), ("k3", b"after-3"), ("k11", b"after-11")]
        tail_ids = _send_all(producer, tail)
        assert _owner_id(cluster, topic) == cluster.broker_address(other).broker_id
        assert all(_id(m) > view[-1][2] for m in tail_ids)

        got = _read(client, topic, compacted=True)
        expected = view + [(k, v, _id(m)) for (k, v), m in zip(tail, tail_ids, strict=True)]
        assert [(m.partition_key(), m.data(), _id(m.message_id())) for m in got] == expected
        # Without read_compacted the new owner serves the topic as stored: every message.
        assert len(_read(client, topic, compacted=False)) == len(items) + len(tail)
        _, internal = _admin(cluster, other, "GET", topic, "internalStats")
        assert internal["compactedLedger"]["ledgerId"] >= 0
        producer.close()
        owner_proc.start()
