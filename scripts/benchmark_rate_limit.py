#!/usr/bin/env python3
"""Rate-limit benchmark: the achieved publish and dispatch rates against the limit, as medians.

Each run starts a fresh ``magnetar standalone`` and measures, with a limit of --rate messages/s:
  1. publish: a producer (no batching, 100-byte messages) sends as fast as it may under the
     topic's ``publishRate``; the achieved rate is the receipts per second in the steady part of
     the run (from 1.5 s after the start, past the bucket's one-second burst, to the last receipt);
  2. dispatch: a consumer drains a backlog under the topic's ``dispatchRate``; the achieved rate
     is the messages received per second in the steady part, likewise;
  3. subscription dispatch: the same under ``subscriptionDispatchRate``;
and, for context, the same publish and drain without a limit (the ceiling the limits sit under).
Each figure is printed with its ratio to the limit; the summary holds the medians over --runs.

Usage: scripts/benchmark_rate_limit.py [--runs 3] [--rate 1000] [--seconds 10] [--json F]
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
from benchmark import admin, fresh_standalone, report

from magnetar.client import aio

SIZE = 100
WARMUP = 1.5  # seconds: past the one-second burst a full bucket allows


def steady_rate(times: list[float], start: float, *, limited: bool = True) -> float:
    """Events per second from ``start + WARMUP`` to the last event (limited), or over the whole
    run (not limited: an unlimited run may be over before the warm-up is)."""
    if not limited:
        return len(times) / (times[-1] - start)
    t0 = start + WARMUP
    inside = [t for t in times if t >= t0]
    if len(inside) < 2:
        return float("nan")
    return (len(inside) - 1) / (inside[-1] - inside[0])


async def publish(url: str, topic: str, n: int, limited: bool = True) -> float:
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, batching_enabled=False, max_pending_messages=5000)
        done: list[float] = []
        body = b"x" * SIZE

        async def track(receipt: Any) -> None:
            await receipt
            done.append(time.monotonic())

        start = time.monotonic()
        tasks = [asyncio.ensure_future(track(await producer.send_async(body))) for _ in range(n)]
        await asyncio.gather(*tasks)
        await producer.close()
        return steady_rate(done, start, limited=limited)


async def fill(url: str, topic: str, sub: str, n: int) -> None:
    async with aio.Client(url) as client:
        consumer = await client.subscribe(topic, sub, initial_position=aio.InitialPosition.Earliest)
        await consumer.close()
        producer = await client.create_producer(topic, batching_enabled=False, max_pending_messages=20_000)
        body = b"x" * SIZE
        futures = [await producer.send_async(body) for _ in range(n)]
        await asyncio.gather(*futures)
        await producer.close()


async def drain(url: str, topic: str, sub: str, n: int, limited: bool = True) -> float:
    async with aio.Client(url) as client:
        consumer = await client.subscribe(topic, sub, receiver_queue_size=1000)
        times: list[float] = []
        start = time.monotonic()
        for _ in range(n):
            msg = await consumer.receive(timeout_millis=60_000)
            times.append(time.monotonic())
            await consumer.acknowledge(msg)
        await consumer.close()
        return steady_rate(times, start, limited=limited)


def one_run(rate: int, seconds: float) -> dict[str, float]:
    n = int(rate * (seconds + WARMUP))
    row: dict[str, float] = {}
    with fresh_standalone() as svc:
        base = "/admin/v2/persistent/public/default"
        admin(svc, "PUT", f"{base}/pub")
        admin(svc, "POST", f"{base}/pub/publishRate", {"publishThrottlingRateInMsg": rate})
        row["publish"] = asyncio.run(publish(svc.url, "persistent://public/default/pub", n))
        # The same without a limit: the ceiling the limits are measured under (context, not a figure).
        row["publish_unlimited"] = asyncio.run(publish(svc.url, "persistent://public/default/free", n, False))
        asyncio.run(fill(svc.url, "persistent://public/default/free-d", "s", n))
        row["dispatch_unlimited"] = asyncio.run(drain(svc.url, "persistent://public/default/free-d", "s", n, False))
        for name, policy in (("dispatch", "dispatchRate"), ("subscription_dispatch", "subscriptionDispatchRate")):
            topic = f"persistent://public/default/{name}"
            asyncio.run(fill(svc.url, topic, "s", n))
            admin(svc, "POST", f"{base}/{name}/{policy}", {"dispatchThrottlingRateInMsg": rate})
            row[name] = asyncio.run(drain(svc.url, topic, "s", n))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=int, default=1000, help="the limit, messages per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="steady-state seconds measured per figure")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    runs = []
    for r in range(args.runs):
        row = one_run(args.rate, args.seconds)
        print(f"run {r + 1}: " + ", ".join(f"{k} {v:.1f}/s ({v / args.rate:.3f} x limit)" for k, v in row.items()))
        runs.append(row)
    summary: dict[str, Any] = {"limit": args.rate}
    for key in runs[0]:
        median = statistics.median(x[key] for x in runs)
        summary[key] = {"rate": median, "ratio": median / args.rate}
    report(runs, summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
