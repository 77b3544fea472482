#!/usr/bin/env python3
"""The W1/W2 workloads of issue 14, side by side: Magnetar against Redis Streams and RabbitMQ streams.

Every system runs on this machine's loopback in the same invocation, each through its own Python
client, so each figure can be read as a ratio measured in one run rather than against numbers
taken elsewhere on other hardware. Each figure is the median over --runs runs; every workload of
every run gets a fresh server on a fresh data directory, so no run inherits another's backlog.

Workloads (100-byte messages):
  W1  --messages (300,000) messages from ONE producer process, run to completion with at most
      20,000 in flight and a per-message completion callback; then ONE consumer process drains
      them, receiving and acknowledging each message. Reported: publish msg/s (first send to the
      last acknowledgement of the flush) and consume msg/s (subscribe to the last acknowledge).
      The subscription (consumer group, stream) is created before producing so the backlog is kept.
  W2  an open loop at --rate (5,000) msg/s for --seconds (20) s with a consumer process running
      concurrently. Message i is due at ``start + i / rate``; the producer sends whatever is due
      each time it wakes and never waits for acks, and latencies count from the *scheduled* time
      (not the actual send call), so a stalled producer shows up in the figures instead of being
      hidden (no coordinated omission). Reported: publish-ack latency p50/p99 (scheduled send ->
      ack callback, in the producer process) and end-to-end latency p50/p99 (the scheduled send
      time stamped into the payload -> receipt in the consumer process). Both processes read
      ``time.monotonic_ns()`` (CLOCK_MONOTONIC on Linux, one clock for the whole machine), so
      the stamps compare across processes.
  50k the W2 machinery at --rate-high (50,000) msg/s for --seconds-high (10) s: publish-ack p99.

CPU per message (W2). Latency at W2 is set less by any one step than by how busy the machine is:
the producer, the server and the consumer share 2 cores, and a thread woken by a reply or by a
finished fsync waits for a core while both are taken. So every W2 run also reports the CPU
(user + system) each side spent per message: the producer and consumer processes measure their own
(``os.times`` around the workload, after their client library is imported), and the parent sums
every process it started for the server (the standalone, the local cluster's etcd, bookies and
broker, redis-server, RabbitMQ's beam) from the consumer's subscription to the end of the drain.
``cores`` is that total over the run's scheduled duration: the share of the machine W2 occupies.

Magnetar is driven as a Pulsar user would write it (``import magnetar as pulsar``):
``create_producer(topic, block_if_queue_full=True, max_pending_messages=20000,
batching_enabled=True)`` with pulsar-client's other defaults (batches of up to 1,000 messages /
128 KiB / 10 ms), ``send_async(payload, callback)`` per message and ``flush()``; a Shared
subscription at ``InitialPosition.Earliest`` with ``receive()`` + ``acknowledge()`` per message.
W1 batches (Magnetar's default: up to 1,000 messages / 128 KiB / 10 ms). W2 sends each message as
its own entry (``batching_enabled=False``, pulsar-client's default; ``--latency-batching on``
batches it instead), since a 10 ms batching delay would be most of every latency figure. The 50k
run batches with ``batching_max_publish_delay_ms=1``, as pulsar-perf does: one entry per message
cannot keep up with 50,000 msg/s, and its latency includes up to that 1 ms.
With --cluster the Magnetar side also runs against ``magnetar local-cluster`` (E3/Qw3/Qa2), and
the cluster/standalone ratios are reported.

The peers (--peers) and exactly how their clients are driven are described in scripts/peers.py.
Each producer and each consumer is its own process (this script, re-run with the hidden --child
argument), so no two share a GIL; the parent starts the servers, creates the subscriptions,
starts the children, waits for each with a timeout (a hang fails instead of blocking) and reads
their JSON results.

Usage: scripts/benchmark_workloads.py [--runs 3] [--messages 300000] [--rate 5000] [--seconds 20]
       [--rate-high 50000] [--seconds-high 10] [--peers] [--cluster] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import NA, each_run, fresh_standalone, local_cluster, median_or_reason, ratio, report

SCRIPT = Path(__file__).resolve()
SIZE = 100
MAX_IN_FLIGHT = 20_000
HIGH_RATE_DELAY_MS = 1.0  # the 50k run's batching delay (pulsar-perf's default)
STEP_TIMEOUT_S = 900.0  # one producer or consumer process; past this it has hung: fail, do not block
READY_TIMEOUT_S = 120.0  # a consumer process announcing that its subscription exists
DRAIN_TIMEOUT_S = 180.0  # W2's consumer getting the last messages once the producer has had all acked
_STAMP = struct.Struct(">QQ")  # scheduled send time (monotonic ns), message index
_PAD = b"x" * (SIZE - _STAMP.size)

FIGURES = [
    "publish_msg_per_s",
    "consume_msg_per_s",
    "pub_ack_p50_ms",
    "pub_ack_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "pub_ack_p99_high_ms",
]
RATE_FIGURES = ["publish_msg_per_s", "consume_msg_per_s"]
# W2's CPU per message (µs; module docstring) and the cores it kept busy
CPU_FIGURES = ["w2_cpu_producer_us", "w2_cpu_server_us", "w2_cpu_consumer_us", "w2_cpu_total_us", "w2_cores"]


# ---------------------------------------------------------------- shared by every system's children


def stamp(index: int, scheduled_ns: int) -> bytes:
    """A SIZE-byte payload carrying its scheduled send time, for the consumer's end-to-end figure."""
    return _STAMP.pack(scheduled_ns, index) + _PAD


