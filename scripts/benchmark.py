#!/usr/bin/env python3
"""Standalone benchmark: the machine's raw ceilings next to Magnetar's figures, as medians.

Measures, each over --runs runs:
  1. raw durable LMDB commits/s (one small put + fsync per transaction);
  2. a plain asyncio loopback frame rate (100-byte msgpack frames, one producer, one decoder);
  3. ``magnetar perf produce`` and ``magnetar perf consume`` at the same time, as separate
     processes, against a fresh ``magnetar standalone`` (100-byte messages, batching on);
  4. publish latency at a fixed 50,000 msg/s (batching delay 1 ms, as pulsar-perf uses);
  5. with --backlog N: the standalone's RSS while N messages sit unconsumed, then the rate at
     which a consumer drains them from the bookie;
  6. with --cluster: the same pub/sub and latency runs against ``magnetar local-cluster``
     (etcd, 3 bookies at E3/Qw3/Qa2, 2 brokers), side by side with the standalone figures.

Usage: scripts/benchmark.py [--runs 3] [--backlog 10000000] [--cluster] [--json out.json]
       scripts/benchmark.py --workloads [--peers] [--cluster] [--runs 3] [--json out.json]  (issue 14's W1/W2)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb

from magnetar.protocol.framing import FrameDecoder, encode_frames


def raw_lmdb_commits(seconds: float) -> float:
    with tempfile.TemporaryDirectory() as d:
        env = lmdb.open(d, map_size=1 << 30, sync=True, metasync=True)
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            with env.begin(write=True) as txn:
                txn.put(n.to_bytes(8, "big"), b"x" * 100)
            n += 1
        rate = n / (time.perf_counter() - start)
        env.close()
        return rate


async def _loopback(seconds: float) -> float:
    count = 0
    done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        dec = FrameDecoder()
        while data := await reader.read(1 << 20):
            count += len(dec.feed(data))
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    chunk = encode_frames([{"t": "send", "payload": b"x" * 100}] * 1000)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        writer.write(chunk)
        await writer.drain()
    writer.close()
    await done.wait()
    elapsed = time.perf_counter() - start
    server.close()
    return count / elapsed


class Service:
    """A Magnetar server process for one measurement: started, awaited on its banner, stopped."""

    def __init__(self, argv: list[str], ready_marker: str, url: str | None = None) -> None:
        self.argv = argv
        self.ready_marker = ready_marker
        self.url = url or ""
        self.admin = ""  # the admin (web) URL, when the banner names it
        self.tls_url = ""  # the TLS listener's URL (``service-tls``), when the banner names it
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Service:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "magnetar.cli.main", "--log-level", "WARNING", *self.argv],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.ready_marker in line:
                m = re.search(r"service (\S+)", line)
                if m and not self.url:
                    self.url = m.group(1)
                m = re.search(r"admin (\S+)", line)
                if m:
                    self.admin = m.group(1)
                m = re.search(r"service-tls (\S+)", line)
                if m:
                    self.tls_url = m.group(1)
                break
        return self

    def rss_mib(self, field: str = "VmRSS") -> float:
        """Resident memory in MiB; ``RssAnon`` is the heap, ``RssFile`` mapped files (LMDB's map,
        which the kernel can drop at will: page cache, not process memory)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)


def standalone(data_dir: Path) -> Service:
    argv = ["standalone", "--data-dir", str(data_dir), "--port", "0", "--web-port", "0", "--bookie-port", "0"]
    return Service(argv, "standalone ready")


@contextlib.contextmanager
def fresh_standalone() -> Iterator[Service]:
    """A ``standalone`` on a temporary data directory, removed once it has stopped."""
    with tempfile.TemporaryDirectory() as d, standalone(Path(d)) as svc:
        yield svc


