"""The ``magnetar`` data source on local Spark (``local[2]``) against real brokers and bookies.

Shown here: it reads exactly the acknowledged messages (ids, count, payload bytes against what was
sent and against the broker's stats; batched and unbatched, keys, properties, event times, several
ledgers, a partitioned topic), also while a producer keeps writing (the read stops at the plan's
end and never returns an unacknowledged message); filters on ledger id and publish time cut the
planned partitions and give the same rows as filtering in Spark; ``startAfter``/``endAt`` pieces
add up to the whole; a copy damaged on one bookie's disk is detected by CRC and read from the
other replica, a bookie down is read around, and with no good replica the job fails naming the
entry; a missing topic is named in the error; and a standalone (no etcd) works the same.

The damage is done on the bookie's real LMDB (``bookie/STORAGE.md``), with the bookie killed for
the edit and restarted on the same disk.
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import lmdb
import pytest
from pyspark.sql import functions as F
from pyspark.sql.datasource import GreaterThanOrEqual
from tests.support.cluster import LocalCluster
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess

from magnetar.bookie.storage import ENTRY_HEAD
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.client import aio
from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.ledger_reads import read_range
from magnetar.jobs.source import SCHEMA, MagnetarDataSource
from magnetar.jobs.topic_plan import format_position, plan_reads, resolve_topics
from magnetar.ledger.distribution import write_set
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import decode_entry
from magnetar.protocol.errors import ChecksumError

pytestmark = pytest.mark.spark

Id = tuple[int, int, int]  # ledger, entry, batch index


@dataclass
class Sent:
    """What a producer was acknowledged: per message id, its payload, key, properties, event time."""

    messages: dict[Id, tuple[bytes, str | None, dict[str, str], int]] = field(default_factory=dict)

    @property
    def payload_bytes(self) -> int:
        return sum(len(m[0]) for m in self.messages.values())


async def _produce(
    url: str, topic: str, n: int, *, batched: bool, tag: str = "m", out: Sent | None = None, batch_max: int = 10
) -> Sent:
    """``n`` messages, every third with a key, all with properties and (but every fifth) an event time."""
    sent = out if out is not None else Sent()
    async with aio.Client(url) as client:
        producer = await client.create_producer(
            topic,
            batching_enabled=batched,
            batching_max_messages=batch_max,
            max_pending_messages=5000,
        )
        futures = []
        details = []
        for i in range(n):
            payload = f"{tag}-{i}-".encode() + bytes([i % 251]) * (i % 37)
            key = f"k{i % 7}" if i % 3 == 0 else None
            props = {"i": str(i), "tag": tag}
            event_time = 0 if i % 5 == 0 else 1_600_000_000_000 + i
            futures.append(
                await producer.send_async(
                    payload, properties=props, partition_key=key, event_timestamp=event_time or None
                )
            )
            details.append((payload, key, props, event_time))
        for fut, d in zip(futures, details, strict=True):
            mid = await fut
            sent.messages[(mid.ledger_id(), mid.entry_id(), mid.batch_index())] = d
        await producer.close()
    return sent


def produce(url: str, topic: str, n: int, **kw: Any) -> Sent:
    return asyncio.run(_produce(url, topic, n, **kw))


def load(spark: Any, admin_url: str, **options: str) -> Any:
    reader = spark.read.format("magnetar").option("adminUrl", admin_url)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def bookie_reads(cluster: LocalCluster) -> int:
    """Entries read from every bookie so far (their ``magnetar_bookie_reads`` counters): what a
    read really cost, so a test can tell that pushdown skipped entries rather than filtered rows."""
    return int(sum(cluster.bookie_gauge("magnetar_bookie_reads_total").values()))


def counting_reads(cluster: LocalCluster, df: Any) -> tuple[list[Any], int]:
    """``df.collect()`` and the number of entries the bookies served for it."""
    before = bookie_reads(cluster)
    rows = df.collect()
    return rows, bookie_reads(cluster) - before


def ids_of(rows: list[Any]) -> list[Id]:
    return [(r.ledger_id, r.entry_id, r.batch_index) for r in rows]


def check_rows_match(rows: list[Any], sent: Sent) -> None:
    """Every row is an acknowledged message, with the fields it was sent with; none missing."""
    got = {(r.ledger_id, r.entry_id, r.batch_index): r for r in rows}
    assert len(got) == len(rows), "a message was read twice"
    assert set(got) == set(sent.messages)
    for mid, (payload, key, props, event_time) in sent.messages.items():
        r = got[mid]
        assert bytes(r.payload) == payload
        assert r.key == key
        assert dict(r.properties) == props
        if event_time:
            assert int(r.event_time.timestamp() * 1000) == event_time
        else:
            assert r.event_time is None
        assert r.publish_time is not None and r.producer_name


# ------------------------------------------------------------------------------------------ standalone


def test_reads_a_standalone_topic(spark: Any, fresh_standalone: StandaloneProcess) -> None:
    """No etcd: the standalone's broker answers the planning calls, its bookie serves the entries."""
    sa = fresh_standalone
    topic = "persistent://public/default/source-standalone"
    sent = produce(sa.service_url, topic, 60, batched=True)
    produce(sa.service_url, topic, 15, batched=False, tag="u", out=sent)
    rows = load(spark, sa.admin_url, topic=topic).collect()
    assert len(rows) == 75
    check_rows_match(rows, sent)
    assert {r.topic for r in rows} == {topic} and {r.partition for r in rows} == {-1}