def unstamp(payload: bytes) -> tuple[int, int]:
    """(scheduled send time in monotonic ns, index) from a payload made by ``stamp``."""
    scheduled_ns, index = _STAMP.unpack_from(payload)
    return scheduled_ns, index


def percentiles_ms(latencies_ns: list[int]) -> dict[str, float]:
    """Nearest-rank p50 and p99 in milliseconds (a benchmark figure, not an interpolation)."""
    if not latencies_ns:
        raise ValueError("no latencies were recorded")
    ordered = sorted(latencies_ns)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6

    return {"p50_ms": rank(0.50), "p99_ms": rank(0.99), "count": float(len(ordered))}


def consume_result(n: int, elapsed: float, e2e: list[int] | None) -> dict[str, Any]:
    """A consumer child's result: its msg/s, and with ``e2e`` (W2) its end-to-end percentiles."""
    out: dict[str, Any] = {"consume_msg_per_s": n / elapsed}
    if e2e is not None:
        out["e2e"] = percentiles_ms(e2e)
    return out


@dataclass(frozen=True)
class Schedule:
    """The open loop's fixed timetable: message i is due at ``start_ns + i * interval_ns``."""

    count: int
    start_ns: int
    interval_ns: float

    @classmethod
    def starting_now(cls, rate: float, seconds: float) -> Schedule:
        # a few ms of slack so the first message is not already late when the loop begins
        return cls(int(rate * seconds), time.monotonic_ns() + 5_000_000, 1e9 / rate)

    def due(self, index: int) -> int:
        return self.start_ns + int(index * self.interval_ns)

    def due_before(self, now_ns: int) -> int:
        """How many messages are due by ``now_ns`` (the index one past the last due)."""
        if now_ns < self.start_ns:
            return 0
        return min(self.count, int((now_ns - self.start_ns) / self.interval_ns) + 1)


def announce_ready() -> None:
    """Tell the parent (reading our stdout) that the subscription exists: producing may start."""
    print("ready", flush=True)


# ---------------------------------------------------------------- the Magnetar children


def _magnetar() -> Any:
    import magnetar as pulsar

    return pulsar


def _magnetar_producer(client: Any, topic: str, batching: bool, delay_ms: float = 10) -> Any:
    return client.create_producer(
        topic,
        block_if_queue_full=True,
        max_pending_messages=MAX_IN_FLIGHT,
        batching_enabled=batching,
        batching_max_publish_delay_ms=delay_ms,
    )