def admin(svc: Service, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
    """Call the service's admin REST API (``path`` from ``/admin/...``); the decoded JSON answer
    (None when empty). An error status raises."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        svc.admin + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
        return json.loads(raw) if raw.strip() else None


def each_run(runs: int, one_run: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """``one_run(r)`` for r in 0..runs-1, each row printed as ``run N: {json}`` once it is in."""
    rows = []
    for r in range(runs):
        row = one_run(r)
        print(f"run {r + 1}: {json.dumps(row)}", flush=True)
        rows.append(row)
    return rows


NA = "n/a"
# A table row of a rates benchmark: (figure key, label, key of the figure it is a ratio to, or None).
RatioRow = tuple[str, str, str | None]


def median_or_reason(values: list[Any]) -> float | str:
    """The median of one figure over the runs, or a run's ``n/a: reason`` when a run could not
    measure it (a path the client refuses), so a missing path shows instead of failing the table."""
    numbers = [v for v in values if isinstance(v, float)]
    if len(numbers) < len(values):
        return str(next(v for v in values if not isinstance(v, float)))
    return statistics.median(numbers)


def ratio(a: float | str, b: float | str) -> float | str:
    return a / b if isinstance(a, float) and isinstance(b, float) and b > 0 else NA


def ratio_summary(runs: list[dict[str, Any]], rows: list[RatioRow]) -> dict[str, Any]:
    """Medians of every row's figure over ``runs``, and ``<key>_ratio`` for the rows with a base."""
    summary: dict[str, Any] = {key: median_or_reason([run[key] for run in runs]) for key, _, _ in rows}
    for key, _, base in rows:
        if base:
            summary[f"{key}_ratio"] = ratio(summary[key], summary[base])
    return summary


def ratio_table(summary: dict[str, Any], rows: list[RatioRow]) -> str:
    """The rows as a text table: label, median msg/s, and the ratio to the row's base."""
    width = max(len("measurement"), *(len(label) for _, label, _ in rows)) + 4
    lines = [f"{'measurement':<{width}} {'median msg/s':>14} {'ratio':>8}", "-" * (width + 24)]
    for key, label, base in rows:
        value = summary[key]
        shown = f"{value:14,.0f}" if isinstance(value, float) else f"{value:>14}"
        r = summary[f"{key}_ratio"] if base else None
        shown_ratio = "" if r is None else (f"{r:8.2f}" if isinstance(r, float) else f"{r:>8}")
        lines.append(f"{label:<{width}} {shown} {shown_ratio}")
    return "\n".join(lines)


def report(runs: list[dict[str, Any]], summary: dict[str, Any], json_path: str | None) -> None:
    """Print the summary; with ``json_path``, write ``{"runs": ..., "summary": ...}`` there."""
    print(json.dumps(summary, indent=2))
    if json_path:
        Path(json_path).write_text(json.dumps({"runs": runs, "summary": summary}, indent=2))


def local_cluster(data_dir: Path) -> Service:
    """``magnetar local-cluster`` on ports clear of the defaults, so a standalone can run beside it."""
    argv = [
        "local-cluster",
        "--data-dir",
        str(data_dir),
        "--etcd-port",
        "2579",
        "--bookie-port",
        "3281",
        "--broker-port",
        "6750",
        "--web-port",
        "8180",
    ]
    return Service(argv, "local-cluster ready", url="magnetar://127.0.0.1:6750")


def perf(*args: str) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "--log-level", "WARNING", "perf", *args, "--json", out.name],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
        return result


def pub_sub_run(url: str, topic: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    with tempfile.NamedTemporaryFile(suffix=".json") as cout:
        consumer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "magnetar.cli.main",
                "--log-level",
                "WARNING",
                "perf",
                "consume",
                topic,
                "--url",
                url,
                "--subscription",
                "bench",
                "-n",
                str(n),
                "--json",
                cout.name,
            ],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(2)  # let the subscription exist before the first message (a benchmark, not a test)
        produced = perf("produce", topic, "--url", url, "-n", str(n), "--size", "100")
        consumer.wait(600)
        return produced, json.loads(Path(cout.name).read_text())


