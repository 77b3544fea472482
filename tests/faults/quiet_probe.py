"""The quiet tenant of the noisy-neighbour checks: its own process, publishing and consuming steadily.

``python -m tests.faults.quiet_probe SERVICE_URL TOPIC OUT`` sends one message every ``--interval``
seconds, waits for its acknowledgement, receives it on its own subscription, and appends one line
per message to ``OUT``: ``<monotonic send time> <publish-ack ms> <end-to-end ms>`` (or ``fail`` and
the error). It runs in its own process so that the load the scenario generates in the test process
does not show up as the quiet tenant's latency; CLOCK_MONOTONIC is shared by every process of the
machine, so the test can cut the lines into the windows of its phases. It stops when its standard
input closes (the test's end), or after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from typing import TextIO

from magnetar import event_loop
from magnetar.client import aio as mg


async def probe(url: str, topic: str, out: TextIO, interval: float, max_seconds: float, stop: threading.Event) -> None:
    async with mg.Client(url, operation_timeout_seconds=30) as client:
        consumer = await client.subscribe(topic, "quiet-probe", consumer_type=mg.ConsumerType.Shared)
        producer = await client.create_producer(topic, batching_enabled=False)
        out.write(f"ready {time.monotonic():.6f}\n")
        deadline = time.monotonic() + max_seconds
        next_at = time.monotonic()
        while not stop.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                await producer.send(f"{t0:.6f}".encode())
                t1 = time.monotonic()
                msg = await consumer.receive(timeout_millis=30_000)
                await consumer.acknowledge(msg)
                t2 = time.monotonic()
                out.write(f"{t0:.6f} {(t1 - t0) * 1000:.3f} {(t2 - t0) * 1000:.3f}\n")
            except Exception as exc:  # the figure is the point: record and go on
                out.write(f"{t0:.6f} fail {type(exc).__name__}: {exc}\n")
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the probe's pace, not a wait for an event
            else:
                next_at = time.monotonic()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("topic")
    parser.add_argument("out")
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args()
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    with open(args.out, "a", buffering=1, encoding="utf-8") as out:  # line-buffered: the test reads it live
        event_loop.run(probe(args.url, args.topic, out, args.interval, args.max_seconds, stop))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
