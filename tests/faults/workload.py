"""The queue workload: producers send unique values throughout a run, consumers read, a drain reads all.

``QueueWorkload`` runs on the test's event loop:

- ``prepare()`` creates the *drain* subscription (from Earliest, before any message exists, so its
  cursor sees everything) and starts the live consumers (subscription ``live``, acknowledging what
  they read, so the run also exercises cursors and dispatch while processes die);
- ``start()`` starts ``producers`` producers, each with its own ``Client`` (own connections, own
  reconnection), sending ``p{id}-{counter}`` at ``rate`` messages per second each, pipelined;
- every send is an ``Op`` in ``ops``: ``ok`` with its acknowledged message id, ``fail`` when it
  certainly did not happen (refused before it was sent), ``unknown`` otherwise (timed out,
  connection lost, an error after the broker may have written it);
- ``stop()`` stops sending and waits (bounded) for every outstanding send to end; what has not
  ended by then is ``unknown``;
- ``drain()`` reads the drain subscription with a fresh client until it has been quiet for a
  while (longer if some acknowledged value has not arrived yet), and ``check()`` judges it all.

Two options make it a consumption workload, judged by ``checker.delivery`` over the live
subscription (Shared): ``nack_every=k`` has the live consumers negatively acknowledge the first
delivery of every k-th value (they are redelivered after ``nack_delay_ms`` and acknowledged then),
and ``delay_ms=(lo, hi)`` sends every message with a deliver-at time ``lo..hi`` ms ahead, to be
checked for early deliveries and lateness. ``stop(live_within=...)`` then keeps the live consumers
running until they acknowledged every value acknowledged to a producer (bounded).

A producer whose client gives up (a closed producer, a failed creation) is created again with
backoff, so the workload keeps going even if the client's own reconnection does not cover a case;
that is noted in ``events``.

``dedup=True`` is for topics with message deduplication on: each producer then has a fixed name
(``producer_names``), kept when it is created again, so that the broker recognises its resends and
the new producer continues from the broker's last sequence id. A resend recognised as a duplicate
is acknowledged with id -1:-1 (as Pulsar does); its value is stored once, where the first copy went.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.faults.checker import (
    FAIL,
    OK,
    PENDING,
    UNKNOWN,
    CheckResult,
    DeliveryResult,
    Op,
    Read,
    check,
    delivery,
    make_value,
    position,
)

from magnetar.client import aio as mg
from magnetar.protocol.errors import (
    AlreadyClosed,
    ChecksumError,
    InvalidCommand,
    MagnetarError,
    MessageTooLarge,
    Timeout,
)

log = logging.getLogger(__name__)

DRAIN_SUBSCRIPTION = "faults-drain"
LIVE_SUBSCRIPTION = "faults-live"

# Errors that mean the message was certainly not stored: refused before it went out, or refused
# by the broker before it was written. Everything else leaves the outcome unknown.
DEFINITE_FAILURES: tuple[type[BaseException], ...] = (MessageTooLarge, ChecksumError, InvalidCommand)
try:  # the client's own queue-full refusal
    from magnetar.client.errors import ProducerQueueIsFull

    DEFINITE_FAILURES += (ProducerQueueIsFull,)
except ImportError:  # pragma: no cover
    pass


def _via(producer: Any) -> str | None:
    """The broker URL a producer is attached to right now (best effort: for reports only)."""
    try:
        part = producer.partitions[0]
        conn = getattr(part, "_conn", None)
        return str(conn.url) if conn is not None else None
    except (AttributeError, IndexError):
        return None


class QueueWorkload:
    def __init__(
        self,
        service_url: str,
        topic: str,
        *,
        producers: int = 3,
        rate: float = 100.0,
        consumers: int = 1,
        send_timeout_ms: int = 20_000,
        operation_timeout: float = 10.0,
        batching_delay_ms: float = 5.0,
        keep_alive: float = 2.0,
        max_backoff_ms: int = 2000,
        clock: Callable[[], float] = time.monotonic,
        nack_every: int = 0,
        nack_delay_ms: int = 200,
        delay_ms: tuple[int, int] | None = None,
        dedup: bool = False,
    ) -> None:
        self.service_url = service_url
        self.dedup = dedup
        run = uuid.uuid4().hex[:8]
        self.producer_names = [f"faults-{run}-p{i}" for i in range(producers)] if dedup else None
        self.topic = topic
        self.n_producers = producers
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.n_consumers = consumers
        self.send_timeout_ms = send_timeout_ms
        self.operation_timeout = operation_timeout
        self.batching_delay_ms = batching_delay_ms
        self.keep_alive = keep_alive
        self.max_backoff_ms = max_backoff_ms
        self.clock = clock
        self.nack_every = nack_every
        self.nack_delay_ms = nack_delay_ms
        self.delay_ms = delay_ms
        self.live_acked: set[str] = set()
        self.nacks = 0
        self._live_changed = asyncio.Event()
        self.ops: list[Op] = []
        self.live_reads: list[Read] = []
        self.drain_reads: list[Read] = []
        self.events: list[tuple[float, str]] = []
        self._ok_changed = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._settles: set[asyncio.Task[None]] = set()
        self._clients: list[mg.Client] = []
        self._consumer_stop = asyncio.Event()
        self.producer_recreations = 0
        self.consumer_recreations = 0

    # ------------------------------------------------------------------ observation

    def event(self, text: str) -> None:
        self.events.append((self.clock(), text))
        log.info("workload: %s", text)

    @property
    def acked(self) -> int:
        return sum(1 for op in self.ops if op.status == OK)

    def acked_after(self, t: float) -> list[Op]:
        return [op for op in self.ops if op.status == OK and op.t_complete is not None and op.t_complete > t]

    async def wait_acked(self, n: int, *, after: float | None = None, within: float = 30.0) -> float:
        """Wait until ``n`` sends completed ok (after time ``after``, if given); returns the time
        the ``n``-th of them completed."""
        deadline = self.clock() + within
        while True:
            done = self.acked_after(after) if after is not None else [op for op in self.ops if op.status == OK]
            if len(done) >= n:
                times = sorted(op.t_complete for op in done if op.t_complete is not None)
                return times[n - 1]
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise TimeoutError(
                    f"only {len(done)} of {n} sends acknowledged within {within}s "
                    f"(after={after}); last events: {self.events[-5:]}"
                )
            self._ok_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ok_changed.wait(), min(remaining, 0.5))

    def last_ok(self) -> Op | None:
        """The latest acknowledged send that names a position (a deduplicated one says -1:-1)."""
        done = [
            op
            for op in self.ops
            if op.status == OK and op.t_complete is not None and op.pos is not None and op.pos[0] >= 0
        ]
        return max(done, key=lambda op: op.t_complete or 0.0) if done else None

    # ------------------------------------------------------------------ lifecycle

    def _new_client(self) -> mg.Client:
        """A client tuned for fault tests: a paused broker is taken for dead after two keep-alive
        intervals, and reconnection backs off to at most ``max_backoff_ms`` (Pulsar: 30 s)."""
        return mg.Client(
            self.service_url,
            operation_timeout_seconds=self.operation_timeout,
            keep_alive_interval_seconds=self.keep_alive,
            max_backoff_interval_ms=self.max_backoff_ms,
        )

    def _client(self) -> mg.Client:
        client = self._new_client()
        self._clients.append(client)
        return client

    async def prepare(self, within: float = 30.0) -> None:
        """Create the drain subscription and start the live consumers (before any send)."""
        client = self._client()
        consumer = await asyncio.wait_for(
            client.subscribe(self.topic, DRAIN_SUBSCRIPTION, initial_position=mg.InitialPosition.Earliest), within
        )
        await asyncio.wait_for(consumer.close(), within)
        ready = [asyncio.Event() for _ in range(self.n_consumers)]
        for i in range(self.n_consumers):
            self._tasks.append(asyncio.create_task(self._consume(i, ready[i]), name=f"faults-consumer-{i}"))
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), within)

    async def start(self) -> None:
        ready = [asyncio.Event() for _ in range(self.n_producers)]
        for i in range(self.n_producers):
            self._tasks.append(asyncio.create_task(self._produce(i, ready[i]), name=f"faults-producer-{i}"))
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
        self.event("producers started")

    async def run(self, seconds: float) -> None:
        """Start, let it run for ``seconds``, stop."""
        await self.start()
        await asyncio.sleep(seconds)  # the length of the run, not a wait for a condition
        await self.stop()

    async def stop(self, settle_timeout: float = 45.0, live_within: float = 0.0) -> None:
        """Stop sending; wait for every outstanding send to end (bounded); stop the consumers.

        With ``live_within``, the live consumers first get up to that long to acknowledge every
        value acknowledged to a producer (nacked and delayed ones come later than the rest)."""
        self._stopping = True
        self.event("stopping")
        producers = [t for t in self._tasks if t.get_name().startswith("faults-producer")]
        consumers = [t for t in self._tasks if t.get_name().startswith("faults-consumer")]
        # Producer loops end after their current send_async; give them the settle time, then cancel.
        _, pending = await asyncio.wait(producers, timeout=settle_timeout) if producers else (set(), set())
        for t in pending:
            t.cancel()
        if self._settles:
            _, still = await asyncio.wait(set(self._settles), timeout=settle_timeout)
            for t in still:
                t.cancel()
        for op in self.ops:
            if op.status == PENDING:
                op.status = UNKNOWN
                op.error = op.error or "no outcome by the end of the run"
                op.t_complete = self.clock()
        if live_within > 0:
            await self._wait_live_complete(live_within)
        self._consumer_stop.set()
        _, pending = await asyncio.wait(consumers, timeout=15) if consumers else (set(), set())
        for t in pending:
            t.cancel()
        await self.close_clients()
        self.event("stopped")

    async def _wait_live_complete(self, within: float) -> None:
        deadline = self.clock() + within
        while True:
            missing = sum(1 for op in self.ops if op.status == OK and op.value not in self.live_acked)
            remaining = deadline - self.clock()
            if not missing or remaining <= 0:
                self.event(f"live consumers: {missing} acknowledged values not yet acknowledged live")
                return
            self._live_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._live_changed.wait(), min(remaining, 0.5))

    async def close_clients(self) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            try:
                await asyncio.wait_for(client.close(), 15)
            except (MagnetarError, TimeoutError, OSError) as exc:
                log.debug("closing a workload client: %r", exc)

    # ------------------------------------------------------------------ producers

    async def _create_producer(self, client: mg.Client, pid: int = 0) -> Any:
        return await asyncio.wait_for(
            client.create_producer(
                self.topic,
                producer_name=self.producer_names[pid] if self.producer_names else None,
                send_timeout_millis=self.send_timeout_ms,
                batching_max_publish_delay_ms=self.batching_delay_ms,
                max_pending_messages=2000,
                block_if_queue_full=True,
            ),
            self.operation_timeout + 5,
        )

    async def _produce(self, pid: int, ready: asyncio.Event) -> None:
        client = self._client()
        producer: Any = None
        seq = 0
        backoff = 0.1
        next_send = self.clock()
        while not self._stopping:
            if producer is None:
                try:
                    producer = await self._create_producer(client, pid)
                    backoff = 0.1
                    ready.set()
                except (MagnetarError, TimeoutError, OSError) as exc:
                    self.event(f"producer {pid}: create failed: {exc!r}")
                    await asyncio.sleep(backoff)  # backoff between attempts
                    backoff = min(backoff * 2, 2.0)
                    continue
            op = Op(pid, seq, make_value(pid, seq), self.clock())
            seq += 1
            self.ops.append(op)
            try:
                if self.delay_ms is not None:
                    op.deliver_at = int(time.time() * 1000) + random.randint(*self.delay_ms)
                    receipt = await producer.send_async(op.value.encode(), deliver_at=op.deliver_at)
                else:
                    receipt = await producer.send_async(op.value.encode())
            except asyncio.CancelledError:
                if op.status == PENDING:
                    op.status, op.error, op.t_complete = FAIL, "cancelled before it was queued", self.clock()
                raise
            except (MagnetarError, OSError) as exc:
                # Refused before it was queued: it certainly was not sent.
                op.status, op.error, op.t_complete = FAIL, repr(exc), self.clock()
                if isinstance(exc, AlreadyClosed) or not isinstance(exc, DEFINITE_FAILURES):
                    self.event(f"producer {pid}: send refused ({exc!r}); creating the producer again")
                    self.producer_recreations += 1
                    old, producer = producer, None
                    self._spawn_close(old)
                continue
            task = asyncio.create_task(self._settle(op, receipt, producer))
            self._settles.add(task)
            task.add_done_callback(self._settles.discard)
            if self.interval:
                next_send = max(next_send + self.interval, self.clock() - 1.0)
                delay = next_send - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)  # pacing of the workload rate
            else:
                await asyncio.sleep(0)
        if producer is not None:
            with contextlib.suppress(MagnetarError, TimeoutError):
                await asyncio.wait_for(producer.flush(), self.send_timeout_ms / 1000 + 5)

    def _spawn_close(self, producer: Any) -> None:
        async def close() -> None:
            with contextlib.suppress(MagnetarError, TimeoutError, OSError):
                await asyncio.wait_for(producer.close(), 10)

        task = asyncio.create_task(close())
        self._settles.add(task)
        task.add_done_callback(self._settles.discard)

    async def _settle(self, op: Op, receipt: Any, producer: Any) -> None:
        try:
            msg_id = await receipt
        except asyncio.CancelledError:
            op.status, op.error = UNKNOWN, "no outcome by the end of the run"
            op.t_complete = self.clock()
            raise
        except DEFINITE_FAILURES as exc:
            op.status, op.error = FAIL, repr(exc)
        except Timeout as exc:
            op.status, op.error = UNKNOWN, repr(exc)
        except Exception as exc:  # NotConnected, ServiceNotReady, LedgerFenced, ...: may be stored
            op.status, op.error = UNKNOWN, repr(exc)
        else:
            op.status = OK
            op.pos = position(msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())
            op.via = _via(producer)
            self._ok_changed.set()
        op.t_complete = self.clock()

    # ------------------------------------------------------------------ consumers

    async def _consume(self, cid: int, ready: asyncio.Event) -> None:
        client = self._client()
        consumer: Any = None
        backoff = 0.1
        while not self._consumer_stop.is_set():
            if consumer is None:
                try:
                    consumer = await asyncio.wait_for(
                        client.subscribe(
                            self.topic,
                            LIVE_SUBSCRIPTION,
                            consumer_type=mg.ConsumerType.Shared,
                            initial_position=mg.InitialPosition.Earliest,
                            negative_ack_redelivery_delay_ms=self.nack_delay_ms,
                        ),
                        self.operation_timeout + 5,
                    )
                    backoff = 0.1
                    ready.set()
                except (MagnetarError, TimeoutError, OSError) as exc:
                    self.event(f"consumer {cid}: subscribe failed: {exc!r}")
                    await asyncio.sleep(backoff)  # backoff between attempts
                    backoff = min(backoff * 2, 2.0)
                    continue
            try:
                msg = await consumer.receive(timeout_millis=500)
            except Timeout:
                continue
            except (MagnetarError, OSError) as exc:
                self.event(f"consumer {cid}: receive failed ({exc!r}); subscribing again")
                self.consumer_recreations += 1
                consumer = None
                continue
            mid = msg.message_id()
            pos = position(mid.ledger_id(), mid.entry_id(), mid.batch_index())
            value = msg.data().decode(errors="replace")
            redeliveries = msg.redelivery_count()
            self.live_reads.append(Read(value, pos, self.clock(), int(time.time() * 1000), redeliveries))
            if self.nack_every and redeliveries == 0 and self._nacked(value):
                await consumer.negative_acknowledge(msg)
                self.nacks += 1
                continue
            with contextlib.suppress(MagnetarError):
                await consumer.acknowledge(msg)
                self.live_acked.add(value)
                self._live_changed.set()
        if consumer is not None:
            with contextlib.suppress(MagnetarError, TimeoutError):
                await asyncio.wait_for(consumer.close(), 10)

    def _nacked(self, value: str) -> bool:
        """Whether the live consumers nack this value's first delivery: every ``nack_every``-th."""
        parsed = value[1:].partition("-")[2]
        return parsed.isdigit() and int(parsed) % self.nack_every == 0

    # ------------------------------------------------------------------ drain and check

    async def drain(self, *, quiet: float = 3.0, patience: float = 30.0, within: float = 120.0) -> list[Read]:
        """Read the drain subscription from its start until nothing arrives for ``quiet`` seconds
        once every acknowledged value was seen (``patience`` seconds while some is still missing)."""
        expected = {op.value for op in self.ops if op.status == OK}
        seen: set[str] = set()
        client = self._new_client()
        reads: list[Read] = []
        start = self.clock()
        try:
            consumer = None
            deadline = start + within
            while consumer is None:
                try:
                    consumer = await asyncio.wait_for(
                        client.subscribe(
                            self.topic,
                            DRAIN_SUBSCRIPTION,
                            initial_position=mg.InitialPosition.Earliest,
                            receiver_queue_size=2000,
                        ),
                        self.operation_timeout + 5,
                    )
                except (MagnetarError, TimeoutError) as exc:
                    if self.clock() > deadline:
                        raise
                    self.event(f"drain: subscribe failed: {exc!r}")
                    await asyncio.sleep(0.5)  # backoff between attempts
            last = self.clock()
            while self.clock() < deadline:
                try:
                    msg = await consumer.receive(timeout_millis=250)
                except Timeout:
                    limit = quiet if expected <= seen else patience
                    if self.clock() - last > limit:
                        break
                    continue
                mid = msg.message_id()
                value = msg.data().decode(errors="replace")
                reads.append(Read(value, position(mid.ledger_id(), mid.entry_id(), mid.batch_index()), self.clock()))
                seen.add(value)
                last = self.clock()
            self.event(f"drain: {len(reads)} reads in {self.clock() - start:.1f}s")
        finally:
            with contextlib.suppress(MagnetarError, TimeoutError):
                await asyncio.wait_for(client.close(), 15)
        self.drain_reads = reads
        return reads

    def check(self) -> CheckResult:
        """The checker on the drain, with inconsistency and unexpected values judged over the
        live consumers' reads too."""
        result = check(self.ops, self.drain_reads)
        both = check(self.ops, [*self.drain_reads, *self.live_reads])
        result.inconsistent = both.inconsistent
        result.unexpected = both.unexpected
        for kind in ("inconsistent", "unexpected"):
            if both.examples.get(kind):
                result.examples[kind] = both.examples[kind]
        return result

    def check_delivery(self) -> DeliveryResult:
        """The live subscription's judgement: nothing acknowledged lost to nacks, nothing early."""
        return delivery(self.ops, self.live_reads, self.live_acked)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write the whole history (sends, reads, events) as JSON, for a post-mortem."""
        doc = {
            "topic": self.topic,
            "events": self.events,
            "ops": [dataclasses.asdict(op) for op in self.ops],
            "drain_reads": [dataclasses.asdict(r) for r in self.drain_reads],
            "live_reads": [dataclasses.asdict(r) for r in self.live_reads],
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)

    def stats(self) -> dict[str, Any]:
        return {
            "live_reads": len(self.live_reads),
            "producer_recreations": self.producer_recreations,
            "consumer_recreations": self.consumer_recreations,
            "nacks": self.nacks,
        }
