#!/usr/bin/env python3
"""Load-balancer benchmark: what one bundle move costs a producer, and how long a cluster takes to
spread its load onto a broker that joins, as medians over --runs runs.

Both run on a real cluster of processes (etcd, bookies, brokers: the tests' ``LocalCluster``, on free
ports), because a move is a handover between broker processes through the metadata store.

1. Move cost. Three brokers, a namespace with deduplication on, one producer sending 100-byte
   messages at a paced --rate (batching on, as a producer's defaults). The topic's bundle is unloaded
   --moves times (``PUT /admin/v2/namespaces/{t}/{ns}/{bundle}/unload?destinationBroker=``, towards
   each other broker in turn; shedding is off so only these moves happen). For each move: the
   *pause*, the longest gap between two consecutive acknowledgements from the unload request until
   the message sent a second after the unload answered is acknowledged, and the worst send-to-ack
   latency of the messages sent in that window (from their scheduled send time, so a send that
   waited for room counts its wait). Reported: p50 and p99 over the moves, next to the longest gap of
   a quiet stretch before the first move. At the end every message is read back: 0 lost and
   0 duplicated is checked, not assumed.
2. Balance time. Two brokers, a namespace of 16 bundles with one topic each under a steady stream,
   all placed on those two. A third broker is started; the time from its readiness banner until it
   owns bundles and no broker's usage (its largest resource share in ``broker-stats/load-report``) is
   above the average by more than ``loadBalancerBrokerThresholdShedderPercentage`` (the condition
   under which the ThresholdShedder stops), counted from the first sample of a stretch of 3 s in
   which every sample says so. Intervals are short (shedding every
   --shedding-interval seconds, usage sampled every 1.2 s) and the NIC is declared small
   (``--load-balancer-override-broker-nic-speed-gbps``) so that the stream is a real share of each
   broker's bandwidth. Reported in seconds and in shedding intervals, with the brokers' max/min
   message-rate ratio before the join and once balanced (a rate under 1 msg/s counts as 1, so the
   idle broker makes the first a large number) and their max/mean ratio.

Usage: scripts/benchmark_load_balancer.py [--runs 3] [--moves 20] [--rate 2000] [--bookies 3]
       [--shedding-interval 6] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.cluster: the tests' cluster
from benchmark import each_run, median_or_reason, report
from tests.support.cluster import LocalCluster, http_json, wait_until

from magnetar.broker.cluster.ownership import topic_hash
from magnetar.broker.loadbalance.broker_usage import weighted_max_usage
from magnetar.broker.loadbalance.bundle_ranges import equal
from magnetar.broker.loadbalance.model import BrokerLoad
from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.client import aio
from magnetar.client.options import InitialPosition, Result
from magnetar.exceptions import Timeout
from magnetar.protocol.topic_name import TopicName

SIZE = 100
TENANT = "public"
THRESHOLD = LoadBalancerSettings().broker_threshold_shedder_percentage / 100
TOPICS = 16  # the balance run's namespace: 16 bundles, one topic in each
TOPIC_RATE = 25.0  # msg/s per topic in the balance run
# 16 x 25 msg/s of 100 bytes is 40 KB/s, 20 KB/s per broker before the join: about 0.6 of this NIC.
NIC_GBPS = 0.00025
STEADY_S = 3.0  # how long the balance must hold (2.5 usage samples) to count, from its first sample
WINDOW_TAIL_S = 1.0  # how long after the unload's answer a move's window goes on
MOVE_FLAGS = ["--load-balancer-shedding-enabled", "false", "--load-balancer-auto-bundle-split-enabled", "false"]


def balance_flags(interval_s: float) -> list[str]:
    """Short intervals, so that a run takes seconds; the usage history keeps 20 % of the past (Pulsar:
    90 %) so that a relieved broker looks relieved at the next round, as in the cluster tests."""
    return [
        "--load-balancer-host-usage-check-interval-minutes",
        "0.02",
        "--load-balancer-report-update-min-interval-millis",
        "500",
        "--load-balancer-shedding-interval-minutes",
        str(interval_s / 60),
        "--load-balancer-shedding-grace-period-minutes",
        str(5 * interval_s / 60),
        "--load-balancer-override-broker-nic-speed-gbps",
        str(NIC_GBPS),
        "--load-balancer-bundle-unload-min-throughput-threshold",
        "0",
        "--load-balancer-history-resource-percentage",
        "0.2",
        "--load-balancer-auto-bundle-split-enabled",
        "false",
    ]


# ---------------------------------------------------------------------------------------- cluster


def new_cluster(base: Path, bookies: int, flags: list[str]) -> LocalCluster:
    quorums = (3, 3, 2) if bookies >= 3 else (bookies, bookies, bookies)
    e, qw, qa = quorums
    return LocalCluster(
        base, bookies=bookies, brokers=3, ensemble_size=e, write_quorum=qw, ack_quorum=qa, broker_args=flags
    )


def start(cluster: LocalCluster, brokers: int) -> None:
    """etcd, every bookie, then the first ``brokers`` brokers (the others stay unstarted)."""
    cluster.etcd.start()
    for b in cluster.bookies:
        b.spawn()
    for b in cluster.bookies:
        b.wait_ready()
    for br in cluster.brokers[:brokers]:
        br.spawn()
    for br in cluster.brokers[:brokers]:
        br.wait_ready()


def ok(result: tuple[int, Any], what: str) -> Any:
    status, doc = result
    if status not in (200, 204):
        raise RuntimeError(f"{what}: HTTP {status} {doc}")
    return doc


def live(cluster: LocalCluster) -> list[int]:
    return [i for i, p in enumerate(cluster.brokers) if p.alive]


def create_namespace(cluster: LocalCluster, ns: str, bundles: int, dedup: bool) -> None:
    base = cluster.admin_urls[live(cluster)[0]]
    url = f"{base}/admin/v2/namespaces/{TENANT}/{ns}"
    ok(http_json(url, "PUT", {"bundles": {"numBundles": bundles}}), f"create {ns}")
    if dedup:
        ok(http_json(f"{url}/deduplication", "POST", True), f"deduplication on {ns}")


def owners(cluster: LocalCluster, ns: str) -> dict[str, str]:
    """bundle -> owning broker id for ``ns``, from every live broker's ownedNamespaces."""
    out: dict[str, str] = {}
    for i in live(cluster):
        broker = cluster.broker_address(i).broker_id
        doc = ok(
            http_json(f"{cluster.admin_urls[i]}/admin/v2/brokers/local/{broker}/ownedNamespaces"), "ownedNamespaces"
        )
        for name in doc:
            if name.startswith(f"{TENANT}/{ns}/"):
                out[name.rsplit("/", 1)[1]] = broker
    return out


