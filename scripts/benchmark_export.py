#!/usr/bin/env python3
"""Export benchmark: the topic export on local Spark against a consumer reading the same topic.

Each run starts a fresh ``magnetar standalone``, publishes --messages messages of --size bytes
(batched, as the client batches by default), then measures, on that same topic:
  - ``export``: ``magnetar.jobs.export.export`` on ``local[--master]`` (default ``local[2]``: two
    executor threads), from planning to the committed cursor: the entries read straight from the
    bookie by the ``magnetar`` data source, written as Parquet to a temporary directory;
  - ``consumer``: a pulsar-client-style consumer (``import magnetar as pulsar``, Exclusive, from
    Earliest) that receives and acknowledges every message.
Figures: rows/s and MB/s of payload (messages x size) for both, the Parquet MB written, and the
export's speed as a ratio to the consumer's. The Spark session is started once (its start-up time
is printed apart, not counted in the rates). Medians over --runs runs.

The client batches up to 1,000 messages per entry, so 1M messages are about 1,000 entries:
--entries-per-partition (default 125) splits them into 8 Spark tasks for the 2 executor threads.

Usage: scripts/benchmark_export.py [--runs 3] [--messages 1000000] [--size 100] [--master local[2]]
       [--entries-per-partition 125] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import each_run, fresh_standalone, report

import magnetar as pulsar
from magnetar.client import aio


async def fill(url: str, topic: str, n: int, size: int) -> None:
    body = b"x" * size
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, max_pending_messages=20_000)
        receipts = []
        for _ in range(n):
            receipts.append(await producer.send_async(body))
            if len(receipts) >= 20_000:
                await asyncio.gather(*receipts)
                receipts.clear()
        await asyncio.gather(*receipts)
        await producer.close()


def consume_all(url: str, topic: str, n: int) -> float:
    """Seconds for a consumer to receive and acknowledge ``n`` messages from the earliest."""
    client = pulsar.Client(url)
    try:
        consumer = client.subscribe(topic, "bench-consumer", initial_position=pulsar.InitialPosition.Earliest)
        t0 = time.monotonic()
        for _ in range(n):
            consumer.acknowledge(consumer.receive(timeout_millis=60_000))
        seconds = time.monotonic() - t0
        consumer.close()
        return seconds
    finally:
        client.close()


def one_run(spark: Any, args: argparse.Namespace, r: int) -> dict[str, Any]:
    from magnetar.jobs.export import export

    mb = args.messages * args.size / 1e6
    with fresh_standalone() as svc, tempfile.TemporaryDirectory() as out:
        topic = f"persistent://public/default/bench-export-{r}"
        t0 = time.monotonic()
        asyncio.run(fill(svc.url, topic, args.messages, args.size))
        fill_s = time.monotonic() - t0
        t0 = time.monotonic()
        result = export(
            spark, svc.admin, topic=topic, target=out, name="bench", entries_per_partition=args.entries_per_partition
        )
        export_s = time.monotonic() - t0
        if result.rows != args.messages:
            raise SystemExit(f"the export wrote {result.rows} rows, not {args.messages}")
        consumer_s = consume_all(svc.url, topic, args.messages)
    return {
        "fill_seconds": fill_s,
        "export_seconds": export_s,
        "export_rows_per_s": args.messages / export_s,
        "export_mb_per_s": mb / export_s,
        "parquet_mb": result.bytes / 1e6,
        "consumer_seconds": consumer_s,
        "consumer_rows_per_s": args.messages / consumer_s,
        "consumer_mb_per_s": mb / consumer_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--entries-per-partition",
        type=int,
        default=125,
        help="entries per Spark task (batched: 1,000 messages per entry, so 1M messages make 8 tasks)",
    )
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    from magnetar.jobs.session import local_session
    from magnetar.jobs.source import enable_pushdown

    t0 = time.monotonic()
    spark = enable_pushdown(local_session("magnetar-benchmark-export", master=args.master))
    spark.sparkContext.setLogLevel("ERROR")
    start_s = time.monotonic() - t0
    try:
        runs = each_run(args.runs, lambda r: one_run(spark, args, r))
    finally:
        spark.stop()
    summary: dict[str, Any] = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    summary.update(
        {
            "messages": args.messages,
            "size": args.size,
            "master": args.master,
            "entries_per_partition": args.entries_per_partition,
            "runs": args.runs,
            "spark_start_seconds": start_s,
            "export_vs_consumer": summary["export_rows_per_s"] / summary["consumer_rows_per_s"],
        }
    )
    print()
    print(f"{'':24}{'rows/s':>12}{'MB/s':>10}{'seconds':>10}")
    for who in ("export", "consumer"):
        label = f"export ({args.master})" if who == "export" else "consumer (receive+ack)"
        print(
            f"{label:24}{summary[who + '_rows_per_s']:>12,.0f}{summary[who + '_mb_per_s']:>10.2f}"
            f"{summary[who + '_seconds']:>10.1f}"
        )
    print(f"export / consumer: {summary['export_vs_consumer']:.2f}x  (medians of {args.runs} runs)\n")
    report(runs, summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