# ------------------------------------------------------------------------------------------ cluster


NS = "public/source"  # with infinite retention: without a subscription, read ledgers would be trimmed


@pytest.fixture(scope="module")
def admin(jobs_cluster: LocalCluster) -> AdminClient:
    a = AdminClient(jobs_cluster.admin_urls[0])
    a.put(f"namespaces/{NS}")
    a.post(f"namespaces/{NS}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    return a


@pytest.fixture(scope="module")
def multi_ledger(jobs_cluster: LocalCluster, admin: AdminClient) -> tuple[str, Sent]:
    """One topic over three ledgers (rolled every 1,000 entries): 2,100 unbatched messages, then
    3,000 batched ones (10 per entry), with keys, properties and event times."""
    topic = f"persistent://{NS}/multi"
    sent = produce(jobs_cluster.service_url, topic, 2100, batched=False, tag="u")
    produce(jobs_cluster.service_url, topic, 3000, batched=True, tag="b", out=sent)
    return topic, sent


def test_reads_exactly_the_acknowledged_messages(
    spark: Any, jobs_cluster: LocalCluster, admin: AdminClient, multi_ledger: tuple[str, Sent]
) -> None:
    topic, sent = multi_ledger
    df = load(spark, jobs_cluster.admin_urls[0], topic=topic, entriesPerPartition="400")
    assert df.schema == SCHEMA
    rows = df.collect()
    check_rows_match(rows, sent)
    assert {r.ledger_id for r in rows}.__len__() >= 3
    assert sum(1 for r in rows if r.batch_index == -1) == 2100  # unbatched: batch index -1, as Pulsar
    # The broker's own counts: messages in, and every stored entry's bytes (read back raw).
    stats = jobs_cluster.topic_stats(topic)
    assert stats["msgInCounter"] == len(rows) == 5100
    assert sum(len(r.payload) for r in rows) == sent.payload_bytes
    internal = admin.internal_stats(topic)
    plan = plan_reads(admin, [topic])
    stored = [asyncio.run(read_range(r)) for r in plan.ranges]
    assert sum(s.entries for _, s in stored) == internal["numberOfEntries"] == 2100 + 300
    assert sum(s.bytes for _, s in stored) == internal["totalSize"]
    assert stats["bytesInCounter"] == sum(len(e.payload) for entries, _ in stored for e in entries)


def test_reads_every_partition_of_a_partitioned_topic(
    spark: Any, jobs_cluster: LocalCluster, admin: AdminClient
) -> None:
    topic = f"persistent://{NS}/parted"
    admin.put(f"persistent/{NS}/parted/partitions", 3)
    sent = produce(jobs_cluster.service_url, topic, 900, batched=True)
    rows = load(spark, jobs_cluster.admin_urls[0], topic=topic).collect()
    assert len(rows) == 900
    parts = {r.partition for r in rows}
    assert parts == {0, 1, 2}
    assert {r.topic for r in rows} == {f"{topic}-partition-{i}" for i in range(3)}
    # Ids are per partition: compare (partition topic, ledger, entry, batch) sets and payloads.
    assert sorted(bytes(r.payload) for r in rows) == sorted(m[0] for m in sent.messages.values())
    assert len({(r.topic, r.ledger_id, r.entry_id, r.batch_index) for r in rows}) == 900
    assert resolve_topics(admin, topic=topic) == [f"{topic}-partition-{i}" for i in range(3)]


def test_a_running_producer_is_read_up_to_what_was_acknowledged(
    spark: Any, jobs_cluster: LocalCluster, admin: AdminClient
) -> None:
    """A producer sends all along; the read returns every message acknowledged before it started,
    only acknowledged ones, and all of them up to where it stops (the plan's end): no gap."""
    topic = f"persistent://{NS}/running"
    acked: list[Id] = []
    stop = threading.Event()
    lock = threading.Lock()

    async def keep_producing() -> None:
        async with aio.Client(jobs_cluster.service_url) as client:
            producer = await client.create_producer(topic, batching_max_messages=20, batching_max_publish_delay_ms=2)
            i = 0
            while not stop.is_set():
                window = [await producer.send_async(b"r%d" % (i + k)) for k in range(50)]
                i += 50
                for mid in await asyncio.gather(*window):
                    with lock:
                        acked.append((mid.ledger_id(), mid.entry_id(), mid.batch_index()))
            await producer.close()

    thread = threading.Thread(target=lambda: asyncio.run(keep_producing()), daemon=True)
    thread.start()
    try:
        wait_for("1,500 acknowledged messages (two ledgers)", lambda: len(acked) >= 1500, timeout=60)
        with lock:
            before = set(acked)
        rows = load(spark, jobs_cluster.admin_urls[0], topic=topic).collect()
        with lock:
            after = set(acked)
        wait_for("the producer to go on after the read", lambda: len(acked) > len(after), timeout=30)
    finally:
        stop.set()
        thread.join(30)
    got = ids_of(rows)
    assert len(got) == len(set(got))
    read = set(got)
    assert before <= read, "a message acknowledged before the read started is missing"
    assert read <= after, "the read returned a message not acknowledged when it finished"
    end = max(read)
    assert {m for m in after if m <= end} == read, "a gap before the read's end"
    assert len(after) > len(before)  # the producer really ran during the read
    confirmed = tuple(int(x) for x in admin.internal_stats(topic)["lastConfirmedEntry"].split(":"))
    assert end[:2] <= confirmed


def test_missing_topic_is_named(spark: Any, jobs_cluster: LocalCluster) -> None:
    missing = "persistent://public/default/source-no-such-topic"
    with pytest.raises(Exception, match="source-no-such-topic does not exist"):
        load(spark, jobs_cluster.admin_urls[0], topic=missing).collect()


def test_pushdown_on_ledger_id_cuts_the_partitions(
    spark: Any, jobs_cluster: LocalCluster, multi_ledger: tuple[str, Sent]
) -> None:
    topic, sent = multi_ledger
    url = jobs_cluster.admin_urls[0]
    full = load(spark, url, topic=topic, entriesPerPartition="400")
    ledgers = sorted({mid[0] for mid in sent.messages})
    second = ledgers[1]
    entries = {m[:2] for m in sent.messages}
    rows, reads = counting_reads(jobs_cluster, full)
    assert reads == len(entries) and len(rows) == len(sent.messages)
    rows, reads = counting_reads(jobs_cluster, full.where(F.col("ledger_id") >= second))
    assert sorted(ids_of(rows)) == sorted(m for m in sent.messages if m[0] >= second)
    assert reads == sum(1 for e in entries if e[0] >= second)  # the first ledger was not read
    rows, reads = counting_reads(
        jobs_cluster, full.where(F.col("ledger_id").isin(ledgers[0], ledgers[2]) & (F.col("entry_id") < 10))
    )
    assert sorted(ids_of(rows)) == sorted(m for m in sent.messages if m[0] in (ledgers[0], ledgers[2]) and m[1] < 10)
    assert reads == 20
    # The reader itself: the filter is taken (not handed back) and the plan shrinks.
    reader = MagnetarDataSource({"adminUrl": url, "topic": topic, "entriesPerPartition": "400"}).reader(SCHEMA)
    every = len(reader.partitions())
    f = GreaterThanOrEqual(("ledger_id",), second)
    assert list(reader.pushFilters([f])) == []
    assert len(reader.partitions()) == every - sum(1 for r in reader.plan().ranges if r.ledger_id < second)


def test_pushdown_on_publish_time_skips_ledgers_closed_before(
    spark: Any, jobs_cluster: LocalCluster, admin: AdminClient
) -> None:
    """Ledgers closed (more than the slack) before the lower bound are not read at all; the rows
    are those of the unfiltered read filtered by Spark."""
    topic = f"persistent://{NS}/by-time"
    produce(jobs_cluster.service_url, topic, 2000, batched=False, tag="old")
    closed = [led["timestamp"] for led in admin.internal_stats(topic)["ledgers"] if led["timestamp"] > 0]
    assert closed, "the first wave filled at least one ledger"
    wait_for("a second past the last close (the default slack)", lambda: time.time() * 1000 > max(closed) + 1100)
    bound_ms = int(time.time() * 1000)
    produce(jobs_cluster.service_url, topic, 300, batched=True, tag="new")
    url = jobs_cluster.admin_urls[0]
    full = load(spark, url, topic=topic, entriesPerPartition="400")
    everything, all_reads = counting_reads(jobs_cluster, full)
    bound = everything[0].publish_time.__class__.fromtimestamp(bound_ms / 1000, tz=everything[0].publish_time.tzinfo)
    expected = sorted(ids_of([r for r in everything if int(r.publish_time.timestamp() * 1000) >= bound_ms]))
    assert len(expected) == 300
    rows, reads = counting_reads(jobs_cluster, full.where(F.col("publish_time") >= F.lit(bound)))
    assert sorted(ids_of(rows)) == expected
    assert all_reads == 2000 + 30
    assert reads <= all_reads - 1000  # at least the first ledger (1,000 entries, closed long before) was skipped


def test_start_after_and_end_at_pieces_add_up_to_the_whole(
    spark: Any, jobs_cluster: LocalCluster, admin: AdminClient, multi_ledger: tuple[str, Sent]
) -> None:
    topic, _ = multi_ledger
    url = jobs_cluster.admin_urls[0]
    whole = sorted(ids_of(load(spark, url, topic=topic).collect()))
    positions = sorted({m[:2] for m in whole})
    p1, p2, last = positions[len(positions) // 3], positions[2 * len(positions) // 3], positions[-1]

    def piece(start: tuple[int, int] | None, end: tuple[int, int] | None) -> list[Id]:
        opts = {"topic": topic}
        if start is not None:
            opts["startAfter"] = json.dumps({topic: format_position(start)})
        if end is not None:
            opts["endAt"] = json.dumps({topic: format_position(end)})
        return ids_of(load(spark, url, **opts).collect())

    a, b, c = piece(None, p1), piece(p1, p2), piece(p2, None)
    assert all(m[:2] <= p1 for m in a) and all(p1 < m[:2] <= p2 for m in b) and all(m[:2] > p2 for m in c)
    assert sorted(a + b + c) == whole
    assert sorted(piece(p1, None)) == sorted(b + c)
    # What the export commits: the last position read, or the start when nothing is new.
    assert plan_reads(admin, [topic], start_after={topic: p1}, end_at={topic: p2}).end_positions == {topic: p2}
    nothing = plan_reads(admin, [topic], start_after={topic: last})
    assert nothing.ranges == [] and nothing.end_positions == {topic: last}
    assert piece(last, None) == []


# ------------------------------------------------------------------------------------------ damage


def _edit_entry(cluster: LocalCluster, bookie_id: str, ledger_id: int, entry_id: int, *, fix_crc: bool) -> bytes:
    """Flip the last byte of an entry (the end of its payload) on one (stopped) bookie's disk; with
    ``fix_crc`` rewrite the bookie's stored CRC to match, so only the entry's payload CRC can tell."""
    data_dir = cluster.bookie(bookie_id).data_dir
    assert data_dir is not None
    env = lmdb.open(str(data_dir / "ledgers"), map_size=1 << 40, max_dbs=3, subdir=True)
    try:
        entries = env.open_db(b"entries")
        key = struct.pack(">QQ", ledger_id, entry_id)
        with env.begin(write=True, db=entries) as txn:
            stored = txn.get(key)
            assert stored is not None, f"{bookie_id} has no copy of {ledger_id}:{entry_id}"
            value = bytes(stored)
            # Storage format 2 (STORAGE.md): CRC32C of the data, the key check, then the data.
            data = bytearray(value[ENTRY_HEAD.size :])
            original = bytes(data)
            data[-1] ^= 0xFF
            crc = crc32c(bytes(data)) if fix_crc else ENTRY_HEAD.unpack_from(value)[0]
            # A forgery that keeps the bookie's own checks happy: the CRC and the key check agree.
            txn.put(key, ENTRY_HEAD.pack(crc, crc32c(key + struct.pack(">I", crc))) + bytes(data))
    finally:
        env.close()
    return original


def _restart(cluster: LocalCluster, admin: AdminClient, bookie_id: str) -> None:
    cluster.bookie(bookie_id).start()
    wait_for(f"{bookie_id} registered", lambda: bookie_id in {b["id"] for b in admin.get("bookies")}, timeout=30)


def _direct_read(cluster: LocalCluster, admin: AdminClient, bookie_id: str, ledger_id: int, entry_id: int) -> Any:
    address = {b["id"]: (b["host"], b["port"]) for b in admin.get("bookies")}[bookie_id]

    async def go() -> Any:
        async with TcpBookieClient(bookie_id, *address) as client:
            return await client.read_entry(ledger_id, entry_id)

    return asyncio.run(go())


def test_damaged_copy_is_detected_and_read_from_another_replica(
    spark: Any, jobs_cluster: LocalCluster, admin: AdminClient
) -> None:
    cluster = jobs_cluster
    topic = f"persistent://{NS}/damaged"
    sent = produce(cluster.service_url, topic, 30, batched=False)
    ledger = admin.internal_stats(topic, metadata=True)["ledgers"][-1]
    lid, md = ledger["ledgerId"], ledger["metadata"]
    ensemble = md["ensembles"][0]["bookies"]
    replicas = {e: [ensemble[s] for s in write_set(e, md["ensembleSize"], md["writeQuorumSize"])] for e in (5, 8)}
    assert replicas[5] == replicas[8]
    first, second = replicas[5]  # the reader tries ``first`` first: that copy is damaged
    third = next(b for b in ensemble if b not in (first, second))

    # Stopped cleanly, so that its journal is all in LMDB (a kill -9 could leave the entries in the
    # journal only, and the restart's replay would write them back over the edit).
    cluster.bookie(first).stop()
    originals = {
        5: _edit_entry(cluster, first, lid, 5, fix_crc=False),  # the bookie's own CRC catches it
        8: _edit_entry(cluster, first, lid, 8, fix_crc=True),  # only the payload's CRC does
    }
    _restart(cluster, admin, first)
    with pytest.raises(ChecksumError):
        _direct_read(cluster, admin, first, lid, 5)
    bad = _direct_read(cluster, admin, first, lid, 8)
    assert crc32c(bad.data) == bad.crc and bad.data != originals[8]
    meta, payload = decode_entry(bad.data)
    assert crc32c(payload) != meta["crc"]

    url = cluster.admin_urls[0]
    rows = load(spark, url, topic=topic).collect()
    check_rows_match(rows, sent)
    by_entry = {r.entry_id: bytes(r.payload) for r in rows if r.ledger_id == lid}
    for e in originals:
        assert by_entry[e] == sent.messages[(lid, e, -1)][0]  # the good copy's payload, not the damaged one

    # A bookie down: every entry still has a good copy elsewhere.
    cluster.bookie(third).kill9()
    try:
        check_rows_match(load(spark, url, topic=topic).collect(), sent)
    finally:
        _restart(cluster, admin, third)

    # No good copy left of entries 5 and 8 (one damaged, the other bookie down): the job fails
    # and says which entry.
    cluster.bookie(second).kill9()
    try:
        with pytest.raises(Exception, match=rf"ledger {lid} entry [58]: no replica has a good copy"):
            load(spark, url, topic=topic).collect()
    finally:
        _restart(cluster, admin, second)
