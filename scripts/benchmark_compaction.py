#!/usr/bin/env python3
"""Compaction benchmark: --messages keyed messages over --keys keys, compacted, as medians.

Each run starts a fresh ``magnetar standalone``, publishes --messages messages of 100 bytes
(batched, as the client batches by default; key ``key-{i % keys}``, so the last --keys messages
are the survivors), then triggers a compaction through the admin API and measures:
  - ``seconds``: from the trigger to the status SUCCESS (polled every 20 ms);
  - ``broker_ms``: the broker's own lastCompactionDurationTimeInMills;
  - ``compacted_entries``: entries of the compacted ledger (internalStats compactedLedger), and
    ``compacted_messages``: what a reader with is_read_compacted=True then reads (must be --keys);
  - ``read_seconds``: how long that reader took.
The figure is the median over --runs runs.

Usage: scripts/benchmark_compaction.py [--runs 3] [--messages 1000000] [--keys 10000] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import admin, each_run, fresh_standalone, report
from benchmark_consumption import send_keyed

from magnetar.client import aio


async def fill(url: str, topic: str, n: int, keys: int) -> None:
    async with aio.Client(url) as client:
        holder = await client.subscribe(topic, "holder", initial_position=aio.InitialPosition.Earliest)
        await holder.close()  # keeps every ledger until the compaction has read it
        producer = await client.create_producer(topic, max_pending_messages=20_000)
        await send_keyed(producer, n, keys)


async def read_compacted(url: str, topic: str) -> int:
    async with aio.Client(url) as client:
        reader = await client.create_reader(topic, aio.MessageId.earliest, is_read_compacted=True)
        count = 0
        while await reader.has_message_available():
            await reader.read_next(10_000)
            count += 1
        await reader.close()
        return count


def one_run(messages: int, keys: int, r: int) -> dict[str, Any]:
    with fresh_standalone() as svc:
        topic = f"persistent://public/default/bench-compaction-{r}"
        path = "/admin/v2/persistent/public/default/" + topic.rsplit("/", 1)[1]
        t0 = time.monotonic()
        asyncio.run(fill(svc.url, topic, messages, keys))
        fill_s = time.monotonic() - t0
        t0 = time.monotonic()
        admin(svc, "PUT", path + "/compaction", timeout=60)
        while (status := admin(svc, "GET", path + "/compaction", timeout=60))["status"] == "RUNNING":
            time.sleep(0.02)
        seconds = time.monotonic() - t0
        if status["status"] != "SUCCESS":
            raise SystemExit(f"compaction failed: {status}")
        stats = admin(svc, "GET", path + "/stats", timeout=60)
        internal = admin(svc, "GET", path + "/internalStats", timeout=60)
        t0 = time.monotonic()
        read = asyncio.run(read_compacted(svc.url, topic))
        return {
            "fill_seconds": fill_s,
            "topic_entries": internal["numberOfEntries"],
            "seconds": seconds,
            "broker_ms": stats["compaction"]["lastCompactionDurationTimeInMills"],
            "removed": stats["compaction"]["lastCompactionRemovedEventCount"],
            "compacted_entries": internal["compactedLedger"]["entries"],
            "compacted_messages": read,
            "read_seconds": time.monotonic() - t0,
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    runs = each_run(args.runs, lambda r: one_run(args.messages, args.keys, r))
    summary = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    summary.update({"messages": args.messages, "keys": args.keys, "runs": args.runs})
    report(runs, summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
