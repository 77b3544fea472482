#!/usr/bin/env python3
"""Consumption benchmark: subscription types, nack redelivery and delayed delivery, as medians.

Each figure is the median over --runs runs, each against a fresh ``magnetar standalone``:
  1. drain throughput of a backlog of --messages keyed messages (100 bytes, --keys keys, key-based
     batching) by two consumers of one subscription, for Shared, Key_Shared and Failover; the
     Key_Shared and Failover figures are also given as ratios to Shared;
  2. nack redelivery throughput: one Shared consumer negatively acknowledges every message of a
     backlog once (``negative_ack_redelivery_delay_ms=1``) and acknowledges its redelivery;
     messages per second through that whole cycle, and as a ratio to a plain drain;
  3. delayed-delivery lateness: --delayed messages sent with ``deliver_after`` to a Shared
     subscription, spread 3-8 s ahead so that they are stored before they are due; p50/p99/max
     of (receipt - deliver-at), in ms, on the same clock, and how many were stored late anyway;
  4. with --pending N: N delayed messages (due in an hour) held by the broker's tracker; the
     standalone's heap (``RssAnon``) and total RSS once the subscription's ``msgDelayed`` reaches N.

Usage: scripts/benchmark_consumption.py [--runs 3] [--messages 200000] [--pending 10000000] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import Service, standalone

from magnetar.client import aio

SIZE = 100


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


async def send_keyed(producer: Any, n: int, keys: int) -> None:
    """Send ``n`` messages of SIZE bytes keyed ``key-{i % keys}``, waiting for the receipts every
    10,000 sends; then close ``producer``."""
    body = b"x" * SIZE
    receipts = []
    for i in range(n):
        receipts.append(await producer.send_async(body, partition_key=f"key-{i % keys}"))
        if len(receipts) >= 10_000:
            await asyncio.gather(*receipts)
            receipts.clear()
    await asyncio.gather(*receipts)
    await producer.close()


async def fill(url: str, topic: str, n: int, keys: int, subscriptions: list[str]) -> None:
    """Publish the backlog, after creating every subscription that will drain it (at Earliest):
    the broker deletes what every existing subscription has acknowledged."""
    async with aio.Client(url) as client:
        for sub in subscriptions:
            consumer = await client.subscribe(
                topic, sub, consumer_type=aio.ConsumerType.Shared, initial_position=aio.InitialPosition.Earliest
            )
            await consumer.close()
        producer = await client.create_producer(
            topic, batching_type=aio.BatchingType.KeyBased, max_pending_messages=20_000
        )
        await send_keyed(producer, n, keys)


async def drain(url: str, topic: str, sub: str, sub_type: Any, n: int, consumers: int = 2) -> float:
    """Messages per second for ``consumers`` consumers of one subscription to receive and ack ``n``."""
    async with aio.Client(url) as client:
        subs = [
            await client.subscribe(
                topic,
                sub,
                consumer_type=sub_type,
                consumer_name=f"c{i}",
                initial_position=aio.InitialPosition.Earliest,
                receiver_queue_size=5000,
            )
            for i in range(consumers)
        ]
        count = 0
        done = asyncio.Event()
        start = time.perf_counter()

        async def run(consumer: Any) -> None:
            nonlocal count
            while not done.is_set():
                try:
                    msg = await consumer.receive(timeout_millis=200)
                except aio.Timeout:
                    continue
                await consumer.acknowledge(msg)
                count += 1
                if count >= n:
                    done.set()

        await asyncio.wait_for(asyncio.gather(*(run(c) for c in subs)), 600)
        rate = n / (time.perf_counter() - start)
        for c in subs:
            await c.close()
        return rate


async def nack_cycle(url: str, topic: str, n: int) -> float:
    async with aio.Client(url) as client:
        consumer = await client.subscribe(
            topic,
            "nack",
            consumer_type=aio.ConsumerType.Shared,
            initial_position=aio.InitialPosition.Earliest,
            receiver_queue_size=5000,
            negative_ack_redelivery_delay_ms=1,
        )
        acked = 0
        start = time.perf_counter()
        while acked < n:
            msg = await consumer.receive(timeout_millis=30_000)
            if msg.redelivery_count() == 0:
                consumer.negative_acknowledge(msg)
            else:
                await consumer.acknowledge(msg)
                acked += 1
        rate = n / (time.perf_counter() - start)
        await consumer.close()
        return rate


async def _stamp(receipt: Any, body: bytes, stored: dict[bytes, float]) -> None:
    """Record when the broker confirmed ``body`` stored (wall-clock ms)."""
    await receipt
    stored[body] = time.time() * 1000


async def lateness(url: str, topic: str, n: int) -> dict[str, float]:
    async with aio.Client(url) as client:
        consumer = await client.subscribe(
            topic, "late", consumer_type=aio.ConsumerType.Shared, receiver_queue_size=5000
        )
        producer = await client.create_producer(topic, max_pending_messages=5000)
        due: dict[bytes, int] = {}
        stored: dict[bytes, float] = {}
        receipts = []
        for i in range(n):
            # 3-8 s ahead: publishing all n takes a few seconds, and a message must reach the
            # broker before its time for its lateness to measure the broker's tracker.
            delay = random.randint(3000, 8000)
            body = f"{i}".encode()
            due[body] = int(time.time() * 1000) + delay
            receipt = await producer.send_async(body, deliver_after=timedelta(milliseconds=delay))
            receipts.append(asyncio.ensure_future(_stamp(receipt, body, stored)))
        await asyncio.gather(*receipts)
        late: list[float] = []
        while len(late) < n:
            msg = await consumer.receive(timeout_millis=60_000)
            late.append(time.time() * 1000 - due[msg.data()])
            await consumer.acknowledge(msg)
        await consumer.close()
    return {
        "p50": percentile(late, 50),
        "p99": percentile(late, 99),
        "max": max(late),
        "early": sum(x < 0 for x in late),
        "stored_after_due": sum(stored[b] > due[b] for b in due),
    }


async def pending(svc: Service, topic: str, n: int) -> dict[str, float]:
    async with aio.Client(svc.url) as client:
        consumer = await client.subscribe(topic, "pending", consumer_type=aio.ConsumerType.Shared)
        producer = await client.create_producer(topic, max_pending_messages=20_000)
        receipts = []
        start = time.perf_counter()
        for _ in range(n):
            receipts.append(await producer.send_async(b"x" * SIZE, deliver_after=timedelta(hours=1)))
            if len(receipts) >= 20_000:
                await asyncio.gather(*receipts)
                receipts.clear()
        await asyncio.gather(*receipts)
        publish_s = time.perf_counter() - start
        delayed = 0
        deadline = time.monotonic() + 3600
        while delayed < n and time.monotonic() < deadline:
            url = f"{svc.admin}/admin/v2/{topic.replace('://', '/')}/stats"
            stats = await asyncio.to_thread(lambda u=url: json.load(urllib.request.urlopen(u)))
            delayed = int(stats["subscriptions"]["pending"].get("msgDelayed", 0))
            await asyncio.sleep(2)  # polling the broker's stats
        await consumer.close()
        return {
            "pending": delayed,
            "publish_s": publish_s,
            "heap_mib": svc.rss_mib("RssAnon"),
            "rss_mib": svc.rss_mib("VmRSS"),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--delayed", type=int, default=20_000)
    ap.add_argument("--pending", type=int, default=0)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--lateness-only", action="store_true", help="measure only the delayed-delivery lateness")
    args = ap.parse_args()
    types = {
        "Shared": aio.ConsumerType.Shared,
        "Key_Shared": aio.ConsumerType.KeyShared,
        "Failover": aio.ConsumerType.Failover,
    }
    runs: list[dict[str, Any]] = []
    for r in range(args.runs):
        row: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as d, standalone(Path(d)) as svc:
            topic = f"persistent://public/default/bench-{r}"
            if not args.lateness_only:
                asyncio.run(fill(svc.url, topic, args.messages, args.keys, [*(f"sub-{t}" for t in types), "nack"]))
                for name, t in types.items():
                    row[name] = asyncio.run(drain(svc.url, topic, f"sub-{name}", t, args.messages))
                row["nack_cycle"] = asyncio.run(nack_cycle(svc.url, topic, args.messages))
            row["lateness"] = asyncio.run(lateness(svc.url, f"{topic}-delayed", args.delayed))
        print(f"run {r + 1}: {json.dumps(row)}", flush=True)
        runs.append(row)
    summary: dict[str, Any] = {}
    if not args.lateness_only:
        summary.update({name: statistics.median(x[name] for x in runs) for name in [*types, "nack_cycle"]})
        for name in ("Key_Shared", "Failover", "nack_cycle"):
            summary[f"{name}_vs_Shared"] = statistics.median(x[name] / x["Shared"] for x in runs)
    summary["lateness_ms"] = {
        k: statistics.median(x["lateness"][k] for x in runs) for k in ("p50", "p99", "max", "early", "stored_after_due")
    }
    if args.pending:
        with tempfile.TemporaryDirectory() as d, standalone(Path(d)) as svc:
            summary["pending"] = asyncio.run(pending(svc, "persistent://public/default/bench-pending", args.pending))
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
