"""``spark.readStream.format("magnetar")`` on local Spark against a real standalone.

Shown here: a query landing a partitioned topic in Parquet while a producer writes 200,000 messages,
its driver killed with SIGKILL twice and restarted from the checkpoint, ends with exactly the
acknowledged messages (none lost, none twice; in a namespace with no retention, so only the query's
subscription keeps what it has not read); partitions added to a partitioned topic and a topic
created in a namespace while a query runs are read; a retention sweep while a query lags removes
only what the query committed; ``failOnDataLoss`` fails with the range that is gone, or skips it
and reads the rest; ``startingOffsets`` latest and JSON, and ``maxEntriesPerTrigger`` bounding
every micro-batch.

The standalone rolls its ledgers every 100 entries, so topics span many ledgers and retention has
closed ledgers to remove. Queries in this process run in the session's Spark; the one that is
killed runs in a driver of its own (``tests/support/streaming.py``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from tests.support.standalone import StandaloneProcess, run_standalone
from tests.support.streaming import StreamDriver

from magnetar.client import aio
from magnetar.jobs.admin_client import AdminClient, topic_path
from magnetar.jobs.source import SCHEMA, RangePartition
from magnetar.jobs.stream_offsets import DataLossError
from magnetar.jobs.stream_reader import MagnetarStreamReader
from magnetar.jobs.topic_plan import parse_position, plan_reads

pytestmark = pytest.mark.spark

PER_LEDGER = 100
FOREVER = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
NONE = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
Id = tuple[str, int, int, int]  # partition topic, ledger, entry, batch index
COLUMNS = ["topic", "ledger_id", "entry_id", "batch_index", "payload"]


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(
        tmp_path_factory.mktemp("stream-source"),
        "--managed-ledger-max-entries-per-ledger",
        str(PER_LEDGER),
        "--managed-ledger-min-ledger-rollover-time-minutes",
        "0",
    ) as node:
        yield node


@pytest.fixture(scope="module")
def admin(sa: StandaloneProcess) -> AdminClient:
    return AdminClient(sa.admin_url)


def namespace(admin: AdminClient, name: str, retention: dict[str, int]) -> str:
    admin.put(f"namespaces/public/{name}")
    admin.post(f"namespaces/public/{name}/retention", retention)
    return f"public/{name}"


async def _produce(
    url: str,
    topic: str,
    payloads: list[bytes],
    *,
    batched: bool = False,
    gates: dict[int, threading.Event] | None = None,
) -> dict[Id, bytes]:
    """Publish ``payloads`` to ``topic``; the acknowledged message ids. Before message ``i`` in
    ``gates``, wait for its event (the test's hold on a producer that must not run ahead)."""
    acked: dict[Id, bytes] = {}
    async with aio.Client(url) as client:
        producer = await client.create_producer(
            topic, batching_enabled=batched, batching_max_messages=50, max_pending_messages=5000
        )
        pending: list[tuple[Any, bytes]] = []
        for i, payload in enumerate(payloads):
            gate = (gates or {}).get(i)
            if gate is not None:
                await asyncio.to_thread(gate.wait)
            pending.append((await producer.send_async(payload), payload))
            if len(pending) >= 2000:
                for fut, data in pending:
                    acked[_id(topic, await fut)] = data
                pending.clear()
        for fut, data in pending:
            acked[_id(topic, await fut)] = data
        await producer.close()
    return acked


def _id(topic: str, mid: Any) -> Id:
    """A message id with the partition topic spelled out, as the source's ``topic`` column has it."""
    name = topic if mid.partition() < 0 else f"{topic}-partition-{mid.partition()}"
    return (name, mid.ledger_id(), mid.entry_id(), mid.batch_index())


def produce(url: str, topic: str, payloads: list[bytes], **kw: Any) -> dict[Id, bytes]:
    return asyncio.run(_produce(url, topic, payloads, **kw))


def start(spark: Any, sa: StandaloneProcess, out: Path, checkpoint: Path, **options: Any) -> Any:
    """A query of this process landing its rows' ids and payloads in Parquet at ``out``."""
    reader = spark.readStream.format("magnetar").option("adminUrl", sa.admin_url)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return (
        reader.load()
        .select(*COLUMNS)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )


def landed(spark: Any, out: Path) -> list[tuple[Id, bytes]]:
    """What a file sink committed (read through its metadata log: files of a batch a killed
    driver left half-written are not part of the output)."""
    rows = spark.read.parquet(str(out)).collect()
    return [((r.topic, r.ledger_id, r.entry_id, r.batch_index), bytes(r.payload)) for r in rows]


def check_exact(rows: list[tuple[Id, bytes]], expected: dict[Id, bytes]) -> None:
    ids = [i for i, _ in rows]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} messages landed twice"
    got = dict(rows)
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    assert not missing and not extra, f"{len(missing)} missing (e.g. {sorted(missing)[:3]}), {len(extra)} unexpected"
    assert got == expected