def magnetar_w1_produce(spec: dict[str, Any]) -> dict[str, Any]:
    """W1's producer: ``send_async`` with a per-message callback, then ``flush``; msg/s to the flush."""
    pulsar = _magnetar()
    client = pulsar.Client(spec["url"])
    try:
        producer = _magnetar_producer(client, spec["topic"], batching=True)
        n = spec["messages"]
        failures: list[Any] = []
        acked = 0

        def sent(result: Any, _msg_id: Any) -> None:
            nonlocal acked
            acked += 1
            if result != pulsar.Result.Ok:
                failures.append(result)

        start = time.perf_counter()
        for i in range(n):
            producer.send_async(stamp(i, 0), sent)
        producer.flush()
        elapsed = time.perf_counter() - start
        producer.close()
    finally:
        client.close()
    if failures or acked != n:
        raise RuntimeError(f"{acked} of {n} acked, {len(failures)} failed: {failures[:1]!r}")
    return {"publish_msg_per_s": n / elapsed}


def _magnetar_consume(spec: dict[str, Any], ready: bool) -> dict[str, Any]:
    """``receive`` + ``acknowledge`` per message until ``messages`` have come; with ``ready``,
    announce the subscription first (W2: the producer waits for it), and record end-to-end latency."""
    pulsar = _magnetar()
    client = pulsar.Client(spec["url"])
    n = spec["messages"]
    e2e: list[int] = []
    try:
        start = time.perf_counter()
        consumer = client.subscribe(
            spec["topic"],
            spec["subscription"],
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        if ready:
            announce_ready()
        timeout_ms = int(STEP_TIMEOUT_S * 1000)
        for _ in range(n):
            msg = consumer.receive(timeout_millis=timeout_ms)
            if ready:
                e2e.append(time.monotonic_ns() - unstamp(msg.data())[0])
            consumer.acknowledge(msg)
        elapsed = time.perf_counter() - start
        consumer.close()
    finally:
        client.close()
    return consume_result(n, elapsed, e2e if ready else None)


def magnetar_w1_consume(spec: dict[str, Any]) -> dict[str, Any]:
    return _magnetar_consume(spec, ready=False)


def magnetar_w2_consume(spec: dict[str, Any]) -> dict[str, Any]:
    return _magnetar_consume(spec, ready=True)


def magnetar_w2_produce(spec: dict[str, Any]) -> dict[str, Any]:
    """The open loop: each message sent with ``send_async`` once due, never waiting for acks;
    publish-ack latency is the ack callback's time minus the message's scheduled time."""
    pulsar = _magnetar()
    client = pulsar.Client(spec["url"])
    try:
        producer = _magnetar_producer(client, spec["topic"], spec["batching"], spec["delay_ms"])
        schedule = Schedule.starting_now(spec["rate"], spec["seconds"])
        acks: list[int] = []
        failures: list[Any] = []

        def on_ack(scheduled_ns: int) -> Callable[[Any, Any], None]:
            def sent(result: Any, _msg_id: Any) -> None:
                acks.append(time.monotonic_ns() - scheduled_ns)
                if result != pulsar.Result.Ok:
                    failures.append(result)

            return sent

        i = 0
        while i < schedule.count:
            due = schedule.due_before(time.monotonic_ns())
            if due == i:  # nothing due: wait for the timetable's next slot (the schedule, not an event)
                time.sleep(max(0, schedule.due(i) - time.monotonic_ns()) / 1e9)
                continue
            for j in range(i, due):
                t = schedule.due(j)
                producer.send_async(stamp(j, t), on_ack(t))
            i = due
        producer.flush()
        producer.close()
    finally:
        client.close()
    if failures or len(acks) != schedule.count:
        raise RuntimeError(f"{len(acks)} of {schedule.count} acked, {len(failures)} failed: {failures[:1]!r}")
    return {"pub_ack": percentiles_ms(acks)}


MAGNETAR_ROLES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "w1-produce": magnetar_w1_produce,
    "w1-consume": magnetar_w1_consume,
    "w2-produce": magnetar_w2_produce,
    "w2-consume": magnetar_w2_consume,
}


