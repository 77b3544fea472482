"""``magnetar perf produce|consume``: throughput and latency benchmarks, in the spirit of pulsar-perf.

Both commands print one line per second (msg/s, MB/s, and for produce the publish latency
percentiles) and a final summary; ``--json FILE`` writes the summary for the benchmark script.

The producer side keeps per-message work small so that the tool measures the client and broker
rather than itself: messages go out with ``send_async`` (pipelined, up to ``--max-pending`` in
flight), and the latency of each message (from ``send_async`` to the broker's receipt) is taken by
a collector task that waits on *batch* futures and reads the clock once per completed batch-run
of messages. Latencies go into a fixed-bucket histogram (1 µs steps to 10 ms, 100 µs to 1 s,
10 ms beyond), so memory stays constant however long the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import deque
from typing import Any

from magnetar import event_loop
from magnetar.client import aio
from magnetar.client.net.auth import tls_from_params, token_from_params
from magnetar.client.options import CompressionType, ConsumerType, InitialPosition
from magnetar.client.producer.batch_builder import SendReceipt

_COMPRESSION = {
    "none": CompressionType.NONE,
    "lz4": CompressionType.LZ4,
    "zlib": CompressionType.ZLib,
    "zstd": CompressionType.ZSTD,
}
_FINE = 10_000  # µs with 1 µs buckets
_MID = 1_000_000  # µs with 100 µs buckets
_MID_BUCKETS = (_MID - _FINE) // 100
_COARSE_BUCKETS = 6_000  # 10 ms buckets, up to ~61 s
_NBUCKETS = _FINE + _MID_BUCKETS + _COARSE_BUCKETS


class LatencyHistogram:
    """Counts of latencies in microseconds, in fixed buckets; percentiles read back in ms."""

    __slots__ = ("count", "counts", "max_us")

    def __init__(self) -> None:
        self.counts = [0] * _NBUCKETS
        self.count = 0
        self.max_us = 0

    def record(self, us: int) -> None:
        if us < _FINE:
            idx = us if us > 0 else 0
        elif us < _MID:
            idx = _FINE + (us - _FINE) // 100
        else:
            idx = min(_FINE + _MID_BUCKETS + (us - _MID) // 10_000, _NBUCKETS - 1)
        self.counts[idx] += 1
        self.count += 1
        if us > self.max_us:
            self.max_us = us

    @staticmethod
    def _bucket_value(idx: int) -> int:
        if idx < _FINE:
            return idx
        if idx < _FINE + _MID_BUCKETS:
            return _FINE + (idx - _FINE) * 100
        return _MID + (idx - _FINE - _MID_BUCKETS) * 10_000

    def percentile_ms(self, p: float) -> float:
        if self.count == 0:
            return 0.0
        rank = max(1, int(p / 100.0 * self.count + 0.5))
        seen = 0
        for idx, c in enumerate(self.counts):
            if c:
                seen += c
                if seen >= rank:
                    return min(self._bucket_value(idx), self.max_us) / 1000.0
        return self.max_us / 1000.0

    def merge(self, other: LatencyHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.count += other.count
        self.max_us = max(self.max_us, other.max_us)

    def summary(self) -> dict[str, float]:
        return {
            "p50": self.percentile_ms(50),
            "p95": self.percentile_ms(95),
            "p99": self.percentile_ms(99),
            "p999": self.percentile_ms(99.9),
            "max": self.max_us / 1000.0,
        }


def _fmt_latency(h: LatencyHistogram) -> str:
    s = h.summary()
    return (
        f"latency ms p50 {s['p50']:.2f} p95 {s['p95']:.2f} p99 {s['p99']:.2f} p999 {s['p999']:.2f} max {s['max']:.2f}"
    )


class _Stats:
    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.errors = 0
        self.interval = LatencyHistogram()
        self.total = LatencyHistogram()


# ---------------------------------------------------------------------------------------- produce


async def _collect_latencies(
    pending: deque[tuple[SendReceipt, float]], stats: _Stats, wake: asyncio.Event, stop: asyncio.Event
) -> None:
    """Record each message's publish latency when its batch's receipt arrives.

    The sender sets ``wake`` once per chunk of sends (not per message) and ``stop`` at the end.
    """
    clock = time.perf_counter
    while True:
        if not pending:
            if stop.is_set():
                return
            wake.clear()
            await wake.wait()
            continue
        fut = pending[0][0].batch_future()
        if not fut.done():
            await asyncio.wait([fut])
        now = clock()
        record = stats.interval.record
        # Everything already completed at `now` is recorded against the same clock reading;
        # consecutive messages share their batch's future, so check each future once.
        last: asyncio.Future[Any] | None = None
        ok = True
        while pending:
            receipt, t0 = pending[0]
            f = receipt.batch_future()
            if f is not last:
                if not f.done():
                    break
                last, ok = f, f.exception() is None
            pending.popleft()
            if ok:
                record(int((now - t0) * 1_000_000))
            else:
                stats.errors += 1


async def run_produce(args: argparse.Namespace) -> dict[str, Any]:
    payload = os.urandom(args.size)
    stats = _Stats()
    pending: deque[tuple[SendReceipt, float]] = deque()
    async with aio.Client(args.url, **client_security(args)) as client:
        producer = await client.create_producer(
            args.topic,
            batching_enabled=not args.no_batching,
            batching_max_messages=args.batch_max_messages,
            batching_max_allowed_size_in_bytes=args.batch_max_bytes,
            batching_max_publish_delay_ms=args.batch_delay_ms,
            compression_type=_COMPRESSION[args.compression],
            max_pending_messages=args.max_pending,
            send_timeout_millis=args.send_timeout_ms,
        )
        stop, wake = asyncio.Event(), asyncio.Event()
        collector = asyncio.create_task(_collect_latencies(pending, stats, wake, stop))
        reporter = asyncio.create_task(_report(stats, "produce", with_latency=True))
        clock = time.perf_counter
        start = clock()
        deadline = start + args.time if args.time > 0 else float("inf")
        limit = args.num_messages if args.num_messages > 0 else float("inf")
        # Send in chunks; between chunks yield to the loop so receipts, timers and the writer run.
        chunk = 1000 if args.rate <= 0 else max(1, min(1000, args.rate // 100))
        sent = 0
        send = producer.send_async
        append = pending.append
        size = args.size
        interrupted = _interrupt_event()
        try:
            while sent < limit and clock() < deadline and not interrupted.is_set():
                n = int(min(chunk, limit - sent))
                for _ in range(n):
                    receipt = await send(payload)
                    append((receipt, clock()))
                wake.set()
                sent += n
                stats.messages += n
                stats.bytes += n * size
                if args.rate > 0:
                    delay = start + sent / args.rate - clock()
                    if delay > 0:
                        await asyncio.sleep(delay)
                        continue
                await asyncio.sleep(0)
            await producer.flush()
        finally:
            _forget_interrupt()
            stop.set()
            wake.set()
            await collector
            reporter.cancel()
        elapsed = clock() - start
        stats.total.merge(stats.interval)
        await producer.close()
    summary = {
        "mode": "produce",
        "topic": args.topic,
        "messages": sent,
        "errors": stats.errors,
        "seconds": round(elapsed, 3),
        "msg_per_s": round(sent / elapsed, 1) if elapsed else 0.0,
        "mb_per_s": round(sent * size / elapsed / 1e6, 3) if elapsed else 0.0,
        "size": size,
        "batching": not args.no_batching,
        "compression": args.compression,
        "latency_ms": stats.total.summary(),
    }
    print(
        f"produce summary: {sent} msgs in {elapsed:.2f}s = {summary['msg_per_s']:,.0f} msg/s "
        f"{summary['mb_per_s']:.2f} MB/s errors {stats.errors} {_fmt_latency(stats.total)}",
        flush=True,
    )
    return summary


async def _report(stats: _Stats, mode: str, *, with_latency: bool) -> None:
    """Print one line per second; move the interval histogram into the total."""
    last_messages, last_bytes = stats.messages, stats.bytes
    last = time.perf_counter()
    while True:
        await asyncio.sleep(1.0)
        now = time.perf_counter()
        dt = now - last
        msgs, nbytes = stats.messages - last_messages, stats.bytes - last_bytes
        line = f"{mode}: {msgs / dt:,.0f} msg/s {nbytes / dt / 1e6:.2f} MB/s"
        if with_latency:
            interval, stats.interval = stats.interval, LatencyHistogram()
            line += " " + _fmt_latency(interval)
            stats.total.merge(interval)
        print(line, flush=True)
        last, last_messages, last_bytes = now, stats.messages, stats.bytes


# ---------------------------------------------------------------------------------------- consume


async def run_consume(args: argparse.Namespace) -> dict[str, Any]:
    stats = _Stats()
    async with aio.Client(args.url, **client_security(args)) as client:
        consumer = await client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=ConsumerType(args.type),
            initial_position=InitialPosition(args.initial_position),
            receiver_queue_size=args.receiver_queue_size,
        )
        reporter = asyncio.create_task(_report(stats, "consume", with_latency=False))
        clock = time.perf_counter
        start = clock()
        first: float | None = None
        limit = args.num_messages if args.num_messages > 0 else float("inf")
        received = 0
        nbytes = 0
        ack = consumer.acknowledge

        async def receive_all() -> None:
            nonlocal first, received, nbytes
            async with asyncio.timeout(args.time if args.time > 0 else None):
                async for msg in consumer:
                    if first is None:
                        first = clock()
                    received += 1
                    nbytes += len(msg.data())
                    await ack(msg)
                    if received & 1023 == 0:
                        stats.messages, stats.bytes = received, nbytes
                    if received >= limit:
                        break

        interrupted = _interrupt_event()
        receiving = asyncio.create_task(receive_all())
        waiting = asyncio.create_task(interrupted.wait())
        try:
            await asyncio.wait({receiving, waiting}, return_when=asyncio.FIRST_COMPLETED)
            receiving.cancel()  # Ctrl-C: stop receiving, and still print the summary below
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await receiving
        finally:
            _forget_interrupt()
            waiting.cancel()
            reporter.cancel()
        end = clock()
        await consumer.close()
    elapsed = end - (first if first is not None else start)
    summary = {
        "mode": "consume",
        "topic": args.topic,
        "messages": received,
        "seconds": round(elapsed, 3),
        "msg_per_s": round(received / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_s": round(nbytes / elapsed / 1e6, 3) if elapsed > 0 else 0.0,
    }
    print(
        f"consume summary: {received} msgs in {elapsed:.2f}s = {summary['msg_per_s']:,.0f} msg/s "
        f"{summary['mb_per_s']:.2f} MB/s",
        flush=True,
    )
    return summary


# ---------------------------------------------------------------------------------------- Ctrl-C


def _interrupt_event() -> asyncio.Event:
    """An event Ctrl-C (SIGINT) sets instead of raising ``KeyboardInterrupt``: a benchmark is
    usually stopped by hand, and, as pulsar-perf, it then still prints (and writes) its summary."""
    event = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers off the main thread
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, event.set)
    return event


def _forget_interrupt() -> None:
    """Give Ctrl-C back to its default meaning once the measured part is over."""
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


# ---------------------------------------------------------------------------------------- CLI


TOKEN_PLUGINS = ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "AuthenticationToken", "token")
TLS_PLUGINS = ("org.apache.pulsar.client.impl.auth.AuthenticationTls", "AuthenticationTls", "tls")


def client_security(args: argparse.Namespace) -> dict[str, Any]:
    """``Client`` keyword arguments from pulsar-perf's security flags: ``--auth-plugin`` /
    ``--auth-params`` (the token plugin with ``token:<jwt>`` or ``file:///path``; AuthenticationTls
    with ``tlsCertFile:<path>,tlsKeyFile:<path>``; ``--auth-params`` alone means a token) and the
    TLS options for a ``magnetar+ssl://`` URL. ``SystemExit`` names a bad combination."""
    plugin, params = args.auth_plugin, args.auth_params
    options: dict[str, Any] = {
        "tls_trust_certs_file_path": args.trust_cert_file,
        "tls_allow_insecure_connection": args.tls_allow_insecure,
        "tls_validate_hostname": args.tls_enable_hostname_verification,
    }
    if plugin is not None and plugin not in TOKEN_PLUGINS + TLS_PLUGINS:
        raise SystemExit(
            f"magnetar perf: unsupported --auth-plugin {plugin!r}; use {TOKEN_PLUGINS[0]} or {TLS_PLUGINS[0]}"
        )
    if plugin is not None and not params:
        raise SystemExit("magnetar perf: --auth-plugin needs --auth-params")
    try:
        if plugin in TLS_PLUGINS:
            options["authentication"] = tls_from_params(str(params))
        elif params:
            options["authentication"] = token_from_params(params)
    except ValueError as exc:
        raise SystemExit(f"magnetar perf: {exc}") from None
    return options


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")
    p.add_argument("--url", default=aio.DEFAULT_SERVICE_URL, help="service URL (magnetar[+ssl]://host:port)")
    # pulsar-perf's security flags
    p.add_argument(
        "--auth-plugin", default=None, help="org.apache.pulsar.client.impl.auth.AuthenticationToken | ...Tls"
    )
    p.add_argument("--auth-params", default=None, help="token:<jwt> | file:///path | tlsCertFile:<p>,tlsKeyFile:<p>")
    p.add_argument("--trust-cert-file", default=None, help="CA certificate(s) for a magnetar+ssl:// URL")
    p.add_argument("--tls-allow-insecure", action="store_true", help="accept any broker certificate")
    p.add_argument("--tls-enable-hostname-verification", action="store_true")
    p.add_argument("--num-messages", "-n", type=int, default=0, help="stop after N messages (0: no limit)")
    p.add_argument("--time", type=float, default=0, help="stop after SECONDS (0: no limit)")
    p.add_argument("--size", type=int, default=100, help="message size in bytes")
    p.add_argument("--json", metavar="FILE", help="write the summary as JSON to FILE")


