"""The in-cluster stream check: produce N numbered messages and consume them, in one pod.

Runs inside the Magnetar server image (as a Kubernetes Job; the e2e suite mounts this file from a
ConfigMap), so it reaches the brokers the way a user's in-cluster program does: through the broker
Service's DNS name, then lookups and redirects to the owning broker's pod name.

Why produce and consume in one process: one log to read, one result, and the consumer subscribes
from Earliest *before* the first send, so it must see every acknowledged message whatever the test
kills meanwhile. Sends are paced (``--rate``) so that the stream lasts long enough for the test to
kill pods in the middle of it; the test follows the ``PROGRESS`` lines to know when.

The last line is ``RESULT {json}``:
- ``acked``: sends the broker confirmed; ``failed`` / ``unknown``: sends refused for certain, or
  whose outcome the producer cannot know (connection lost after sending);
- ``lost``: acknowledged values never received (must be 0);
- ``duplicates``: values received at two distinct message ids (a resend that had been stored);
  ``redelivered``: the same message id received again (a consumer reconnect; harmless);
- ``out_of_order``: first receipts of a value smaller than one received before it.
Only the standard library and the magnetar client are used: the image holds nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

from magnetar.client import aio as mg
from magnetar.protocol.errors import MagnetarError, Timeout


class Stream:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.acked: set[int] = set()
        self.failed: set[int] = set()
        self.unknown: set[int] = set()
        self.first_seen: dict[int, tuple[int, int, int]] = {}
        self.duplicates = 0
        self.redelivered = 0
        self.out_of_order = 0
        self.highest = -1
        self.received = 0
        self.producer_restarts = 0
        self.events: list[str] = []
        self.t0 = time.monotonic()
        self.last_progress = 0

    def event(self, text: str) -> None:
        line = f"EVENT {time.monotonic() - self.t0:.1f}s {text}"
        self.events.append(line)
        print(line, flush=True)

    def progress(self, force: bool = False) -> None:
        if force or len(self.acked) - self.last_progress >= self.args.progress_every:
            self.last_progress = len(self.acked)
            print(
                f"PROGRESS acked={len(self.acked)} received={len(self.first_seen)} t={time.monotonic() - self.t0:.1f}",
                flush=True,
            )

    def client(self) -> mg.Client:
        return mg.Client(
            self.args.url,
            operation_timeout_seconds=30,
            keep_alive_interval_seconds=5,
            max_backoff_interval_ms=2000,
        )

    async def produce(self, client: mg.Client) -> None:
        settles: set[asyncio.Task[None]] = set()
        producer: Any = None
        interval = 1.0 / self.args.rate if self.args.rate > 0 else 0.0
        next_send = time.monotonic()
        i = 0
        while i < self.args.messages:
            if producer is None:
                try:
                    producer = await client.create_producer(
                        self.args.topic, send_timeout_millis=60000, max_pending_messages=2000, block_if_queue_full=True
                    )
                except (MagnetarError, OSError, TimeoutError) as exc:
                    self.event(f"create producer failed: {exc!r}")
                    await asyncio.sleep(1)  # backoff before creating the producer again
                    continue
            try:
                receipt = await producer.send_async(str(i).encode())
            except (MagnetarError, OSError) as exc:
                self.failed.add(i)
                self.event(f"send {i} refused: {exc!r}; creating the producer again")
                self.producer_restarts += 1
                old, producer = producer, None
                with contextlib.suppress(MagnetarError, OSError, TimeoutError):
                    await asyncio.wait_for(old.close(), 10)
                i += 1
                continue
            task = asyncio.create_task(self.settle(i, receipt))
            settles.add(task)
            task.add_done_callback(settles.discard)
            i += 1
            if interval:
                next_send = max(next_send + interval, time.monotonic() - 1.0)
                delay = next_send - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)  # the stream's pacing, not a wait for an event
        if settles:
            await asyncio.wait(set(settles), timeout=120)
        self.progress(force=True)
        self.event(f"producer done: acked={len(self.acked)} failed={len(self.failed)} unknown={len(self.unknown)}")
        if producer is not None:
            with contextlib.suppress(MagnetarError, OSError, TimeoutError):
                await asyncio.wait_for(producer.close(), 10)

    async def settle(self, i: int, receipt: Any) -> None:
        try:
            await receipt
        except Exception:  # a failed or undetermined send; the consumer side tells which
            self.unknown.add(i)
        else:
            self.acked.add(i)
            self.progress()

    async def consume(self, consumer: Any, producing: asyncio.Task[None]) -> None:
        quiet_since = time.monotonic()
        while True:
            done = producing.done()
            # Whether everything acknowledged has arrived: only worth the set difference now and then.
            check = done and (self.received % 1000 == 0 or time.monotonic() - quiet_since > 0.5)
            missing = len(self.acked - self.first_seen.keys()) if check else -1
            if done and missing == 0 and not self.args.wait_unknown:
                return
            if done and time.monotonic() - quiet_since > self.args.quiet:
                self.event(f"consumer quiet for {self.args.quiet}s with {missing} acknowledged values missing")
                return
            try:
                msg = await consumer.receive(timeout_millis=1000)
            except Timeout:
                continue
            except MagnetarError as exc:
                self.event(f"receive failed: {exc!r}")
                await asyncio.sleep(0.5)  # backoff; the consumer reconnects by itself
                continue
            quiet_since = time.monotonic()
            self.received += 1
            value = int(msg.data().decode())
            mid = msg.message_id()
            pos = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            seen = self.first_seen.get(value)
            if seen is None:
                self.first_seen[value] = pos
                if value < self.highest:
                    self.out_of_order += 1
                self.highest = max(self.highest, value)
            elif seen == pos:
                self.redelivered += 1
            else:
                self.duplicates += 1
            if self.received % 500 == 0:  # cumulative acks: one request per 500 messages
                with contextlib.suppress(MagnetarError):
                    await consumer.acknowledge_cumulative(msg)

    async def run(self) -> dict[str, Any]:
        client = self.client()
        consumer = await client.subscribe(
            self.args.topic, self.args.subscription, initial_position=mg.InitialPosition.Earliest
        )
        self.event("subscribed")
        producing = asyncio.create_task(self.produce(self.client()))
        await self.consume(consumer, producing)
        await producing
        lost = sorted(self.acked - self.first_seen.keys())
        with contextlib.suppress(MagnetarError, OSError, TimeoutError):
            await asyncio.wait_for(client.close(), 10)
        return {
            "sent": self.args.messages,
            "acked": len(self.acked),
            "failed": len(self.failed),
            "unknown": len(self.unknown),
            "unknown_received": len(self.unknown & self.first_seen.keys()),
            "received": self.received,
            "received_unique": len(self.first_seen),
            "lost": len(lost),
            "lost_sample": lost[:20],
            "duplicates": self.duplicates,
            "redelivered": self.redelivered,
            "out_of_order": self.out_of_order,
            "producer_restarts": self.producer_restarts,
            "seconds": round(time.monotonic() - self.t0, 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--subscription", required=True)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=0, help="messages per second (0: as fast as possible)")
    parser.add_argument("--quiet", type=float, default=90, help="give up after this long without a message")
    parser.add_argument("--progress-every", type=int, default=5000)
    parser.add_argument("--wait-unknown", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    result = asyncio.run(Stream(args).run())
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