def end_offset(query: Any) -> dict[str, Any]:
    """The source's offset at the end of the query's last micro-batch."""
    end = query.lastProgress["sources"][0]["endOffset"]
    return dict(json.loads(end) if isinstance(end, str) else end)


def cursor_of(admin: AdminClient, topic: str, subscription: str) -> tuple[int, int] | None:
    doc = admin.internal_stats(topic)["cursors"].get(subscription)
    return None if doc is None else parse_position(doc["markDeletePosition"])


# ------------------------------------------------------------------------------ killed driver


MESSAGES = 200_000


@pytest.mark.timeout(900)
def test_killed_driver_restarts_from_checkpoint_exactly(
    spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path
) -> None:
    """200,000 messages landed in Parquet while being written; the driver SIGKILLed twice mid-way."""
    ns = namespace(admin, "kill", NONE)  # no retention: only the query's subscription keeps what it has not read
    topic = f"persistent://{ns}/events"
    admin.put(f"{topic_path(topic)}/partitions", 2)
    out = tmp_path / "out"
    spec = {
        "options": {
            "adminUrl": sa.admin_url,
            "topic": topic,
            "startingOffsets": "earliest",
            "maxEntriesPerTrigger": 400,  # about 20,000 messages a micro-batch: many batches to land in
        },
        "columns": COLUMNS,
        "checkpoint": str(tmp_path / "checkpoint"),
        "output": str(out),
        "trigger_seconds": 0.5,
    }
    driver = StreamDriver(spec, tmp_path / "driver")
    acked: dict[Id, bytes] = {}
    gates = {MESSAGES * 35 // 100: threading.Event(), MESSAGES * 70 // 100: threading.Event()}
    payloads = [f"e-{i}".encode() for i in range(MESSAGES)]

    def write() -> None:
        acked.update(produce(sa.service_url, topic, payloads, batched=True, gates=gates))

    producer = threading.Thread(target=write, name="producer")
    try:
        driver.start()
        driver.wait_progress(lambda p: True, timeout=180)  # running, its subscription made
        producer.start()
        for gate in gates.values():
            driver.wait_progress(lambda p: p["numInputRows"] > 0, timeout=180)  # landing what is written
            killed_in = driver.wait_batch_in_flight()  # and the next micro-batch running: kill it mid-way
            driver.kill9()
            gate.set()  # the producer goes on while the driver is down and restarts
            driver.start()
            replayed = driver.wait_progress(lambda p: True, timeout=180)
            assert replayed["batchId"] == killed_in  # the restart ran the killed batch again, from its offsets
        producer.join(600)
        assert not producer.is_alive() and len(acked) == MESSAGES
        ends = {
            f"{topic}-partition-{n}": admin.internal_stats(f"{topic}-partition-{n}")["lastConfirmedEntry"]
            for n in range(2)
        }
        driver.wait_progress(
            lambda p: all(p["endOffset"]["positions"].get(t) == e for t, e in ends.items()), timeout=300
        )
    finally:
        for gate in gates.values():
            gate.set()
        driver.stop()
        if producer.ident is not None:
            producer.join(60)
    assert driver.starts == 3
    check_exact(landed(spark, out), acked)


# ------------------------------------------------------------------------------ startingOffsets, limits


def test_starting_offsets_latest_and_json_and_max_entries(
    spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path
) -> None:
    ns = namespace(admin, "start", FOREVER)
    topic = f"persistent://{ns}/t"
    before = produce(sa.service_url, topic, [f"old-{i}".encode() for i in range(300)])

    # latest: a new query reads only what is published after it started
    q = start(spark, sa, tmp_path / "latest", tmp_path / "ck-latest", topic=topic)
    try:
        q.processAllAvailable()
        after = produce(sa.service_url, topic, [f"new-{i}".encode() for i in range(20)])
        q.processAllAvailable()
    finally:
        q.stop()
    check_exact(landed(spark, tmp_path / "latest"), after)

    # JSON: after a given position (the 100th message), with at most 50 entries a micro-batch
    ordered = sorted(before)
    cut = ordered[99]
    q = start(
        spark,
        sa,
        tmp_path / "json",
        tmp_path / "ck-json",
        topic=topic,
        startingOffsets=json.dumps({topic: f"{cut[1]}:{cut[2]}"}),
        maxEntriesPerTrigger=50,
    )
    try:
        q.processAllAvailable()
        batches = [p["numInputRows"] for p in q.recentProgress]
    finally:
        q.stop()
    expected = {i: p for i, p in {**before, **after}.items() if i > cut}
    check_exact(landed(spark, tmp_path / "json"), expected)
    assert max(batches) == 50 and sum(batches) == len(expected) == 220
    assert len([n for n in batches if n]) == 5  # 220 entries, 50 at a time

    # Trigger.AvailableNow: everything there when it starts, within the limits, then the query ends
    q = (
        spark.readStream.format("magnetar")
        .option("adminUrl", sa.admin_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxEntriesPerTrigger", 100)
        .load()
        .select(*COLUMNS)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "now"))
        .option("checkpointLocation", str(tmp_path / "ck-now"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(120)
    check_exact(landed(spark, tmp_path / "now"), {**before, **after})
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [100, 100, 100, 20]


# ------------------------------------------------------------------------------ topics that appear


def test_partitions_added_and_topics_created_while_running(
    spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path
) -> None:
    ns = namespace(admin, "grow", FOREVER)
    part, first, later = f"persistent://{ns}/p", f"persistent://{ns}/t1", f"persistent://{ns}/t2"
    admin.put(f"{topic_path(part)}/partitions", 2)
    acked = produce(sa.service_url, part, [f"p-{i}".encode() for i in range(30)])
    acked_first = produce(sa.service_url, first, [f"t1-{i}".encode() for i in range(30)])
    by_ns = start(spark, sa, tmp_path / "ns", tmp_path / "ck-ns", namespace=ns, startingOffsets="earliest")
    by_topic = start(spark, sa, tmp_path / "topic", tmp_path / "ck-topic", topic=part, startingOffsets="earliest")
    pattern = f"persistent://{ns}/t[0-9]+"
    by_pattern = start(
        spark, sa, tmp_path / "re", tmp_path / "ck-re", topicsPattern=pattern, startingOffsets="earliest"
    )
    queries = (by_ns, by_topic, by_pattern)
    try:
        for q in queries:
            q.processAllAvailable()
        admin.post(f"{topic_path(part)}/partitions", 4)
        acked.update(produce(sa.service_url, part, [f"p2-{i}".encode() for i in range(40)]))
        acked_later = produce(sa.service_url, later, [f"t2-{i}".encode() for i in range(20)])
        for q in queries:
            q.processAllAvailable()
    finally:
        for q in queries:
            q.stop()
    assert {i[0] for i in acked} == {f"{part}-partition-{n}" for n in range(4)}  # the new partitions were written
    check_exact(landed(spark, tmp_path / "topic"), acked)
    check_exact(landed(spark, tmp_path / "ns"), {**acked, **acked_first, **acked_later})
    check_exact(landed(spark, tmp_path / "re"), {**acked_first, **acked_later})


# ------------------------------------------------------------------------------ retention and data loss


def test_retention_sweep_keeps_what_a_lagging_query_has_not_committed(
    spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path
) -> None:
    from magnetar.jobs.retention_sweep import retention_sweep

    ns = namespace(admin, "lag", FOREVER)
    topic = f"persistent://{ns}/t"
    out, ck = tmp_path / "out", tmp_path / "ck"
    opts = {"topic": topic, "startingOffsets": "earliest", "maxEntriesPerTrigger": 150}
    acked = produce(sa.service_url, topic, [f"m-{i}".encode() for i in range(2000)])  # 20 ledgers
    q = start(spark, sa, out, ck, **opts)
    try:
        wait_rows(q, 600)  # a few micro-batches of 150, then the query stops: it lags behind
    finally:
        q.stop()
    subscription = end_offset(q)["subscription"]
    cursor = cursor_of(admin, topic, subscription)
    sizes = {d["ledgerId"]: d["entries"] for d in admin.internal_stats(topic)["ledgers"]}
    assert cursor is not None and min(sizes) < cursor[0]  # what the query passed is there: infinite retention
    # The query is a consumer to the broker: its backlog is what it has not committed (one message an entry).
    done = sum(n for lid, n in sizes.items() if lid < cursor[0]) + cursor[1] + 1
    stats = admin.get(f"{topic_path(topic)}/stats")
    assert stats["subscriptions"][subscription]["msgBacklog"] == len(acked) - done > 0

    # No retention from now on, given while the topic is unloaded (a loaded one would be trimmed by
    # its broker at once): what goes, the sweep removes.
    admin.put(f"{topic_path(topic)}/unload")
    admin.post(f"namespaces/{ns}/retention", NONE)
    result = retention_sweep(spark, sa.admin_url, namespace=ns, dry_run=False)
    assert not result.errors
    left = {d["ledgerId"] for d in admin.internal_stats(topic)["ledgers"]}
    assert cursor_of(admin, topic, subscription) == cursor
    removed = set(sizes) - left
    unread = {lid for lid in sizes if lid > cursor[0] or (lid == cursor[0] and cursor[1] < sizes[lid] - 1)}
    assert removed == set(sizes) - unread  # the sweep removed every ledger the query had committed, no other
    assert {r.ledger_id for r in result.rows if r.topic == topic} == removed

    q = start(spark, sa, out, ck, **opts)  # the same query again: it finds all it had not read
    try:
        q.processAllAvailable()
        # All landed and nothing new: the subscription has caught up, not one micro-batch behind.
        stats = admin.get(f"{topic_path(topic)}/stats")
        assert stats["subscriptions"][subscription]["msgBacklog"] == 0
    finally:
        q.stop()
    check_exact(landed(spark, out), acked)


def wait_rows(query: Any, rows: int, timeout: float = 120.0) -> None:
    from tests.support.polling import wait_for

    wait_for(f"{rows} rows read", lambda: sum(p["numInputRows"] for p in query.recentProgress) >= rows, timeout)


def test_fail_on_data_loss_both_ways(spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path) -> None:
    ns = namespace(admin, "loss", NONE)
    topic = f"persistent://{ns}/t"
    sub = "lossy-query"
    out, ck = tmp_path / "out", tmp_path / "ck"
    opts = {"topic": topic, "startingOffsets": "earliest", "predefinedSubscription": sub}
    admin.put(topic_path(topic))
    q = start(spark, sa, out, ck, **opts)
    try:
        q.processAllAvailable()  # the query's subscription is made, before anything is published
    finally:
        q.stop()
    start_at = end_offset(q)["positions"][topic]
    first = produce(sa.service_url, topic, [f"a-{i}".encode() for i in range(1000)])
    planned = plan_reads(admin, [topic])  # a micro-batch planned now, its ranges read after the trim
    # Someone else moves the query's subscription to the end, and retention (0) removes the ledgers.
    admin.post(f"{topic_path(topic)}/subscription/{sub}/skip_all")
    admin.post(f"{topic_path(topic)}/trim")
    second = produce(sa.service_url, topic, [f"b-{i}".encode() for i in range(50)])
    left = [d["ledgerId"] for d in admin.internal_stats(topic)["ledgers"]]
    gone = parse_position(start_at)[0]
    assert gone not in left and left[0] > gone

    # A range planned before the trim and read after it: the bookies no longer have the ledger.
    planned_gone = RangePartition(next(r for r in planned.ranges if r.ledger_id == gone))
    strict = MagnetarStreamReader.create({"adminUrl": sa.admin_url, "topic": topic}, SCHEMA)
    with pytest.raises(DataLossError) as lost_read:
        list(strict.read(planned_gone))
    assert str(lost_read.value) == (
        f"topic {topic}: entries from {gone}:0 to {gone}:{PER_LEDGER - 1} are gone (ledger {gone} was deleted "
        "before the query read it). Set failOnDataLoss=false to skip what is gone and go on with the rest."
    )
    lenient = MagnetarStreamReader.create({"adminUrl": sa.admin_url, "topic": topic, "failOnDataLoss": "false"}, SCHEMA)
    assert list(lenient.read(planned_gone)) == []

    q = start(spark, sa, out, ck, **opts)
    with pytest.raises(StreamingQueryException) as failure:
        try:
            q.processAllAvailable()
        finally:
            q.stop()
    message = str(failure.value)
    assert (
        f"topic {topic}: entries from {gone}:0 up to before {left[0]}:0 are gone (ledger {gone} was trimmed while "
        f"the query's subscription {sub} was moved ahead of the query). Set failOnDataLoss=false to skip what is "
        "gone and go on with the rest."
    ) in message, message

    q = start(spark, sa, out, ck, **opts, failOnDataLoss="false")
    try:
        q.processAllAvailable()
        end = end_offset(q)
    finally:
        q.stop()
    assert end["lost"] == {topic: 1}
    kept = {i: p for i, p in {**first, **second}.items() if i[1] >= left[0]}
    assert second.keys() <= kept.keys() and len(kept) < len(first) + len(second)
    check_exact(landed(spark, out), kept)


def test_read_limits_are_shared_fairly_between_partitions() -> None:
    """Entry and byte limits spread over the topics with something to read (no Spark needed)."""
    from magnetar.jobs.stream_offsets import TopicState, admit

    def state(ledgers: list[tuple[int, int, int]]) -> TopicState:
        last = ledgers[-1]
        return TopicState.from_stats(
            {
                "ledgers": [{"ledgerId": lid, "entries": n, "size": size} for lid, n, size in ledgers],
                "lastConfirmedEntry": f"{last[0]}:{last[1] - 1}",
            }
        )

    states = {
        "a": state([(1, 100, 100_000), (5, 100, 100_000)]),  # 1,000 bytes an entry
        "b": state([(2, 10, 1_000)]),  # 100 bytes an entry, 10 entries only
        "c": state([(3, 1000, 10_000_000)]),  # 10,000 bytes an entry
    }
    starts = {"a": (1, 49), "b": (-1, -1), "c": (3, -1)}
    # 90 entries: b has 10, the 80 left are shared by a and c
    assert admit(states, starts, max_entries=90, max_bytes=None) == {"a": (1, 89), "b": (2, 9), "c": (3, 39)}
    assert admit(states, starts, max_entries=200, max_bytes=None) == {"a": (5, 44), "b": (2, 9), "c": (3, 94)}
    # 30,000 bytes: 10,000 each; b needs 1,000 of its share, a and c share the rest (14,500 each)
    assert admit(states, starts, max_entries=None, max_bytes=30_000) == {"a": (1, 63), "b": (2, 9), "c": (3, 0)}
    # both, the tighter one per topic; and a limit below one entry still reads one
    assert admit(states, starts, max_entries=3, max_bytes=1) == {"a": (1, 50), "b": (-1, -1), "c": (3, -1)}
    assert admit(states, starts, max_entries=None, max_bytes=None) == {"a": (5, 99), "b": (2, 9), "c": (3, 999)}
