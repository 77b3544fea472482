"""Storage benchmark: raw durable LMDB commits/s versus bookie adds/s through group commit.

``python -m magnetar.bookie.bench [--seconds 3] [--runs 3] [--sizes 100,65536] [--dir /tmp]``

The first figure is the ceiling a bookie without group commit would have (one fsync per add);
the second is what ``BookieStorage`` sustains with ``concurrency`` adds in flight, which is how a
broker drives it (many producers, pipelined adds). Both use real fsyncs on the given directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time

import lmdb

from magnetar.bookie.storage import BookieStorage
from magnetar.protocol.checksum import crc32c


def raw_commits_per_second(directory: str, size: int, seconds: float) -> float:
    """One put per durable write transaction, as a bookie without group commit would do."""
    env = lmdb.open(directory, map_size=1 << 40, sync=True, metasync=True)
    data = os.urandom(size)
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        with env.begin(write=True) as txn:
            txn.put(count.to_bytes(8, "big"), data)
        count += 1
    elapsed = time.perf_counter() - start
    env.close()
    return count / elapsed


async def adds_per_second(directory: str, size: int, seconds: float, concurrency: int) -> tuple[float, float]:
    """Adds/s and mean adds per commit with ``concurrency`` writers each awaiting its ack."""
    storage = BookieStorage(directory)
    data = os.urandom(size)
    crc = crc32c(data)
    count = 0
    start = time.perf_counter()

    async def writer(ledger: int) -> None:
        nonlocal count
        entry = 0
        while time.perf_counter() - start < seconds:
            await storage.add(ledger, entry, data, crc, entry - 1)
            entry += 1
            count += 1

    await asyncio.gather(*(writer(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - start
    batch = storage.ops_committed / max(storage.commits, 1)
    await storage.close()
    return count / elapsed, batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="100,65536")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        raw, adds, batches = [], [], []
        for _ in range(args.runs):
            work = tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir)
            try:
                raw.append(raw_commits_per_second(os.path.join(work, "raw"), size, args.seconds))
                rate, batch = asyncio.run(
                    adds_per_second(os.path.join(work, "bookie"), size, args.seconds, args.concurrency)
                )
                adds.append(rate)
                batches.append(batch)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        raw_m, adds_m, batch_m = statistics.median(raw), statistics.median(adds), statistics.median(batches)
        print(
            f"{size:>7} B  raw durable commits/s median {raw_m:8.0f} {[round(r) for r in raw]}"
            f"  | group-commit adds/s median {adds_m:8.0f} {[round(a) for a in adds]}"
            f"  ({adds_m * size / 1e6:.1f} MB/s, {batch_m:.0f} adds/commit)"
        )


if __name__ == "__main__":
    main()
