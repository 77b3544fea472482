#!/usr/bin/env python3
"""Streaming benchmark: Structured Streaming queries on local Spark, next to the batch export.

Each run starts a fresh ``magnetar standalone``, publishes --messages messages of --size bytes
(batched, as the client batches by default: about 1,000 per entry), then measures, in one Spark
session on ``--master`` (default ``local[2]``):
  - ``export``: the batch export of that topic (``magnetar.jobs.export.export``), as
    scripts/benchmark_export.py measures it: the base of the ratios;
  - ``parquet``: ``spark.readStream.format("magnetar")`` of the same topic into Spark's Parquet
    file sink, --entries-per-trigger entries per micro-batch (so the backlog goes through many
    micro-batches, each planned, read, written and committed);
  - ``topic``: the same source into ``writeStream.format("magnetar")``, the exactly-once sink, to a
    second topic with deduplication on.
Sustained rows/s of a query = its rows / (end of its last micro-batch with rows - start of its
first), from Spark's own progress reports: the query's start-up is left out, as the export's
session start is.

Then the end-to-end latency at 1-second triggers (``trigger(processingTime="1 second")``), for both
sinks: a producer publishes --rate msg/s for --latency-seconds into a topic a running query reads,
each payload carrying its send time; a message is visible when, for Parquet, a file the file
sink's log (``_spark_metadata``) lists holds it (the log is polled every 20 ms), and for topic to
topic, when a consumer of the output topic receives it. p50 and p99 over all the messages.

Medians over --runs runs; --quick is one small run of everything (a smoke test).

Usage: scripts/benchmark_streaming.py [--runs 3] [--messages 200000] [--size 100] [--master local[2]]
       [--entries-per-trigger 20] [--entries-per-partition 10] [--rate 1000] [--latency-seconds 20]
       [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import RatioRow, Service, admin, each_run, fresh_standalone, ratio_summary, ratio_table, report
from benchmark_export import fill

import magnetar as pulsar

NAMESPACE = "public/default"
ROWS: list[RatioRow] = [
    ("export_rows_per_s", "batch export (the base)", None),
    ("parquet_rows_per_s", "stream: topic -> Parquet", "export_rows_per_s"),
    ("topic_rows_per_s", "stream: topic -> topic (exactly once)", "export_rows_per_s"),
]
LATENCIES = ("parquet_p50_ms", "parquet_p99_ms", "topic_p50_ms", "topic_p99_ms")


def with_dedup(svc: Service, topic: str) -> str:
    """Create ``topic`` with deduplication on (what the sink's exactly-once needs)."""
    local = topic.removeprefix("persistent://")
    admin(svc, "PUT", f"/admin/v2/persistent/{local}")
    admin(svc, "POST", f"/admin/v2/persistent/{local}/deduplicationEnabled", True)
    return topic


def stream(spark: Any, svc: Service, topic: str, **options: Any) -> Any:
    """The magnetar streaming source on ``topic``, from its earliest entry."""
    reader = spark.readStream.format("magnetar").option("adminUrl", svc.admin).option("topic", topic)
    reader = reader.option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start_sink(frame: Any, svc: Service, sink: str, target: str, checkpoint: str, trigger: dict[str, Any]) -> Any:
    """Start ``frame`` into Parquet at ``target`` (a folder) or into the topic ``target``."""
    if sink == "parquet":
        writer = frame.writeStream.format("parquet").option("path", target)
    else:
        writer = (
            frame.select("payload", "key", "properties", "event_time")
            .writeStream.format("magnetar")
            .option("serviceUrl", svc.url)
            .option("adminUrl", svc.admin)
            .option("topic", target)
        )
    return writer.option("checkpointLocation", checkpoint).trigger(**trigger).start()


def _instant(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_rows(query: Any, rows: int, timeout: float) -> list[dict[str, Any]]:
    """Poll the query's progress until ``rows`` input rows went through; its batches with rows."""
    seen: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while sum(p["numInputRows"] for p in seen.values()) < rows:
        if not query.isActive:
            raise SystemExit(f"the query stopped: {query.exception()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{sum(p['numInputRows'] for p in seen.values())} of {rows} rows after {timeout} s")
        query.awaitTermination(0.1)
        for p in query.recentProgress:
            if p["numInputRows"] > 0:
                seen[p["batchId"]] = json.loads(p.json)
    return [seen[b] for b in sorted(seen)]


def sustained(batches: list[dict[str, Any]]) -> float:
    """Rows per second from the start of the first batch to the end of the last one."""
    start = _instant(batches[0]["timestamp"])
    end = _instant(batches[-1]["timestamp"]) + batches[-1]["durationMs"]["triggerExecution"] / 1000
    rows: int = sum(b["numInputRows"] for b in batches)
    return rows / float(end - start)


def throughput(spark: Any, svc: Service, args: argparse.Namespace, topic: str, sink: str, work: Path) -> float:
    target = str(work / "parquet") if sink == "parquet" else with_dedup(svc, f"{topic}-copy")
    frame = stream(
        spark,
        svc,
        topic,
        maxEntriesPerTrigger=args.entries_per_trigger,
        entriesPerPartition=args.entries_per_partition,
        subscriptionPrefix=f"bench-{sink}",
    )
    query = start_sink(frame, svc, sink, target, str(work / f"checkpoint-{sink}"), {"processingTime": "0 seconds"})
    try:
        batches = wait_rows(query, args.messages, timeout=1800)
    finally:
        query.stop()
    if sink == "parquet":
        landed = spark.read.parquet(target).count()
    else:
        landed = admin(svc, "GET", f"/admin/v2/persistent/{target.removeprefix('persistent://')}/stats")["msgInCounter"]
    if landed != args.messages:
        raise SystemExit(f"the {sink} query landed {landed} rows, not {args.messages}")
    return sustained(batches)


# ---------------------------------------------------------------------------------------- latency


class CommittedFiles:
    """The files a Spark file sink's log (``<path>/_spark_metadata``) lists: the rows readers see."""

    def __init__(self, path: Path) -> None:
        self.log = path / "_spark_metadata"
        self.read_logs: set[str] = set()
        self.files: set[str] = set()

    def new(self) -> list[str]:
        """Files committed since the last call."""
        found: list[str] = []
        if not self.log.is_dir():
            return found
        for entry in sorted(self.log.iterdir()):
            if entry.name in self.read_logs or entry.name.startswith(".") or entry.name.endswith(".tmp"):
                continue
            lines = entry.read_text().splitlines()
            if not lines or lines[0] != "v1":
                continue  # not written completely yet (the sink renames a finished log file into place)
            self.read_logs.add(entry.name)
            for line in lines[1:]:
                doc = json.loads(line)
                if doc.get("action", "add") == "add" and doc["path"] not in self.files:
                    self.files.add(doc["path"])
                    found.append(doc["path"].removeprefix("file:"))
        return found


def publish_paced(url: str, topic: str, rate: float, seconds: float) -> int:
    """``rate`` msg/s for ``seconds``, each payload ``"<i> <time.time()>"``; the messages the
    broker acknowledged (a send that failed is not expected to become visible)."""
    acked: list[int] = []
    client = pulsar.Client(url)
    try:
        producer = client.create_producer(topic, block_if_queue_full=True)
        n = int(rate * seconds)
        t0 = time.monotonic()
        for i in range(n):
            pause = t0 + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # pacing the producer (a benchmark's load, not a wait on an event)
            producer.send_async(
                f"{i} {time.time():.6f}".encode(),
                lambda result, _id: acked.append(1) if result == pulsar.Result.Ok else None,
            )
        producer.flush()
        if len(acked) != n:
            raise SystemExit(f"{n - len(acked)} of {n} sends failed")
        return n
    finally:
        client.close()


def _sent_at(payload: bytes) -> float:
    return float(payload.split(b" ")[1])


def latency(spark: Any, svc: Service, args: argparse.Namespace, sink: str, work: Path) -> tuple[float, float]:
    """p50 and p99 (ms) of publish to visible at 1-second triggers."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

    topic = f"persistent://{NAMESPACE}/bench-latency-{sink}"
    out = work / "latency-parquet"
    target = str(out) if sink == "parquet" else with_dedup(svc, f"{topic}-copy")
    delays: list[float] = []
    done = threading.Event()
    expected = int(args.rate * args.latency_seconds)
    client = pulsar.Client(svc.url)
    try:
        consumer = client.subscribe(target, "bench") if sink == "topic" else None
        client.create_producer(topic).close()  # the topic exists before the query resolves it
        query = start_sink(
            stream(spark, svc, topic),
            svc,
            sink,
            target,
            str(work / f"lat-checkpoint-{sink}"),
            {"processingTime": "1 second"},
        )

        def watch() -> None:
            files = CommittedFiles(out)
            while len(delays) < expected and not done.is_set():
                if consumer is not None:
                    try:
                        msg = consumer.receive(timeout_millis=200)
                    except pulsar.Timeout:
                        continue
                    delays.append(time.time() - _sent_at(msg.data()))
                    consumer.acknowledge(msg)
                    continue
                for path in files.new():
                    seen = time.time()
                    for payload in pq.read_table(path, columns=["payload"]).column("payload").to_pylist():
                        delays.append(seen - _sent_at(payload))
                done.wait(0.02)  # the log's polling period

        try:
            while not query.recentProgress:  # the query has planned and run its first trigger
                if not query.isActive:
                    raise SystemExit(f"the query stopped: {query.exception()}")
                query.awaitTermination(0.1)
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            sent = publish_paced(svc.url, topic, args.rate, args.latency_seconds)
            watcher.join(120)
        finally:
            done.set()
            query.stop()
    finally:
        client.close()
    if len(delays) != sent:
        through_spark = f" (Spark reads {spark.read.parquet(str(out)).count()} rows there)" if sink == "parquet" else ""
        raise SystemExit(f"{len(delays)} of {sent} messages became visible through the {sink} query{through_spark}")
    cuts = statistics.quantiles(delays, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


# ---------------------------------------------------------------------------------------- runs


def one_run(spark: Any, args: argparse.Namespace, r: int) -> dict[str, Any]:
    from magnetar.jobs.export import export

    with fresh_standalone() as svc, tempfile.TemporaryDirectory() as d:
        work = Path(d)
        topic = f"persistent://{NAMESPACE}/bench-stream-{r}"
        asyncio.run(fill(svc.url, topic, args.messages, args.size))
        if r == 0:  # the session's first job starts its Python workers: not the export's cost
            asyncio.run(fill(svc.url, f"{topic}-warm-up", 10, args.size))
            export(spark, svc.admin, topic=f"{topic}-warm-up", target=str(work / "warm-up"), name="warm-up")
        t0 = time.monotonic()
        result = export(
            spark,
            svc.admin,
            topic=topic,
            target=str(work / "export"),
            name="bench",
            entries_per_partition=args.entries_per_partition,
        )
        export_s = time.monotonic() - t0
        if result.rows != args.messages:
            raise SystemExit(f"the export wrote {result.rows} rows, not {args.messages}")
        row: dict[str, Any] = {"export_rows_per_s": args.messages / export_s}
        for sink in ("parquet", "topic"):
            row[f"{sink}_rows_per_s"] = throughput(spark, svc, args, topic, sink, work)
        for sink in ("parquet", "topic"):
            row[f"{sink}_p50_ms"], row[f"{sink}_p99_ms"] = latency(spark, svc, args, sink, work)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--entries-per-trigger",
        type=int,
        default=20,
        help="maxEntriesPerTrigger of the throughput queries (about 1,000 messages per entry: 200,000 make 10 batches)",
    )
    ap.add_argument(
        "--entries-per-partition", type=int, default=10, help="entries per Spark task, the export's too (2 per batch)"
    )
    ap.add_argument("--rate", type=float, default=1000.0, help="msg/s published during the latency runs")
    ap.add_argument("--latency-seconds", type=float, default=20.0, help="how long each latency run publishes")
    ap.add_argument("--quick", action="store_true", help="one small run of everything: a smoke test")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.messages, args.entries_per_trigger, args.entries_per_partition = 1, 20_000, 5, 3
        args.rate, args.latency_seconds = 200.0, 5.0

    from magnetar.jobs.session import local_session

    t0 = time.monotonic()
    spark = local_session("magnetar-benchmark-streaming", master=args.master)
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.monotonic() - t0
    try:
        runs = each_run(args.runs, lambda r: one_run(spark, args, r))
    finally:
        spark.stop()
    summary = ratio_summary(runs, ROWS)
    summary.update({key: statistics.median(run[key] for run in runs) for key in LATENCIES})
    summary.update(
        {
            "messages": args.messages,
            "size": args.size,
            "master": args.master,
            "entries_per_trigger": args.entries_per_trigger,
            "entries_per_partition": args.entries_per_partition,
            "latency_rate": args.rate,
            "latency_seconds": args.latency_seconds,
            "runs": args.runs,
            "spark_start_seconds": start_s,
        }
    )
    print()
    print(ratio_table(summary, ROWS).replace("median msg/s", "median rows/s"))

    def show(sink: str) -> str:
        return f"{summary[sink + '_p50_ms']:8.0f} ms p50 {summary[sink + '_p99_ms']:8.0f} ms p99"

    print(f"\npublish -> visible at 1 s triggers, {args.rate:g} msg/s (medians of {args.runs} runs):")
    print(f"  topic -> Parquet (file sink log) {show('parquet')}")
    print(f"  topic -> topic (consumer)        {show('topic')}\n")
    report(runs, summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
