"""The peers of scripts/benchmark_workloads.py: Redis Streams and RabbitMQ streams on loopback.

Each peer server is started as a child process on free loopback ports with its data in a
temporary directory, awaited on its own readiness signal, and stopped (SIGTERM, then waited on)
after each workload, so every run starts from an empty server as Magnetar's do. A missing server
binary makes that peer's row ``n/a (reason)`` instead of failing the benchmark.

Redis 7 (``redis-server --appendonly yes --appendfsync always --save ''``: every write is on disk
before its reply, the durability Magnetar's acks promise), driven with redis-py's asyncio API:
  producer  XADD of the 100-byte payload (one field), sent as pipelines (``transaction=False``)
            of up to 1,000 commands; W1 keeps 20 pipelines in flight at once (20 worker tasks,
            each on its own pooled connection), so at most 20,000 messages are unacknowledged,
            and each pipeline's replies are handed one by one to the per-message callback. In
            the open loop, every wake-up sends the messages then due as one pipeline, not awaited
            before the next, and each reply's arrival is that message's ack.
  consumer  a consumer group created before producing (``XGROUP CREATE ... 0 MKSTREAM``);
            ``XREADGROUP ... COUNT 1000`` then one ``XACK`` naming every id of that read. Each
            message is still acknowledged individually (by its own id, out of the group's pending
            list); only the round trip is shared, as pulsar-client's own acknowledgement grouping
            shares it (and as Magnetar's ``acknowledge`` does), where one XACK round trip per
            message would measure the network rather than the broker.
RabbitMQ 3.10 with the stream plugin, driven with rstream:
  producer  ``Producer.send_batch`` of the due messages (W1: chunks of 1,000, the batch size
            pulsar-client uses) with an ``on_publish_confirm`` callback, invoked per message; W1
            waits before a chunk that would take it past 20,000 unconfirmed. (rstream's ``send``
            buffers and flushes only every 0.5 s, which would put that delay into every latency.)
  consumer  a ``Consumer`` subscribed from the first offset, counting messages in its callback
            until all have come. Streams have no per-message acknowledgement: the consumer stores
            its offset (``store_offset``) every 10,000 messages and at the end, the stream's way
            of recording progress.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_workloads import (
    MAX_IN_FLIGHT,
    STEP_TIMEOUT_S,
    Schedule,
    System,
    announce_ready,
    consume_result,
    lines_until,
    percentiles_ms,
    stamp,
    unstamp,
)

START_TIMEOUT_S = 180.0
CHUNK = 1_000  # pipeline / batch size
FIELD = b"d"
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"  # the Debian wrapper in /usr/sbin would su


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (Linux's default if unreadable)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port that is free now, outside the kernel's ephemeral range, and not handed out
    before in this run.

    A server binds its ports seconds after they are picked (RabbitMQ boots for several), and a port
    from ``bind(0)`` is an ephemeral one: any outgoing connection meanwhile (the node's own to its
    epmd, say) may take it as its local port. A run failed that way, RabbitMQ's AMQP listener with
    ``eaddrinuse``. Ports below the ephemeral range are never given to outgoing connections."""
    low, high = _ephemeral_range()
    candidates = range(10_000, low) if low > 11_000 else range(high + 1, 65_536)
    rng = random.Random()
    for _ in range(1_000):
        port = rng.choice(candidates)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {candidates.start}-{candidates.stop - 1}")


class ServerProcess:
    """A peer server as a child process: started, awaited on a line of its log, its remaining log
    drained by a thread (so a full pipe never blocks it, and the tail explains a failure)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        self.name = argv[0]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            text=True,
        )
        self.tail: collections.deque[str] = collections.deque(maxlen=40)

    def wait_for_line(self, marker: str, timeout: float = START_TIMEOUT_S) -> None:
        assert self.proc.stdout is not None
        for line in lines_until(self.proc.stdout, timeout):
            self.tail.append(line)
            if marker in line:
                threading.Thread(target=self._drain, daemon=True).start()
                return
        raise RuntimeError(f"{self.name} exited or did not log {marker!r} within {timeout} s:\n{''.join(self.tail)}")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 1 << 16):
            self.tail.extend(chunk.decode(errors="replace").splitlines(keepends=True))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for_port(port: int, proc: subprocess.Popen[Any], timeout: float = START_TIMEOUT_S) -> None:
    """Poll until ``port`` accepts a connection (with a deadline; fails if the server exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before port {port} listened")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} did not listen within {timeout} s")