def run_child(role: str, spec: dict[str, Any], out: str) -> None:
    """The hidden --child entry point: run one producer or consumer, write its JSON result with
    the CPU the workload itself took (``cpu_s``: the client library is imported before counting)."""
    system, _, part = role.partition(":")
    if system == "magnetar":
        _magnetar()
        started = cpu_seconds()
        result = MAGNETAR_ROLES[part](spec)
    else:
        import peers

        peers.import_client(system)
        started = cpu_seconds()
        result = peers.run_role(system, part, spec)
    result["cpu_s"] = cpu_seconds() - started
    Path(out).write_text(json.dumps(result))


def cpu_seconds() -> float:
    """User + system CPU this process has used (every thread)."""
    t = os.times()
    return t.user + t.system


def server_cpu_seconds(exclude: set[int]) -> float:
    """User + system CPU used so far by every live process this benchmark started (the server's,
    however many it runs), except the producer and consumer processes in ``exclude``."""
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in exclude:
            continue
        try:
            t = proc.cpu_times()
        except psutil.Error:  # exited meanwhile: a helper, not the server
            continue
        total += t.user + t.system
    return total


# ---------------------------------------------------------------- the parent: processes and runs


def lines_until(stream: IO[str], timeout: float) -> Iterator[str]:
    """The lines a child process writes to ``stream`` (a pipe), until it closes or ``timeout``
    passes. Reads the descriptor itself: a buffered ``readline`` could hold lines that ``select``
    no longer sees, and wait for the next write with them unread."""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    pending = b""
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode(errors="replace") + "\n"