def reports(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """Every live broker's load report, sampled now, by broker id."""
    out = {}
    for i in live(cluster):
        doc = ok(http_json(cluster.admin_urls[i] + "/admin/v2/broker-stats/load-report"), "load-report")
        out[str(doc["brokerId"])] = doc
    return out


def usage(doc: dict[str, Any]) -> float:
    """A report's largest resource share, as the shedder weighs it with Pulsar's weights of 1 (a
    figure over its limit left out): the broker's own computation, on the JSON it answered."""
    return weighted_max_usage(BrokerLoad.from_doc(doc), LoadBalancerSettings())


def msg_rates(docs: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {b: round(float(r["msgRateIn"]) + float(r["msgRateOut"]), 1) for b, r in sorted(docs.items())}


def rate_ratio(rates: dict[str, float]) -> float:
    return max(rates.values()) / max(min(rates.values()), 1.0)


def max_mean(rates: dict[str, float]) -> float:
    mean = sum(rates.values()) / len(rates)
    return max(rates.values()) / mean if mean > 0 else math.inf


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 20 moves is the worst of them)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# ---------------------------------------------------------------------------------------- move cost


class PacedProducer:
    """One producer sending message ``i`` at ``start + i / rate``; keeps each one's scheduled send
    time and acknowledgement time (NaN until acknowledged), in send order."""

    def __init__(self, producer: Any, rate: float) -> None:
        self.producer = producer
        self.rate = rate
        self.scheduled: list[float] = []
        self.acked: list[float] = []
        self.failed = 0
        self.progress = asyncio.Event()
        self.start = 0.0
        self._stop = False

    def _on_result(self, i: int) -> Callable[[Any, Any], None]:
        def done(result: Any, _msg_id: Any) -> None:
            if result == Result.Ok:
                self.acked[i] = time.monotonic()
            else:
                self.failed += 1
            self.progress.set()

        return done

    async def run(self) -> None:
        self.start = time.monotonic()
        pad = b"x" * (SIZE - 8)
        while not self._stop:
            due = int((time.monotonic() - self.start) * self.rate) + 1
            while len(self.scheduled) < due and not self._stop:
                i = len(self.scheduled)
                self.scheduled.append(self.start + i / self.rate)
                self.acked.append(math.nan)
                await self.producer.send_async(i.to_bytes(8, "big") + pad, callback=self._on_result(i))
            await asyncio.sleep(0.002)  # the pace: the next messages fall due within 2 ms

    def stop(self) -> None:
        self._stop = True

    def index_at(self, t: float) -> int:
        """The first message scheduled at or after ``t``."""
        return max(0, math.ceil((t - self.start) * self.rate))

    async def wait_acked(self, i: int, within: float = 60.0) -> float:
        deadline = time.monotonic() + within
        while i >= len(self.acked) or math.isnan(self.acked[i]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"message {i} not acknowledged within {within}s")
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), 1.0)
            except TimeoutError:
                pass
        return self.acked[i]

    def longest_gap(self, first: int, last: int) -> float:
        """The longest gap between consecutive acknowledgements of messages ``first``..``last``."""
        times = [t for t in self.acked[first : last + 1] if not math.isnan(t)]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


