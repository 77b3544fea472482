#!/usr/bin/env python3
"""Chunking benchmark: the round-trip time of one large chunked message, as a median.

Each run starts a fresh ``magnetar standalone``, subscribes an Exclusive consumer, then times one
--size-mib message from ``send`` (a producer with ``chunking_enabled=True``) until the consumer's
``receive`` returns it reassembled (checked byte-identical); the send time (until the broker stored
the last chunk) is reported too. The payload is random bytes, so compression could not shrink it
(none is used). The figure is the median over --runs runs.

Usage: scripts/benchmark_chunking.py [--runs 3] [--size-mib 50] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import each_run, fresh_standalone, report

from magnetar.client import aio

MiB = 1024 * 1024


async def round_trip(url: str, topic: str, data: bytes) -> dict[str, float]:
    """Seconds from send to the reassembled message received, and to the send's receipt."""
    async with aio.Client(url) as client:
        consumer = await client.subscribe(topic, "bench", initial_position=aio.InitialPosition.Earliest)
        producer = await client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        await producer.send(b"warm-up")  # connections and the topic's ledger are open before timing
        await consumer.acknowledge(await consumer.receive(10_000))
        start = time.perf_counter()
        receipt = await producer.send_async(data)
        msg_id = await receipt
        sent = time.perf_counter() - start
        msg = await consumer.receive(120_000)
        received = time.perf_counter() - start
        if msg.data() != data:
            raise SystemExit("the reassembled message differs from what was sent")
        chunks = msg_id.entry_id - msg_id.first_chunk[1] + 1 if msg_id.first_chunk is not None else 1
        await consumer.acknowledge(msg)
        await consumer.close()
        await producer.close()
    return {"round_trip_s": received, "send_s": sent, "chunks": chunks}


def one_run(data: bytes, r: int) -> dict[str, Any]:
    with fresh_standalone() as svc:
        return asyncio.run(round_trip(svc.url, f"persistent://public/default/bench-chunking-{r}", data))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mib", type=float, default=50)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    data = os.urandom(int(args.size_mib * MiB))
    runs = each_run(args.runs, lambda r: one_run(data, r))
    summary = {
        "size_mib": args.size_mib,
        "chunks": runs[0]["chunks"],
        "round_trip_s": statistics.median(x["round_trip_s"] for x in runs),
        "send_s": statistics.median(x["send_s"] for x in runs),
        "round_trip_mib_per_s": args.size_mib / statistics.median(x["round_trip_s"] for x in runs),
    }
    report(runs, summary, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