def _run(coro_fn: Any, args: argparse.Namespace) -> int:
    try:
        summary = event_loop.run(coro_fn(args))
    except KeyboardInterrupt:
        return 130
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    return 0 if summary.get("errors", 0) == 0 else 1


def perf_produce(args: argparse.Namespace) -> int:
    return _run(run_produce, args)


def perf_consume(args: argparse.Namespace) -> int:
    return _run(run_consume, args)


def add_perf_commands(subparsers: Any) -> None:
    """Register ``perf produce`` and ``perf consume`` on the ``magnetar`` command's subparsers."""
    perf = subparsers.add_parser("perf", help="throughput and latency benchmarks")
    sub = perf.add_subparsers(dest="perf_command", required=True)

    prod = sub.add_parser("produce", help="publish as fast as allowed and report rate and latency")
    _common(prod)
    prod.add_argument("--rate", type=int, default=0, help="messages per second (0: unbounded)")
    prod.add_argument("--batch-max-messages", type=int, default=1000)
    prod.add_argument("--batch-max-bytes", type=int, default=128 * 1024)
    prod.add_argument("--batch-delay-ms", type=float, default=10)
    prod.add_argument("--no-batching", action="store_true")
    prod.add_argument("--compression", choices=sorted(_COMPRESSION), default="none")
    prod.add_argument("--max-pending", type=int, default=20_000, help="messages in flight at most")
    prod.add_argument("--send-timeout-ms", type=int, default=30_000)
    prod.set_defaults(func=perf_produce)

    cons = sub.add_parser("consume", help="consume as fast as possible and report the rate")
    _common(cons)
    cons.add_argument("--subscription", "-s", default="perf-sub")
    cons.add_argument("--type", choices=[t.value for t in ConsumerType], default="Exclusive")
    cons.add_argument("--initial-position", choices=["Latest", "Earliest"], default="Latest")
    cons.add_argument("--receiver-queue-size", type=int, default=5000)
    cons.set_defaults(func=perf_consume)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m magnetar.cli.perf produce TOPIC``), for use before the lead wires
    ``magnetar perf`` into the main command."""
    parser = argparse.ArgumentParser(prog="magnetar")
    add_perf_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