# ---------------------------------------------------------------- Redis


@contextlib.contextmanager
def redis_server() -> Iterator[dict[str, Any]]:
    """``redis-server`` on a free loopback port, AOF fsynced on every write, in a temporary dir."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d]
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        server = ServerProcess(argv)
        try:
            server.wait_for_line("Ready to accept connections")
            yield {"port": port}
        finally:
            server.stop()


def redis_subscribe(conn: dict[str, Any], stream: str, group: str) -> None:
    """The consumer group, from the stream's start, created (with the stream) before producing."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=conn["port"])
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    finally:
        client.close()


def _redis(conn: dict[str, Any]) -> Any:
    import redis.asyncio

    # A blocking pool: a send finding all 64 connections busy waits for one (that wait counts in
    # its latency) where the default pool would raise "Too many connections".
    pool = redis.asyncio.BlockingConnectionPool(
        host="127.0.0.1", port=conn["port"], max_connections=64, timeout=STEP_TIMEOUT_S
    )
    return redis.asyncio.Redis(connection_pool=pool)


async def redis_w1_produce(spec: dict[str, Any]) -> dict[str, Any]:
    r = _redis(spec)
    stream, n = spec["topic"], spec["messages"]
    acked = 0

    def on_ack(_index: int, reply: Any) -> None:  # the per-message completion callback
        nonlocal acked
        if not reply:
            raise RuntimeError(f"XADD failed: {reply!r}")
        acked += 1

    chunks = iter(range(0, n, CHUNK))

    async def worker() -> None:
        for lo in chunks:
            hi = min(n, lo + CHUNK)
            pipe = r.pipeline(transaction=False)
            for i in range(lo, hi):
                pipe.xadd(stream, {FIELD: stamp(i, 0)})
            for i, reply in zip(range(lo, hi), await pipe.execute(), strict=True):
                on_ack(i, reply)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(MAX_IN_FLIGHT // CHUNK)))
    elapsed = time.perf_counter() - start
    await r.aclose()
    if acked != n:
        raise RuntimeError(f"{acked} of {n} acked")
    return {"publish_msg_per_s": n / elapsed}


async def redis_consume(spec: dict[str, Any], ready: bool) -> dict[str, Any]:
    """XREADGROUP batches and one XACK of their ids, until ``messages`` have come; with ``ready``
    (W2) the group is created here first and end-to-end latency recorded."""
    r = _redis(spec)
    stream, group, n = spec["topic"], spec["subscription"], spec["messages"]
    if ready:
        await r.xgroup_create(stream, group, id="0", mkstream=True)
        announce_ready()
    e2e: list[int] = []
    got = 0
    deadline = time.monotonic() + STEP_TIMEOUT_S
    start = time.perf_counter()
    while got < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"got {got} of {n} in {STEP_TIMEOUT_S} s")
        reply = await r.xreadgroup(group, "c1", {stream: ">"}, count=CHUNK, block=1000)
        for _, entries in reply:
            ids = []
            for entry_id, fields in entries:
                if ready:
                    e2e.append(time.monotonic_ns() - unstamp(fields[FIELD])[0])
                ids.append(entry_id)
            if ids:
                await r.xack(stream, group, *ids)
                got += len(ids)
    elapsed = time.perf_counter() - start
    await r.aclose()
    return consume_result(n, elapsed, e2e if ready else None)


async def redis_w2_produce(spec: dict[str, Any]) -> dict[str, Any]:
    r = _redis(spec)
    stream = spec["topic"]
    schedule = Schedule.starting_now(spec["rate"], spec["seconds"])
    acks: list[int] = []

    async def send(lo: int, hi: int) -> None:
        pipe = r.pipeline(transaction=False)
        for i in range(lo, hi):
            pipe.xadd(stream, {FIELD: stamp(i, schedule.due(i))})
        for i, reply in zip(range(lo, hi), await pipe.execute(), strict=True):
            if not reply:
                raise RuntimeError(f"XADD failed: {reply!r}")
            acks.append(time.monotonic_ns() - schedule.due(i))

    await open_loop(schedule, send)
    await r.aclose()
    if len(acks) != schedule.count:
        raise RuntimeError(f"{len(acks)} of {schedule.count} XADDs acknowledged")
    return {"pub_ack": percentiles_ms(acks)}