async def read_back(url: str, topic: str, subscription: str, acked: set[int]) -> dict[str, int]:
    """Read the topic from the start; lost = acknowledged but not read, duplicated = read twice."""
    seen: dict[int, int] = {}
    async with aio.Client(url) as client:
        consumer = await client.subscribe(topic, subscription, initial_position=InitialPosition.Earliest)
        while True:
            try:
                msg = await consumer.receive(timeout_millis=3000 if len(seen) >= len(acked) else 30_000)
            except Timeout:
                break
            i = int.from_bytes(msg.data()[:8], "big")
            seen[i] = seen.get(i, 0) + 1
        await consumer.close()
    return {
        "read": sum(seen.values()),
        "lost": len(acked - seen.keys()),
        "duplicated": sum(n - 1 for n in seen.values()),
    }


async def move_cost(cluster: LocalCluster, moves: int, rate: float) -> dict[str, Any]:
    ns = f"moves-{uuid.uuid4().hex[:6]}"
    create_namespace(cluster, ns, 4, dedup=True)
    topic = f"persistent://{TENANT}/{ns}/stream"
    bundle = equal(4).find(topic_hash(TopicName.parse(topic)))
    url = cluster.service_url
    async with aio.Client(url, operation_timeout_seconds=30) as client:
        check = await client.subscribe(topic, "read-back", initial_position=InitialPosition.Earliest)
        await check.close()
        producer = await client.create_producer(
            topic, producer_name=f"bench-{ns}", max_pending_messages=20_000, block_if_queue_full=True
        )
        paced = PacedProducer(producer, rate)
        sender = asyncio.create_task(paced.run())
        try:
            await asyncio.sleep(3.0)  # a quiet stretch: the stream's own gaps, before any move
            quiet = paced.longest_gap(paced.index_at(paced.start + 1.0), paced.index_at(time.monotonic()) - 1)
            pauses: list[float] = []
            latencies: list[float] = []
            landed = 0
            for m in range(moves):
                owner = (await asyncio.to_thread(owners, cluster, ns)).get(bundle)
                others = [cluster.broker_address(i).broker_id for i in live(cluster)]
                others = [b for b in others if b != owner]
                destination = others[m % len(others)]
                t0 = time.monotonic()
                first = max(0, paced.index_at(t0) - 1)  # the last message sent before the request
                path = f"/admin/v2/namespaces/{TENANT}/{ns}/{bundle}/unload?destinationBroker={destination}"
                base = cluster.admin_urls[live(cluster)[0]]
                ok(await asyncio.to_thread(http_json, base + path, "PUT"), "unload")
                # The window ends a second after the unload answered: a producer closed just after the
                # answer still has its pause inside it, and the stream's own gaps are far shorter.
                back = paced.index_at(time.monotonic() + WINDOW_TAIL_S)
                await paced.wait_acked(back)
                pauses.append(paced.longest_gap(first, back))
                latencies.append(max(paced.acked[i] - paced.scheduled[i] for i in range(first + 1, back + 1)))
                if (await asyncio.to_thread(owners, cluster, ns)).get(bundle) == destination:
                    landed += 1
        finally:
            paced.stop()
            await sender
        await producer.flush()
        await producer.close()
    acked = {i for i, t in enumerate(paced.acked) if not math.isnan(t)}
    checked = await read_back(url, topic, "read-back", acked)
    return {
        "moves": len(pauses),
        "landed_on_destination": landed,
        "quiet_gap_ms": quiet * 1000,
        "pause_ms": [p * 1000 for p in pauses],
        "pause_p50_ms": percentile(pauses, 0.50) * 1000,
        "pause_p99_ms": percentile(pauses, 0.99) * 1000,
        "latency_p50_ms": percentile(latencies, 0.50) * 1000,
        "latency_p99_ms": percentile(latencies, 0.99) * 1000,
        "sent": len(paced.scheduled),
        "acked": len(acked),
        "failed": paced.failed,
        **checked,
    }