class Child:
    """One producer or consumer process: this script re-run with ``--child``; its result is the
    JSON file it writes. Its stderr goes to a file, so a failure reports the child's traceback."""

    def __init__(self, workdir: Path, role: str, spec: dict[str, Any]) -> None:
        self.role = role
        name = f"{role.replace(':', '-')}-{uuid.uuid4().hex[:6]}"
        self.out = workdir / f"{name}.json"
        self.err_path = workdir / f"{name}.err"
        self.err = self.err_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--child", role, "--spec", json.dumps(spec), "--out", str(self.out)],
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )

    def failure(self, what: str) -> RuntimeError:
        self.err.flush()
        return RuntimeError(f"{self.role}: {what}\n{self.err_path.read_text()[-3000:]}")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until the child prints ``ready`` (its subscription exists), its exit, or the deadline."""
        assert self.proc.stdout is not None
        for line in lines_until(self.proc.stdout, timeout):
            if line.strip() == "ready":
                return
        self.kill()
        raise self.failure(f"exited ({self.proc.returncode}) or was not ready within {timeout} s")

    def result(self, timeout: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self.failure(f"did not finish within {timeout} s") from None
        if rc != 0:
            raise self.failure(f"exited with {rc}")
        self.err.close()
        loaded: dict[str, Any] = json.loads(self.out.read_text())
        return loaded

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Workloads:
    """The sizes of one invocation (the issue's by default, shrunk by --quick)."""

    messages: int
    rate: float
    seconds: float
    rate_high: float
    seconds_high: float
    latency_batching: bool


@dataclass
class System:
    """One row of the table: how to get a fresh server (yielding the spec fields the children need
    to reach it) and how to create a subscription before producing."""

    name: str
    role: str  # the --child role prefix: magnetar, redis, rabbitmq
    server: Callable[[], contextlib.AbstractContextManager[dict[str, Any]]]
    subscribe: Callable[[dict[str, Any], str, str], None]
    missing: str | None = None  # why this system cannot run here (its server binary is absent)


def w1(system: System, w: Workloads, workdir: Path) -> dict[str, Any]:
    """Producer run to completion, then the consumer drains the backlog."""
    with system.server() as conn:
        spec = {**conn, "topic": topic("w1"), "subscription": "bench", "messages": w.messages}
        system.subscribe(conn, spec["topic"], spec["subscription"])
        produced = Child(workdir, f"{system.role}:w1-produce", spec).result()
        consumed = Child(workdir, f"{system.role}:w1-consume", spec).result()
    return {"publish_msg_per_s": produced["publish_msg_per_s"], "consume_msg_per_s": consumed["consume_msg_per_s"]}


def w2(
    system: System, rate: float, seconds: float, batching: bool, workdir: Path, delay_ms: float = 10
) -> dict[str, Any]:
    """The open loop with a concurrent consumer (started, and subscribed, first)."""
    with system.server() as conn:
        spec = {
            **conn,
            "topic": topic("w2"),
            "subscription": "bench",
            "rate": rate,
            "seconds": seconds,
            "messages": int(rate * seconds),
            "batching": batching,
            "delay_ms": delay_ms,
        }
        consumer = Child(workdir, f"{system.role}:w2-consume", spec)
        try:
            consumer.wait_ready()
            server_before = server_cpu_seconds({consumer.proc.pid})
            producer = Child(workdir, f"{system.role}:w2-produce", spec)
            produced = producer.result()
            consumed = consumer.result(DRAIN_TIMEOUT_S)
            server = server_cpu_seconds({consumer.proc.pid, producer.proc.pid}) - server_before
        finally:
            consumer.kill()
    n = spec["messages"]
    cpu = {
        "w2_cpu_producer_us": produced["cpu_s"] / n * 1e6,
        "w2_cpu_server_us": server / n * 1e6,
        "w2_cpu_consumer_us": consumed["cpu_s"] / n * 1e6,
    }
    cpu["w2_cpu_total_us"] = sum(cpu.values())
    cpu["w2_cores"] = cpu["w2_cpu_total_us"] * n / 1e6 / seconds
    return {"pub_ack": produced["pub_ack"], "e2e": consumed["e2e"], "cpu": cpu}


def topic(kind: str) -> str:
    return f"persistent://public/default/bench-{kind}-{uuid.uuid4().hex[:8]}"


def one_run(system: System, w: Workloads) -> dict[str, Any]:
    """All of a system's figures for one run; each workload on its own fresh server."""
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        row = w1(system, w, workdir)
        low = w2(system, w.rate, w.seconds, w.latency_batching, workdir)
        # Batched at 1 ms, as pulsar-perf produces: one entry per message cannot reach 50k msg/s.
        high = w2(system, w.rate_high, w.seconds_high, True, workdir, HIGH_RATE_DELAY_MS)
    row.update(
        pub_ack_p50_ms=low["pub_ack"]["p50_ms"],
        pub_ack_p99_ms=low["pub_ack"]["p99_ms"],
        e2e_p50_ms=low["e2e"]["p50_ms"],
        e2e_p99_ms=low["e2e"]["p99_ms"],
        pub_ack_p99_high_ms=high["pub_ack"]["p99_ms"],
        **low["cpu"],  # named as CPU_FIGURES
    )
    return row


def median_of_completed(values: list[Any]) -> float | str:
    """A figure's median over the runs that measured it. A peer's run that failed (its server did
    not start, say) is named below the table instead of hiding the runs that completed; with none
    completed, the first run's ``n/a (reason)``."""
    numbers = [v for v in values if isinstance(v, float)]
    return statistics.median(numbers) if numbers else median_or_reason(values)


def incomplete_runs(all_runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per system some of whose runs failed: how many completed, and why the others did not."""
    lines = []
    for name, rows in all_runs.items():
        failed = [(i, row) for i, row in enumerate(rows, 1) if not isinstance(row["publish_msg_per_s"], float)]
        if failed and len(failed) < len(rows):
            why = "; ".join(f"run {i}: {row['publish_msg_per_s']}" for i, row in failed)
            lines.append(f"{name}: medians of the {len(rows) - len(failed)} of {len(rows)} runs that completed ({why})")
    return lines


def guarded_run(system: System, w: Workloads) -> dict[str, Any]:
    """A peer's run, whose failure becomes ``n/a`` figures (with the reason) instead of ending
    the benchmark: Magnetar's own runs are not guarded, a failure there must fail."""
    if system.missing:
        return dict.fromkeys(FIGURES + CPU_FIGURES, f"{NA} ({system.missing})")
    try:
        return one_run(system, w)
    except Exception as exc:
        print(f"{system.name}: run failed: {exc}", file=sys.stderr)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return dict.fromkeys(FIGURES + CPU_FIGURES, f"{NA} ({reason})")


@contextlib.contextmanager
def _service(factory: Callable[[], contextlib.AbstractContextManager[Any]]) -> Iterator[dict[str, Any]]:
    with factory() as svc:
        yield {"url": svc.url}


@contextlib.contextmanager
def _cluster() -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as d, local_cluster(Path(d)) as svc:
        yield svc


def magnetar_subscribe(conn: dict[str, Any], topic_name: str, subscription: str) -> None:
    """Create the Shared subscription at Earliest, so the broker keeps W1's backlog for it."""
    pulsar = _magnetar()
    client = pulsar.Client(conn["url"])
    try:
        client.subscribe(
            topic_name,
            subscription,
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
    finally:
        client.close()


def magnetar_systems(cluster: bool) -> list[System]:
    systems = [System("magnetar", "magnetar", lambda: _service(fresh_standalone), magnetar_subscribe)]
    if cluster:
        systems.append(System("magnetar-cluster", "magnetar", lambda: _service(_cluster), magnetar_subscribe))
    return systems


# ---------------------------------------------------------------- the table

HEADER = (
    "| system | publish msg/s | consume msg/s | pub-ack p50 / p99 ms | end-to-end p50 / p99 ms "
    "| pub-ack p99 at {high} msg/s ms |"
)


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, float) else str(value)


def table(summary: dict[str, dict[str, Any]], rate_high: float) -> str:
    """One row per system, as the issue's table has it; a figure a system could not measure is
    ``n/a``, with the reason given once, in the row's first such cell."""
    high = f"{rate_high / 1000:g}k" if rate_high >= 1000 else f"{rate_high:g}"
    lines = [HEADER.format(high=high), "|---|---:|---:|---:|---:|---:|"]
    for name, s in summary.items():
        told: set[str] = set()

        def cell(key: str, fmt: str, s: dict[str, Any] = s, told: set[str] = told) -> str:
            value = s[key]
            if isinstance(value, float):
                return format(value, fmt)
            if str(value) in told:
                return NA
            told.add(str(value))
            return str(value)

        lines.append(
            f"| {name} | {cell('publish_msg_per_s', ',.0f')} | {cell('consume_msg_per_s', ',.0f')} "
            f"| {cell('pub_ack_p50_ms', '.2f')} / {cell('pub_ack_p99_ms', '.2f')} "
            f"| {cell('e2e_p50_ms', '.2f')} / {cell('e2e_p99_ms', '.2f')} "
            f"| {cell('pub_ack_p99_high_ms', '.2f')} |"
        )
    return "\n".join(lines)


def cpu_table(summary: dict[str, dict[str, Any]], rate: float) -> str:
    """W2's CPU per message on each side, and the cores the whole run kept busy (of this machine's)."""
    lines = [
        f"| system | W2 CPU per message, µs: producer / server / consumer = total | cores busy at {rate:,.0f} msg/s |",
        "|---|---:|---:|",
    ]
    for name, s in summary.items():
        parts = " / ".join(_num(s[f"w2_cpu_{k}_us"], ".0f") for k in ("producer", "server", "consumer"))
        cores = f"{_num(s['w2_cores'], '.2f')} of {os.cpu_count()}"
        lines.append(f"| {name} | {parts} = {_num(s['w2_cpu_total_us'], '.0f')} | {cores} |")
    return "\n".join(lines)


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Magnetar / each peer for the two rates (above 1: Magnetar is faster), and with --cluster
    the cluster / standalone ratio of the same."""
    base = summary["magnetar"]
    out: dict[str, dict[str, Any]] = {}
    for name, s in summary.items():
        if name == "magnetar":
            continue
        label = f"{name} / magnetar" if name == "magnetar-cluster" else f"magnetar / {name}"
        if name == "magnetar-cluster":
            out[label] = {key: ratio(s[key], base[key]) for key in RATE_FIGURES}
        else:
            out[label] = {key: ratio(base[key], s[key]) for key in RATE_FIGURES}
    return out


def ratio_lines(rs: dict[str, dict[str, Any]]) -> str:
    lines = ["| ratio | publish msg/s | consume msg/s |", "|---|---:|---:|"]
    for label, r in rs.items():
        lines.append(f"| {label} | {_num(r['publish_msg_per_s'], '.2f')} | {_num(r['consume_msg_per_s'], '.2f')} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=300_000, help="W1's message count")
    ap.add_argument("--rate", type=float, default=5_000, help="W2's open-loop rate, msg/s")
    ap.add_argument("--seconds", type=float, default=20, help="W2's duration")
    ap.add_argument("--rate-high", type=float, default=50_000, help="the high-rate latency run's rate, msg/s")
    ap.add_argument("--seconds-high", type=float, default=10, help="the high-rate latency run's duration")
    ap.add_argument(
        "--latency-batching",
        choices=["on", "off"],
        default="off",
        help="Magnetar producer batching in W2 (W1 batches; the high-rate run batches with a 1 ms delay)",
    )
    ap.add_argument("--peers", action="store_true", help="also run Redis Streams and RabbitMQ streams")
    ap.add_argument("--cluster", action="store_true", help="also run Magnetar's local-cluster (E3/Qw3/Qa2)")
    ap.add_argument("--quick", action="store_true", help="one small run of everything: a smoke test")
    ap.add_argument("--json", help="also write the runs and the summary to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        run_child(args.child, json.loads(args.spec), args.out)
        return 0
    batching = args.latency_batching == "on"
    if args.quick:
        runs, w = 1, Workloads(3_000, 500, 2, 2_000, 2, batching)
    else:
        runs = args.runs
        w = Workloads(args.messages, args.rate, args.seconds, args.rate_high, args.seconds_high, batching)
    systems = magnetar_systems(args.cluster)
    if args.peers:
        import peers

        systems += peers.systems()

    all_runs: dict[str, list[dict[str, Any]]] = {}
    summary: dict[str, dict[str, Any]] = {}
    for system in systems:
        print(f"== {system.name}", flush=True)
        measure = one_run if system.role == "magnetar" else guarded_run

        def run(_r: int, system: System = system, measure: Callable[[System, Workloads], Any] = measure) -> Any:
            return measure(system, w)

        rows = each_run(runs, run)
        all_runs[system.name] = rows
        summary[system.name] = {key: median_of_completed([row[key] for row in rows]) for key in FIGURES + CPU_FIGURES}

    print()
    print(table(summary, w.rate_high))
    print()
    print(cpu_table(summary, w.rate))
    print()
    rs = ratios(summary)
    if rs:
        print(ratio_lines(rs))
        print()
    for line in incomplete_runs(all_runs):
        print(line)
    print(
        f"medians of {runs} run(s); W1 {w.messages:,} msgs; W2 {w.rate:,.0f} msg/s for {w.seconds:g} s; "
        f"high rate {w.rate_high:,.0f} msg/s for {w.seconds_high:g} s; Magnetar batching: W1 on, "
        f"W2 {args.latency_batching}, high rate on with a {HIGH_RATE_DELAY_MS:g} ms delay"
    )
    report(
        [{"system": name, "runs": rows} for name, rows in all_runs.items()],
        {
            "systems": summary,
            "ratios": rs,
            "runs": runs,
            "workloads": w.__dict__,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