def measure(label: str, service: Callable[[Path], Service], runs: int, messages: int) -> dict[str, Any]:
    """Pub/sub throughput and latency at 50k msg/s, each run on a fresh service; medians."""
    pubs: list[float] = []
    subs: list[float] = []
    p50s: list[float] = []
    p99s: list[float] = []
    for run in range(runs):
        with tempfile.TemporaryDirectory() as d, service(Path(d)) as svc:
            produced, consumed = pub_sub_run(svc.url, f"{label}-bench-{run}", messages)
            pubs.append(produced["msg_per_s"])
            subs.append(consumed["msg_per_s"])
            lat = perf(
                "produce",
                f"{label}-lat-{run}",
                "--url",
                svc.url,
                "--rate",
                "50000",
                "--time",
                "10",
                "--size",
                "100",
                "--batch-delay-ms",
                "1",
            )
            p50s.append(lat["latency_ms"]["p50"])
            p99s.append(lat["latency_ms"]["p99"])
        print(
            f"{label} run {run}: publish {pubs[-1]:,.0f} msg/s (p99 {produced['latency_ms']['p99']} ms), "
            f"consume {subs[-1]:,.0f} msg/s; at 50k msg/s p50 {p50s[-1]} ms p99 {p99s[-1]} ms"
        )
    print(
        f"{label.upper()} MEDIAN publish {median(pubs):,.0f} msg/s, consume {median(subs):,.0f} msg/s, "
        f"p99 at 50k msg/s {median(p99s)} ms"
    )
    return {
        "publish_msg_per_s": {"median": median(pubs), "all": pubs},
        "consume_msg_per_s": {"median": median(subs), "all": subs},
        "latency_at_50k": {"p50_median": median(p50s), "p99_median": median(p99s), "p99_all": p99s},
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run_workloads(args: argparse.Namespace) -> int:
    """Delegate to benchmark_workloads.main, passing on the options both scripts share (its own
    defaults otherwise: its --messages means W1's count, not this script's pub/sub count)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import benchmark_workloads

    argv = ["--runs", str(args.runs)]
    argv += ["--peers"] * args.peers + ["--cluster"] * args.cluster
    argv += ["--json", args.json] if args.json else []
    return benchmark_workloads.main(argv)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each raw measurement")
    ap.add_argument("--messages", type=int, default=3_000_000, help="messages per pub/sub run")
    ap.add_argument("--backlog", type=int, default=0, help="messages for the backlog/memory run (0: skip)")
    ap.add_argument("--cluster", action="store_true", help="also measure a local cluster (E3/Qw3/Qa2)")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--workloads", action="store_true", help="run issue 14's W1/W2 workloads (scripts/benchmark_workloads.py)"
    )
    ap.add_argument("--peers", action="store_true", help="with --workloads: also Redis Streams and RabbitMQ streams")
    args = ap.parse_args()
    if args.workloads:
        return run_workloads(args)
    res: dict[str, Any] = {"runs": args.runs}

    lm = [raw_lmdb_commits(args.seconds) for _ in range(args.runs)]
    lb = [asyncio.run(_loopback(args.seconds)) for _ in range(args.runs)]
    res["raw_lmdb_durable_commits_per_s"] = {"median": median(lm), "all": lm}
    res["raw_asyncio_loopback_frames_per_s"] = {"median": median(lb), "all": lb}
    print(f"raw LMDB durable commits/s: median {median(lm):,.0f}  {[round(x) for x in lm]}")
    print(f"raw asyncio loopback frames/s: median {median(lb):,.0f}  {[round(x) for x in lb]}")

    res.update(measure("standalone", standalone, args.runs, args.messages))
    if args.cluster:
        res["cluster"] = measure("cluster", local_cluster, args.runs, args.messages)
        ratio = res["cluster"]["publish_msg_per_s"]["median"] / res["publish_msg_per_s"]["median"]
        res["cluster"]["ratio_to_standalone_publish"] = ratio
        print(f"cluster publish = {ratio:.2f}x standalone")

    if args.backlog:
        with tempfile.TemporaryDirectory() as d, standalone(Path(d)) as sa:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "magnetar.cli.main",
                    "--log-level",
                    "WARNING",
                    "perf",
                    "consume",
                    "backlog",
                    "--url",
                    sa.url,
                    "--subscription",
                    "idle",
                    "--time",
                    "1",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            produced = perf("produce", "backlog", "--url", sa.url, "-n", str(args.backlog), "--size", "100")
            rss_full = sa.rss_mib()
            anon_full = sa.rss_mib("RssAnon")
            disk = sum(f.stat().st_size for f in Path(d).rglob("*") if f.is_file()) / 2**20
            drained = perf(
                "consume",
                "backlog",
                "--url",
                sa.url,
                "--subscription",
                "idle",
                "-n",
                str(args.backlog),
                "--initial-position",
                "Earliest",
            )
            rss_after = sa.rss_mib()
            anon_after = sa.rss_mib("RssAnon")
            file_after = sa.rss_mib("RssFile")
        res["backlog"] = {
            "messages": args.backlog,
            "publish_msg_per_s": produced["msg_per_s"],
            "rss_mib_with_backlog": rss_full,
            "disk_mib": disk,
            "drain_msg_per_s": drained["msg_per_s"],
            "rss_mib_after_drain": rss_after,
        }
        print(
            f"backlog {args.backlog:,}: broker RSS {rss_full:.0f} MiB with it on disk ({disk:.0f} MiB); "
            f"drained at {drained['msg_per_s']:,.0f} msg/s; RSS after drain {rss_after:.0f} MiB "
            f"(heap {anon_after:.0f} MiB, mapped LMDB file {file_after:.0f} MiB; heap with backlog {anon_full:.0f} MiB)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
