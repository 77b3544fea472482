#!/usr/bin/env python3
"""Retention sweep benchmark: a dry-run sweep of --topics topics on local Spark, as medians.

One ``magnetar standalone`` (ledgers of 2 entries, the retention check off) gets --topics topics in
--namespaces namespaces with a one-hour time retention, each with a subscription and 5 messages of
which 3 are acknowledged (so every topic has three ledgers, the first one consumed), all made over
one client with many producers at once. Then, on one ``local[2]`` Spark session, each run measures:
  - ``seconds``: ``retention_sweep`` (dry run, evaluated two hours ahead so that every topic has a
    removable ledger), report written to Parquet; what a user waits for;
  - where that goes: ``list_seconds`` (driver: tenants, namespaces, topics and namespace policies
    through the admin API), ``fan_out_seconds`` (the Spark job: per topic internal stats and two
    topic-policy reads, then the rule), ``report_seconds`` (Parquet and summary);
  - ``admin_calls_seconds``: the same per-topic admin calls and rule, without Spark, from one
    thread on the driver, for comparison.
The first run also pays for starting the Python workers. The figure is the median over --runs runs.

Usage: scripts/benchmark_sweep.py [--runs 3] [--topics 1000] [--namespaces 4] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import Service, admin, each_run, report

from magnetar.client import aio
from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.retention_sweep import _fan_out, namespaces_to_sweep, retention_sweep, work_items, write_report
from magnetar.jobs.session import local_session
from magnetar.jobs.sweep_rules import TopicVerdict, sweep_topic

AHEAD = 7200.0


async def fill(url: str, topics: list[str], concurrency: int = 64) -> None:
    """Every topic: a subscription, 5 messages, 3 acknowledged; ``concurrency`` topics at a time."""
    gate = asyncio.Semaphore(concurrency)
    async with aio.Client(url) as client:

        async def one(topic: str) -> None:
            async with gate:
                consumer = await client.subscribe(topic, "s")
                producer = await client.create_producer(topic, batching_enabled=False)
                for i in range(5):
                    await producer.send(f"m{i}".encode())
                for _ in range(3):
                    await consumer.acknowledge(await consumer.receive())
                await producer.close()
                await consumer.close()

        await asyncio.gather(*(one(t) for t in topics))


def one_run(spark: Any, url: str, work_dir: Path, r: int) -> dict[str, Any]:
    now = time.time() + AHEAD
    t0 = time.monotonic()
    result = retention_sweep(spark, url, dry_run=True, report=str(work_dir / f"report-{r}"), now=now)
    seconds = time.monotonic() - t0
    if result.errors:
        raise SystemExit(f"sweep errors: {result.errors[:3]}")
    adm = AdminClient(url)
    t0 = time.monotonic()
    items = work_items(adm, namespaces_to_sweep(adm, None, None))
    list_s = time.monotonic() - t0
    t0 = time.monotonic()
    verdicts: list[TopicVerdict] = _fan_out(spark, functools.partial(sweep_topic, url, now), items)
    fan_s = time.monotonic() - t0
    rows = [row for v in verdicts for row in v.rows]
    t0 = time.monotonic()
    write_report(spark, str(work_dir / f"report-b{r}"), rows, "benchmark\n")
    report_s = time.monotonic() - t0
    t0 = time.monotonic()
    for item in items:
        sweep_topic(url, now, item)
    calls_s = time.monotonic() - t0
    return {
        "seconds": seconds,
        "topics": result.topics,
        "ledgers": result.ledgers,
        "list_seconds": list_s,
        "fan_out_seconds": fan_s,
        "report_seconds": report_s,
        "admin_calls_seconds": calls_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--namespaces", type=int, default=4)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        argv = ["standalone", "--data-dir", f"{d}/data", "--port", "0", "--web-port", "0", "--bookie-port", "0"]
        argv += [
            "--managed-ledger-max-entries-per-ledger",
            "2",
            "--managed-ledger-min-ledger-rollover-time-minutes",
            "0",
        ]
        argv += ["--retention-check-interval-seconds", "3600"]
        with Service(argv, "standalone ready") as svc:
            names = [f"public/sweep{i}" for i in range(args.namespaces)]
            for ns in names:
                admin(svc, "PUT", f"/admin/v2/namespaces/{ns}")
                retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
                admin(svc, "POST", f"/admin/v2/namespaces/{ns}/retention", retention)
            topics = [f"persistent://{names[i % len(names)]}/t{i}" for i in range(args.topics)]
            t0 = time.monotonic()
            asyncio.run(fill(svc.url, topics))
            print(f"{len(topics)} topics filled in {time.monotonic() - t0:.1f}s", flush=True)
            spark = local_session("magnetar-benchmark-sweep", master="local[2]", warehouse=f"{d}/warehouse")
            try:
                runs = each_run(args.runs, lambda r: one_run(spark, svc.admin, Path(d), r))
            finally:
                spark.stop()
    summary: dict[str, Any] = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    summary.update({"runs": args.runs, "namespaces": args.namespaces})
    report(runs, summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