def move_run(run: int, moves: int, rate: float, bookies: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        cluster = new_cluster(Path(d), bookies, MOVE_FLAGS)
        try:
            start(cluster, 3)
            return asyncio.run(move_cost(cluster, moves, rate))
        except BaseException:
            print(cluster.log_tails(), file=sys.stderr)
            raise
        finally:
            cluster.close()


# ---------------------------------------------------------------------------------------- balance time


def one_topic_per_bundle(ns: str, bundles: int) -> list[str]:
    ranges = equal(bundles)
    found: dict[str, str] = {}
    i = 0
    while len(found) < bundles:
        name = f"persistent://{TENANT}/{ns}/t{i}"
        found.setdefault(ranges.find(topic_hash(TopicName.parse(name))), name)
        i += 1
    return sorted(found.values())


async def stream(url: str, topics: list[str], rate: float, stop: asyncio.Event, ready: asyncio.Event) -> int:
    """One producer per topic at ``rate`` msg/s each until ``stop``; the number of failed sends."""
    failed = 0

    def done(result: Any, _msg_id: Any) -> None:
        nonlocal failed
        if result != Result.Ok:
            failed += 1

    async with aio.Client(url, operation_timeout_seconds=30) as client:
        producers = await asyncio.gather(*(client.create_producer(t, block_if_queue_full=True) for t in topics))
        ready.set()
        began, sent, body = time.monotonic(), 0, b"x" * SIZE
        while not stop.is_set():
            due = int((time.monotonic() - began) * rate) + 1
            for _ in range(sent, due):
                for p in producers:
                    await p.send_async(body, callback=done)
            sent = max(sent, due)
            await asyncio.sleep(0.01)  # the pace: the next messages fall due within 10 ms
        for p in producers:
            await p.flush()
            await p.close()
    return failed


class Steady:
    """A condition that must hold on every poll for ``STEADY_S``: right after a move the rates of the
    brokers involved are briefly off (the producers flush what they queued meanwhile), and one
    sample taken then may look balanced when the next ones do not."""

    def __init__(self, condition: Callable[[], dict[str, Any] | None]) -> None:
        self.condition = condition
        self.since = math.nan

    def poll(self) -> dict[str, Any] | None:
        now, got = time.monotonic(), self.condition()
        if got is None:
            self.since = math.nan
            return None
        if math.isnan(self.since):
            self.since = now
        return got if now - self.since >= STEADY_S else None


def balanced(cluster: LocalCluster, ns: str, joined: str) -> dict[str, Any] | None:
    """The reports and owners once ``joined`` owns bundles and no broker is over the threshold."""
    if joined not in owners(cluster, ns).values():
        return None
    docs = reports(cluster)
    shares = {b: usage(r) for b, r in docs.items()}
    average = sum(shares.values()) / len(shares)
    if all(s <= average + THRESHOLD for s in shares.values()) and min(msg_rates(docs).values()) > 0:
        return {"reports": docs, "usage": shares}
    return None


async def balance_time(cluster: LocalCluster, interval_s: float) -> dict[str, Any]:
    ns = f"spread-{uuid.uuid4().hex[:6]}"
    create_namespace(cluster, ns, TOPICS, dedup=False)
    topics = one_topic_per_bundle(ns, TOPICS)
    stop, ready = asyncio.Event(), asyncio.Event()
    streaming = asyncio.create_task(stream(cluster.service_url, topics, TOPIC_RATE, stop, ready))
    try:
        await asyncio.wait_for(ready.wait(), 120)
        expected = TOPICS * TOPIC_RATE

        def loaded() -> dict[str, dict[str, Any]] | None:
            docs = reports(cluster)
            total = sum(float(r["msgRateIn"]) for r in docs.values())
            return (
                docs if total > 0.8 * expected and sum(int(r["numTopics"]) for r in docs.values()) >= TOPICS else None
            )

        before = await asyncio.to_thread(wait_until, loaded, 60, "the two brokers' reports to show the stream", 0.5)
        owners_before = await asyncio.to_thread(owners, cluster, ns)
        await asyncio.to_thread(cluster.brokers[2].start)
        joined_at = time.monotonic()
        joined = cluster.broker_address(2).broker_id
        before_rates = {**msg_rates(before), joined: 0.0}
        limit = 10 * interval_s + 30
        steady = Steady(lambda: balanced(cluster, ns, joined))
        try:
            after = await asyncio.to_thread(wait_until, steady.poll, limit, "balance", 0.5)
        except TimeoutError:
            reason = f"n/a: not balanced within {limit:.0f} s"
            return {key: reason for key in ("balance_s", "balance_intervals", *RATIO_KEYS)}
        took = steady.since - joined_at
        after_rates = msg_rates(after["reports"])
        owners_after = await asyncio.to_thread(owners, cluster, ns)
    finally:
        stop.set()
        failed = await streaming
    return {
        "balance_s": took,
        "balance_intervals": took / interval_s,
        "rates_before": before_rates,
        "rates_after": after_rates,
        "usage_after": {b: round(u, 3) for b, u in after["usage"].items()},
        "ratio_before": rate_ratio(before_rates),
        "ratio_after": rate_ratio(after_rates),
        "max_mean_before": max_mean(before_rates),
        "max_mean_after": max_mean(after_rates),
        "bundles_before": {b: list(owners_before.values()).count(b) for b in before_rates},
        "bundles_after": {b: list(owners_after.values()).count(b) for b in after_rates},
        "failed_sends": failed,
    }


def balance_run(run: int, interval_s: float, bookies: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        cluster = new_cluster(Path(d), bookies, balance_flags(interval_s))
        try:
            start(cluster, 2)
            return asyncio.run(balance_time(cluster, interval_s))
        except BaseException:
            print(cluster.log_tails(), file=sys.stderr)
            raise
        finally:
            cluster.close()


# ---------------------------------------------------------------------------------------- report


ROWS: list[tuple[str, str, str]] = [
    ("pause_p50_ms", "bundle move: producer pause p50", "ms"),
    ("pause_p99_ms", "bundle move: producer pause p99", "ms"),
    ("latency_p50_ms", "bundle move: worst send-to-ack p50", "ms"),
    ("latency_p99_ms", "bundle move: worst send-to-ack p99", "ms"),
    ("quiet_gap_ms", "no move: longest ack gap", "ms"),
    ("balance_s", "broker joins -> balanced", "s"),
    ("balance_intervals", "broker joins -> balanced", "intervals"),
    ("ratio_before", "max/min broker msg rate, at join (idle = 1)", "x"),
    ("ratio_after", "max/min broker msg rate, balanced", "x"),
    ("max_mean_before", "max/mean broker msg rate, at join", "x"),
    ("max_mean_after", "max/mean broker msg rate, balanced", "x"),
]
RATIO_KEYS = ("ratio_before", "ratio_after", "max_mean_before", "max_mean_after")


def table(summary: dict[str, Any]) -> str:
    width = max(len(label) for _, label, _ in ROWS) + 4
    lines = [f"{'measurement':<{width}} {'median':>10}  unit", "-" * (width + 24)]
    for key, label, unit in ROWS:
        value = summary[key]
        shown = f"{value:10.2f}" if isinstance(value, float) else f"{value:>10}"
        lines.append(f"{label:<{width}} {shown}  {unit}")
    lines.append(
        f"moves {summary['moves']} per run; lost {summary['lost']}, duplicated {summary['duplicated']}, "
        f"failed sends {summary['failed']} (all runs)"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--moves", type=int, default=20)
    ap.add_argument("--rate", type=float, default=2000.0, help="the moved topic's producer, msg/s")
    ap.add_argument("--bookies", type=int, default=3, help="3: E3/Qw3/Qa2 as local-cluster; fewer: all of them")
    ap.add_argument("--shedding-interval", type=float, default=6.0, help="seconds")
    ap.add_argument("--quick", action="store_true", help="one run, 5 moves, one bookie (a smoke test)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.runs, args.moves, args.bookies = 1, 5, 1

    def one_run(r: int) -> dict[str, Any]:
        return {
            **move_run(r, args.moves, args.rate, args.bookies),
            **balance_run(r, args.shedding_interval, args.bookies),
        }

    runs = each_run(args.runs, one_run)
    summary: dict[str, Any] = {key: median_or_reason([float_or(run[key]) for run in runs]) for key, _, _ in ROWS}
    summary["moves"] = args.moves
    for key in ("lost", "duplicated", "failed"):
        summary[key] = sum(int(run[key]) for run in runs)
    summary["shedding_interval_s"] = args.shedding_interval
    print(table(summary))
    report(runs, summary, args.json)
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1


def float_or(value: Any) -> float | str:
    return float(value) if isinstance(value, (int, float)) else str(value)


if __name__ == "__main__":
    raise SystemExit(main())
