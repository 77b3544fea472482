#!/usr/bin/env python3
"""Deduplication benchmark: publish throughput with message deduplication on against off, as medians.

Each run starts a fresh ``magnetar standalone`` and publishes --messages 100-byte messages to two
topics of it, one with the topic policy ``deduplicationEnabled`` true and one without, in
alternating order, each by one pipelined producer:
  1. batched (the client's defaults: up to 1000 messages per entry, 10 ms delay), the usual case;
  2. unbatched (--unbatched messages, one entry each), the worst case for deduplication, whose
     work (a map lookup at the send, an update and every 1000 entries a snapshot at the receipt)
     is per entry.
Figures are messages per second from the first send to the last receipt; the summary holds the
medians over --runs and the ratio on/off.

Usage: scripts/benchmark_dedup.py [--runs 3] [--messages 200000] [--unbatched 50000] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import admin, fresh_standalone

from magnetar.client import aio

SIZE = 100


async def publish(url: str, topic: str, n: int, batched: bool) -> float:
    """Messages per second for one producer to send ``n`` and have every receipt back."""
    async with aio.Client(url) as client:
        producer = await client.create_producer(
            topic, producer_name="bench", batching_enabled=batched, max_pending_messages=10_000
        )
        body = b"x" * SIZE
        receipts = []
        start = time.perf_counter()
        for _ in range(n):
            receipts.append(await producer.send_async(body))
            if len(receipts) >= 5_000:
                await asyncio.gather(*receipts)
                receipts.clear()
        await asyncio.gather(*receipts)
        elapsed = time.perf_counter() - start
        await producer.close()
    return n / elapsed


def one_run(run: int, messages: int, unbatched: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {"batched": {}, "unbatched": {}}
    with fresh_standalone() as svc:
        order = [True, False] if run % 2 == 0 else [False, True]  # alternate who goes first
        for kind, n, batched in (("batched", messages, True), ("unbatched", unbatched, False)):
            for on in order:
                local = f"public/default/dedup-{kind}-{'on' if on else 'off'}-{run}"
                admin(svc, "PUT", f"/admin/v2/persistent/{local}")
                admin(svc, "POST", f"/admin/v2/persistent/{local}/deduplicationEnabled", on)
                rate = asyncio.run(publish(svc.url, f"persistent://{local}", n, batched))
                status = admin(svc, "GET", f"/admin/v2/persistent/{local}/stats")["deduplicationStatus"]
                assert status == ("Enabled" if on else "Disabled"), status  # the policy was in force
                out[kind]["on" if on else "off"] = rate
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--unbatched", type=int, default=50_000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {
        "batched": {"on": [], "off": []},
        "unbatched": {"on": [], "off": []},
    }
    for run in range(args.runs):
        got = one_run(run, args.messages, args.unbatched)
        for kind, by in got.items():
            for state, rate in by.items():
                results[kind][state].append(rate)
            print(f"run {run} {kind}: dedup on {by['on']:,.0f} msg/s, off {by['off']:,.0f} msg/s", flush=True)
    summary: dict[str, Any] = {}
    for kind, rates in results.items():
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        summary[kind] = {"on_median": on, "off_median": off, "ratio": on / off, **rates}
        print(f"DEDUP {kind.upper()} MEDIAN on {on:,.0f} msg/s, off {off:,.0f} msg/s, ratio {on / off:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
