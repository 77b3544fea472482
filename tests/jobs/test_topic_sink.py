"""``df.write`` / ``df.writeStream.format("magnetar")`` on local Spark against a real standalone.

Shown here: a batch write of keyed rows with properties and event times to two topics (one of
them partitioned) reads back exactly, field by field; a micro-batch written again (its tasks run
twice, one of them cut short first, or the query restarted from a checkpoint whose commit was
lost) stores nothing twice; a streaming query whose driver is killed with SIGKILL twice and
restarted from its checkpoint leaves each row in the target topic exactly once (topic -> topic,
200,000 acknowledged messages); and the one-line refusals: a target
without deduplication (naming the command that turns it on), an unknown namespace, a missing or
mistyped column.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.standalone import StandaloneProcess, run_standalone
from tests.support.streaming import StreamDriver

import magnetar.client as pulsar
from magnetar.client import aio
from magnetar.client.producer.routing import partition_for_key
from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.sink_options import SinkOptions
from magnetar.jobs.topic_writer import producer_name, publish_task

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(tmp_path_factory.mktemp("topic-sink")) as node:
        yield node


@pytest.fixture(scope="module")
def admin(sa: StandaloneProcess) -> AdminClient:
    return AdminClient(sa.admin_url)


def namespace(admin: AdminClient, *, dedup: bool = True) -> str:
    name = f"public/sink-{uuid.uuid4().hex[:8]}"
    admin.put(f"namespaces/{name}")
    if dedup:
        admin.post(f"namespaces/{name}/deduplication", True)
    return name


def sink_options(sa: StandaloneProcess, topic: str | None = None, **more: Any) -> dict[str, str]:
    opts = {"serviceUrl": sa.service_url, "adminUrl": sa.admin_url, **{k: str(v) for k, v in more.items()}}
    if topic is not None:
        opts["topic"] = topic
    return opts


def write(df: Any, options: dict[str, str]) -> None:
    writer = df.write.format("magnetar").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def read_all(sa: StandaloneProcess, topic: str) -> list[Any]:
    """Every message of ``topic`` (each partition of a partitioned one), in order per partition."""
    client = pulsar.Client(sa.service_url)
    try:
        out = []
        for part in client.get_topic_partitions(topic):
            reader = client.create_reader(part, pulsar.MessageId.earliest)
            while reader.has_message_available():
                out.append(reader.read_next(10_000))
            reader.close()
        return out
    finally:
        client.close()


def payload_counts(spark: Any, sa: StandaloneProcess, topic: str) -> Counter[bytes]:
    """The payloads a topic holds, counted (the batch source: quicker than a consumer for many)."""
    rows = (
        spark.read.format("magnetar")
        .option("adminUrl", sa.admin_url)
        .option("topic", topic)
        .option("decodeSchema", "false")
        .load()
        .select("payload")
        .collect()
    )
    return Counter(bytes(r.payload) for r in rows)


def assert_exactly_once(got: Counter[bytes], expected: set[bytes]) -> None:
    twice = [p for p, n in got.items() if n > 1]
    missing = expected - set(got)
    extra = set(got) - expected
    assert not twice, f"{len(twice)} rows stored more than once, e.g. {twice[:3]}"
    assert not missing and not extra, f"{len(missing)} missing (e.g. {sorted(missing)[:3]}), {len(extra)} unexpected"


# ------------------------------------------------------------------------------ batch writes


def test_batch_write_publishes_every_field_to_the_row_topic(
    spark: Any, sa: StandaloneProcess, admin: AdminClient
) -> None:
    ns = namespace(admin)
    plain, parted = f"persistent://{ns}/plain", f"persistent://{ns}/parted"
    admin.put(f"persistent/{ns}/parted/partitions", 3)
    base = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
    rows = []
    for i in range(600):
        when = (base + datetime.timedelta(milliseconds=37 * i)).astimezone().replace(tzinfo=None)  # Spark's local time
        key = None if i % 10 == 0 else f"k{i % 17}"
        props = None if i % 7 == 0 else {"i": str(i), "kind": "even" if i % 2 == 0 else "odd"}
        rows.append((f"value-{i}".encode(), key, props, when, plain if i % 2 else parted))
    df = spark.createDataFrame(
        rows, "value binary, key string, properties map<string,string>, event_time timestamp, topic string"
    ).repartition(3)
    write(df, sink_options(sa))

    expected = {
        r[0]: (r[1], r[2] or {}, int((base + datetime.timedelta(milliseconds=37 * i)).timestamp() * 1000), r[4])
        for i, r in enumerate(rows)
    }
    got: dict[bytes, tuple[Any, ...]] = {}
    for topic in (plain, parted):
        for msg in read_all(sa, topic):
            assert msg.data() not in got, f"{msg.data()!r} stored twice"
            got[msg.data()] = (msg.partition_key() or None, msg.properties(), msg.event_timestamp(), topic)
            if topic == parted and msg.partition_key():
                assert msg.topic_name().endswith(f"-partition-{partition_for_key(msg.partition_key(), 3)}")
    assert got == expected


def test_batch_write_with_a_writer_id_run_twice_stores_once(
    spark: Any, sa: StandaloneProcess, admin: AdminClient
) -> None:
    topic = f"persistent://{namespace(admin)}/again"
    df = spark.createDataFrame([(f"row-{i}", i) for i in range(300)], "value string, event_time long").repartition(2)
    write(df, sink_options(sa, topic, writerId="nightly-2026-03-01"))
    write(df, sink_options(sa, topic, writerId="nightly-2026-03-01"))
    msgs = read_all(sa, topic)
    assert sorted(m.data() for m in msgs) == sorted(f"row-{i}".encode() for i in range(300))
    assert sorted(m.event_timestamp() for m in msgs) == list(range(300))  # 0: none, as Pulsar's
    write(df, sink_options(sa, topic))  # no writerId: a new write, published again
    assert len(read_all(sa, topic)) == 600


def _failure(df: Any, options: dict[str, str]) -> str:
    with pytest.raises(Exception) as info:
        write(df, options)
    return str(info.value)


def test_refusals_are_one_line_naming_the_fix(spark: Any, sa: StandaloneProcess, admin: AdminClient) -> None:
    no_dedup = namespace(admin, dedup=False)
    df = spark.createDataFrame([("a", 1)], "value string, n int")
    text = _failure(df, sink_options(sa, f"persistent://{no_dedup}/t"))
    assert f"magnetar-admin namespaces set-deduplication {no_dedup} --enable" in text
    assert "deduplication=enable" in text
    text = _failure(df, sink_options(sa, "persistent://public/no-such-namespace/t"))
    assert "namespace public/no-such-namespace does not exist" in text
    text = _failure(spark.createDataFrame([(1,)], "n int"), sink_options(sa, f"persistent://{no_dedup}/t"))
    assert "needs a column value (or payload); the columns are n" in text
    text = _failure(spark.createDataFrame([(1,)], "value int"), sink_options(sa, f"persistent://{no_dedup}/t"))
    assert "column value must be binary or string" in text
    bad_key = spark.createDataFrame([("a", 1)], "value string, key int")
    assert "column key must be a string, not int" in _failure(bad_key, sink_options(sa, "t"))
    assert "needs the option topic or a column topic" in _failure(df, sink_options(sa))
    # deduplication=enable turns it on, then the write goes through
    write(df.select("value"), sink_options(sa, f"persistent://{no_dedup}/t", deduplication="enable"))
    assert admin.get(f"namespaces/{no_dedup}/deduplication") is True
    assert [m.data() for m in read_all(sa, f"persistent://{no_dedup}/t")] == [b"a"]


def test_typed_values_are_published_under_the_schema(spark: Any, sa: StandaloneProcess, admin: AdminClient) -> None:
    topic = f"persistent://{namespace(admin)}/typed"
    definition = {
        "type": "record",
        "name": "Reading",
        "fields": [{"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"}],
    }
    df = spark.createDataFrame(
        [((f"s{i}", i / 4),) for i in range(20)], "value struct<sensor: string, celsius: double>"
    )
    write(df, sink_options(sa, topic, valueSchema=json.dumps(definition)))
    back = (
        spark.read.format("magnetar")
        .option("adminUrl", sa.admin_url)
        .option("topic", topic)
        .load()
        .select("value.sensor", "value.celsius")
        .collect()
    )
    assert sorted((r.sensor, r.celsius) for r in back) == sorted((f"s{i}", i / 4) for i in range(20))


# ------------------------------------------------------------------------------ a micro-batch written again


def test_a_micro_batch_written_again_stores_nothing_twice(sa: StandaloneProcess, admin: AdminClient) -> None:
    """Tasks of batch 7 run again after the first attempt of one stopped half-way: as Spark reruns
    a failed task or a whole batch after a restart, with the same rows in the same order."""
    ns = namespace(admin)
    topic = f"persistent://{ns}/replayed"
    admin.put(f"persistent/{ns}/replayed/partitions", 2)
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("value", StringType()), StructField("key", StringType())])
    options = SinkOptions.parse(sink_options(sa, topic, writerId="query-a"), schema)
    tasks = {p: [(f"b7-p{p}-r{i}", f"k{i % 5}" if i % 3 else None) for i in range(400)] for p in (0, 1)}

    first = publish_task(options, iter(tasks[0][:150]), partition=0, batch_id=7)  # the attempt that died
    assert (first.sent, first.skipped) == (150, 0)
    again = [publish_task(options, iter(rows), partition=p, batch_id=7) for p, rows in tasks.items()]
    assert (again[0].sent, again[0].skipped) == (250, 150)
    replay = [publish_task(options, iter(rows), partition=p, batch_id=7) for p, rows in tasks.items()]
    assert [(r.sent, r.skipped) for r in replay] == [(0, 400), (0, 400)]
    nxt = publish_task(options, iter([("b8", None)]), partition=0, batch_id=8)
    assert nxt.sent == 1

    stored = read_all(sa, topic)
    assert Counter(m.data() for m in stored) == Counter(
        [v.encode() for rows in tasks.values() for v, _ in rows] + [b"b8"]
    )
    assert {m.producer_name() for m in stored} <= {producer_name("query-a", 0), producer_name("query-a", 1)}


def test_a_query_restarted_from_a_lost_commit_writes_its_last_batch_once(
    spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path
) -> None:
    topic = f"persistent://{namespace(admin)}/lost-commit"
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    expected = set()
    for f in range(4):
        lines = [f"file{f}-line{i}" for i in range(250)]
        expected |= {line.encode() for line in lines}
        (source / f"f{f}.txt").write_text("\n".join(lines) + "\n")

    def run() -> None:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .writeStream.format("magnetar")
            .option("checkpointLocation", str(checkpoint))
            .options(**sink_options(sa, topic))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    run()
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert [p.name for p in commits] == ["0", "1", "2", "3"]
    # the driver died after the sink wrote batch 3, before recording it (the file and its checksum)
    commits[-1].unlink()
    (checkpoint / "commits" / ".3.crc").unlink(missing_ok=True)
    run()
    assert (checkpoint / "commits" / "3").exists()
    assert_exactly_once(payload_counts(spark, sa, topic), expected)


# ------------------------------------------------------------------------------ drivers killed with SIGKILL


def _kill_twice_and_finish(
    driver: StreamDriver, kill_after: int, *, killed: Any = None, before_last: Any = None
) -> None:
    """Run the driver and SIGKILL it once ``kill_after`` micro-batches of that run read rows, twice
    (calling ``killed(n)`` after kill ``n``); then, after ``before_last()``, run it until it stops,
    having read nothing for a while."""

    def far_enough(_: dict[str, Any]) -> bool:
        return sum(1 for p in driver.progress if p["numInputRows"] > 0) >= kill_after

    for n in range(2):
        driver.start()
        driver.wait_line("STARTED", timeout=180)
        driver.wait_progress(far_enough, timeout=300)
        driver.kill9()
        if killed is not None:
            killed(n)
    if before_last is not None:
        before_last()
    driver.start()
    try:
        driver.wait_line("STOPPED", timeout=900)
    finally:
        driver.stop()
    assert driver.starts == 3


async def _produce(url: str, topic: str, count: int, gates: dict[int, threading.Event]) -> set[bytes]:
    """Publish ``count`` messages; before message ``i`` in ``gates``, wait for its event."""
    acked: set[bytes] = set()
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, batching_max_messages=200, max_pending_messages=5000)
        pending: list[tuple[Any, bytes]] = []
        for i in range(count):
            if i in gates:
                await asyncio.to_thread(gates[i].wait, 600)
            payload = f"msg-{i:06d}".encode()
            pending.append((await producer.send_async(payload), payload))
            if len(pending) >= 2000 or i == count - 1:
                for fut, data in pending:
                    await fut
                    acked.add(data)
                pending.clear()
        await producer.close()
    return acked


@pytest.mark.timeout(1800)
def test_topic_to_topic_exactly_once_across_two_driver_kills(
    spark: Any, sa: StandaloneProcess, admin: AdminClient, tmp_path: Path
) -> None:
    """The issue's proof: 200,000 messages acknowledged on the input topic while the query runs;
    its driver killed twice mid-way; the output topic holds exactly the input's messages."""
    ns = namespace(admin)
    source, target = f"persistent://{ns}/input", f"persistent://{ns}/output"
    admin.put(f"persistent/{ns}/input/partitions", 2)
    admin.put(f"persistent/{ns}/output/partitions", 2)
    # a third of the messages before each run: both kills land while the producer is still writing
    gates = {70_000: threading.Event(), 140_000: threading.Event()}
    acked: list[set[bytes]] = []
    producing = threading.Thread(
        target=lambda: acked.append(asyncio.run(_produce(sa.service_url, source, 200_000, gates))), daemon=True
    )
    driver = StreamDriver(
        {
            "options": {
                "adminUrl": sa.admin_url,
                "topic": source,
                "startingOffsets": "earliest",
                "maxEntriesPerTrigger": 50,
            },
            "columns": ["payload", "key", "properties", "event_time"],
            "format": "magnetar",
            "sink_options": sink_options(sa, target),
            "checkpoint": str(tmp_path / "checkpoint"),
            "trigger_seconds": 0.2,
            "stop_after_idle_batches": 1,
        },
        tmp_path / "driver",
    )
    producing.start()
    try:
        _kill_twice_and_finish(
            driver, 3, killed=lambda n: list(gates.values())[n].set(), before_last=lambda: producing.join(600)
        )
    finally:
        for gate in gates.values():
            gate.set()
        producing.join(600)
    assert acked and len(acked[0]) == 200_000
    assert_exactly_once(payload_counts(spark, sa, target), acked[0])