async def open_loop(schedule: Schedule, send: Callable[[int, int], Any]) -> None:
    """Send messages [i, due) each time some are due, as tasks not awaited before the next; wait
    for the timetable's next slot when none is; at the end, wait for every send to complete. A
    send that failed fails the run (kept until the end, since finished tasks leave ``tasks``)."""
    tasks: set[asyncio.Task[None]] = set()
    errors: list[BaseException] = []

    def finished(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            errors.append(task.exception())  # type: ignore[arg-type]

    i = 0
    while i < schedule.count:
        due = schedule.due_before(time.monotonic_ns())
        if due == i:
            await asyncio.sleep(max(0, schedule.due(i) - time.monotonic_ns()) / 1e9)
            continue
        task = asyncio.create_task(send(i, due))
        tasks.add(task)
        task.add_done_callback(finished)
        i = due
    if tasks:
        await asyncio.wait_for(asyncio.wait(set(tasks)), STEP_TIMEOUT_S)
    if errors:
        raise errors[0]


# ---------------------------------------------------------------- RabbitMQ streams


@contextlib.contextmanager
def rabbitmq_server() -> Iterator[dict[str, Any]]:
    """A RabbitMQ node of its own (name, ports, epmd, cookie, data and logs all in a temporary
    dir), stream plugin on, in the foreground as a child process; ready once its stream port
    listens after the node has logged its startup as complete."""
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        stream_port, amqp_port, dist_port, epmd_port = (free_port() for _ in range(4))
        (base / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        (base / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{amqp_port}\n"
            f"stream.listeners.tcp.1 = 127.0.0.1:{stream_port}\n"
            "stream.advertised_host = 127.0.0.1\n"
            f"stream.advertised_port = {stream_port}\n"
        )
        (base / "rabbitmq-env.conf").write_text("")
        env = {
            **os.environ,
            "HOME": d,  # Erlang writes its cookie here
            "RABBITMQ_NODENAME": f"bench-{os.getpid()}@localhost",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp_port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
        # our own epmd, in the foreground, so that no daemon outlives the run
        epmd = ServerProcess(["epmd", "-port", str(epmd_port)], env=env)
        server: ServerProcess | None = None
        try:
            wait_for_port(epmd_port, epmd.proc)
            server = ServerProcess([RABBITMQ_SERVER], env=env, cwd=d)
            server.wait_for_line(" completed with ")  # "Server startup complete", on the log's stdout
            wait_for_port(stream_port, server.proc)
            yield {"port": stream_port}
        finally:
            if server is not None:
                server.stop()
            epmd.stop()


def _rstream_args(conn: dict[str, Any]) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": conn["port"], "username": "guest", "password": "guest"}


def rabbitmq_subscribe(conn: dict[str, Any], stream: str, _subscription: str) -> None:
    """Create the stream before producing: a stream keeps every message for any later reader."""
    from rstream import Producer

    async def create() -> None:
        producer = Producer(**_rstream_args(conn))
        await producer.start()
        await producer.create_stream(stream, exists_ok=True)
        await producer.close()

    asyncio.run(create())


async def rabbitmq_w1_produce(spec: dict[str, Any]) -> dict[str, Any]:
    from rstream import ConfirmationStatus, Producer, RawMessage

    stream, n = spec["topic"], spec["messages"]
    producer = Producer(**_rstream_args(spec))
    await producer.start()
    confirmed = 0
    failed = 0
    room = asyncio.Event()
    sent = 0

    def on_confirm(status: ConfirmationStatus) -> None:  # the per-message callback
        nonlocal confirmed, failed
        confirmed += 1
        failed += not status.is_confirmed
        if sent - confirmed + CHUNK <= MAX_IN_FLIGHT or confirmed == n:
            room.set()

    start = time.perf_counter()
    for lo in range(0, n, CHUNK):
        while sent - confirmed + CHUNK > MAX_IN_FLIGHT:
            room.clear()
            await asyncio.wait_for(room.wait(), STEP_TIMEOUT_S)
        batch = [RawMessage(stamp(i, 0), publishing_id=i + 1) for i in range(lo, min(n, lo + CHUNK))]
        sent += len(batch)
        await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
    while confirmed < n:
        room.clear()
        await asyncio.wait_for(room.wait(), STEP_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    await producer.close()
    if failed:
        raise RuntimeError(f"{failed} of {n} publishes were not confirmed")
    return {"publish_msg_per_s": n / elapsed}


async def rabbitmq_w2_produce(spec: dict[str, Any]) -> dict[str, Any]:
    from rstream import ConfirmationStatus, Producer, RawMessage

    stream = spec["topic"]
    producer = Producer(**_rstream_args(spec))
    await producer.start()
    schedule = Schedule.starting_now(spec["rate"], spec["seconds"])
    acks: list[int] = []
    failed = 0
    all_confirmed = asyncio.Event()

    def on_confirm(status: ConfirmationStatus) -> None:
        nonlocal failed
        acks.append(time.monotonic_ns() - schedule.due(status.message_id - 1))
        failed += not status.is_confirmed
        if len(acks) == schedule.count:
            all_confirmed.set()

    async def send(lo: int, hi: int) -> None:
        batch = [RawMessage(stamp(i, schedule.due(i)), publishing_id=i + 1) for i in range(lo, hi)]
        await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)

    await open_loop(schedule, send)
    await asyncio.wait_for(all_confirmed.wait(), STEP_TIMEOUT_S)
    await producer.close()
    if failed:
        raise RuntimeError(f"{failed} of {schedule.count} publishes were not confirmed")
    return {"pub_ack": percentiles_ms(acks)}


async def rabbitmq_consume(spec: dict[str, Any], ready: bool) -> dict[str, Any]:
    """Read the stream from its first offset until ``messages`` have come, storing the offset
    every 10,000; with ``ready`` (W2) the stream is created here first and end-to-end recorded."""
    from rstream import Consumer as StreamConsumer
    from rstream import ConsumerOffsetSpecification, MessageContext, OffsetType

    stream, name, n = spec["topic"], spec["subscription"], spec["messages"]
    consumer = StreamConsumer(**_rstream_args(spec))
    await consumer.start()
    if ready:
        await consumer.create_stream(stream, exists_ok=True)
    e2e: list[int] = []
    got = 0
    done = asyncio.Event()

    async def on_message(message: bytes, context: MessageContext) -> None:
        nonlocal got
        if got >= n:
            return
        if ready:
            e2e.append(time.monotonic_ns() - unstamp(message)[0])
        got += 1
        if got % 10_000 == 0 or got == n:
            await context.consumer.store_offset(stream, name, context.offset)
        if got == n:
            done.set()

    start = time.perf_counter()
    await consumer.subscribe(
        stream,
        on_message,
        offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
        subscriber_name=name,
    )
    if ready:
        announce_ready()
    await asyncio.wait_for(done.wait(), STEP_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    await consumer.close()
    return consume_result(n, elapsed, e2e if ready else None)


# ---------------------------------------------------------------- dispatch

ROLES: dict[str, dict[str, Callable[[dict[str, Any]], Any]]] = {
    "redis": {
        "w1-produce": redis_w1_produce,
        "w1-consume": lambda spec: redis_consume(spec, ready=False),
        "w2-produce": redis_w2_produce,
        "w2-consume": lambda spec: redis_consume(spec, ready=True),
    },
    "rabbitmq": {
        "w1-produce": rabbitmq_w1_produce,
        "w1-consume": lambda spec: rabbitmq_consume(spec, ready=False),
        "w2-produce": rabbitmq_w2_produce,
        "w2-consume": lambda spec: rabbitmq_consume(spec, ready=True),
    },
}


def import_client(system: str) -> None:
    """Import a peer's Python client before the child starts counting its CPU (``run_child``)."""
    import importlib

    importlib.import_module({"redis": "redis.asyncio", "rabbitmq": "rstream"}[system])


def run_role(system: str, role: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One peer producer or consumer process's work (its coroutine, run to completion)."""
    result: dict[str, Any] = asyncio.run(ROLES[system][role](spec))
    return result


def _missing(binary: str) -> str | None:
    return None if shutil.which(binary) or Path(binary).exists() else f"{binary} is not installed"


def systems() -> list[System]:
    """The peer rows; one whose server binary is absent carries the reason instead of running."""
    rabbit_missing = _missing(RABBITMQ_SERVER) or _missing("epmd")
    return [
        System("redis", "redis", redis_server, redis_subscribe, missing=_missing("redis-server")),
        System("rabbitmq", "rabbitmq", rabbitmq_server, rabbitmq_subscribe, missing=rabbit_missing),
    ]
