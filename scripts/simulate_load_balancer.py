#!/usr/bin/env python3
"""Load-balancer simulator: the broker's own shedding, placement and split code over a simulated
cluster far larger than a test machine holds, against today's rendezvous-hash placement.

Placement, shedding and split decisions are pure functions of load reports
(``magnetar.broker.loadbalance``), so they run here unchanged. Each round is one shedding interval:
  1. every broker computes its load from the topics it owns and writes a load report only when
     Pulsar's update rule says so (a change over loadBalancerReportUpdateThresholdPercentage, or
     loadBalancerReportUpdateMaxIntervalMinutes since the last); the leader sees the last written;
  2. the leader decodes the new reports, runs the ThresholdShedder and places each unloaded
     bundle (LeastResourceUsageWithWeight, bundles assigned since a broker's report priced in);
  3. it splits the bundles over the namespace bundle limits (bundle_ranges: the configured
     algorithm over the topics' hashes); the halves are placed as new bundles;
  4. bundles without an owner (new, or of a lost broker) are placed as their first lookup would.
The workload: Zipf topic popularity, a hot tenant arriving (one namespace of 4 bundles with a tenth
of the cluster's traffic) and a broker lost. The hash column is the same workload placed by
rendezvous hash over the live brokers, bundles never moved or split.

Figures per round: bundles moved, the max/mean of the brokers' true usage (the weighted max
resource), the metadata writes a real cluster would make (report writes, and ownership writes: an
unload is 4 (release, destination hint, acquire, hint deleted), a split 4 (policies, release, two
acquires), a first placement 1) and the leader's CPU time (report decoding and the decisions).

Usage: scripts/simulate_load_balancer.py [--quick] [--brokers 100] [--bundles 50000] [--rounds 90]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "services"))

from magnetar.broker.loadbalance import bundle_ranges
from magnetar.broker.loadbalance.broker_usage import weighted_max_usage
from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats, ResourceUsage
from magnetar.broker.loadbalance.placement import LeastResourceUsageWithWeight, score
from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.broker.loadbalance.shedding import ThresholdShedder
from magnetar.broker.loadbalance.split_conditions import find_bundles_to_split

MSG_SIZE = 2048  # bytes
FANOUT = 1.0  # messages out per message in
MEAN_RATE_IN = 25_000.0  # msg/s in per broker, on average, before the hot tenant
CPU_AT_MEAN = 40.0  # percent CPU of a broker at the mean rate
NIC_BYTES = 10e9 / 8  # a 10 Gbit/s NIC, in bytes/s
TOPICS_PER_BUNDLE = 5
BUNDLES_PER_NAMESPACE = 50
ROUND_MS = 60_000  # one shedding interval (loadBalancerSheddingIntervalMinutes = 1)
HOT_NAMESPACE = "hot-tenant/ns"


@dataclass
class Bundle:
    rate_in: float = 0.0  # msg/s
    hashes: list[int] = field(default_factory=list)  # its topics' hashes

    def add(self, h: int, rate: float) -> None:
        self.hashes.append(h)
        self.rate_in += rate


@dataclass
class Workload:
    """Topics (hash, rate in) by namespace, and each namespace's bundle ranges."""

    hashes: dict[str, list[int]] = field(default_factory=dict)
    rates: dict[str, list[float]] = field(default_factory=dict)
    ranges: dict[str, bundle_ranges.BundleRanges] = field(default_factory=dict)

    def bundles(self, only: str | None = None) -> dict[str, Bundle]:
        """Full bundle name -> its topics, for every namespace or ``only`` one."""
        out: dict[str, Bundle] = {}
        for ns, ranges in self.ranges.items():
            if only is not None and ns != only:
                continue
            per = {name: Bundle() for name in ranges.names()}
            for h, rate in zip(self.hashes[ns], self.rates[ns], strict=True):
                per[ranges.find(h)].add(h, rate)
            out.update({f"{ns}/{name}": b for name, b in per.items()})
        return out


def build_workload(rng: random.Random, brokers: int, bundles: int, zipf: float) -> Workload:
    w = Workload()
    namespaces = max(1, bundles // BUNDLES_PER_NAMESPACE)
    topics = bundles * TOPICS_PER_BUNDLE
    ranks = list(range(1, topics + 1))
    rng.shuffle(ranks)
    weights = [r**-zipf for r in ranks]
    scale = brokers * MEAN_RATE_IN / sum(weights)
    for i in range(namespaces):
        ns = f"tenant-{i // 5}/ns-{i % 5}"
        w.hashes[ns], w.rates[ns] = [], []
        w.ranges[ns] = bundle_ranges.equal(BUNDLES_PER_NAMESPACE)
    names = list(w.ranges)
    for weight in weights:
        ns = names[rng.randrange(len(names))]
        w.hashes[ns].append(rng.getrandbits(32))
        w.rates[ns].append(weight * scale)
    return w


def add_hot_tenant(rng: random.Random, w: Workload, brokers: int) -> None:
    """One namespace of 4 bundles and 2,000 topics carrying a tenth more traffic than the cluster had."""
    n = 2000
    w.hashes[HOT_NAMESPACE] = [rng.getrandbits(32) for _ in range(n)]
    w.rates[HOT_NAMESPACE] = [0.1 * brokers * MEAN_RATE_IN / n] * n
    w.ranges[HOT_NAMESPACE] = bundle_ranges.equal(4)


def broker_load(
    broker: str, owned: Sequence[str], table: Mapping[str, Bundle], *, with_stats: bool = True
) -> BrokerLoad:
    """The load report a broker would write (usages from a simple cost model of its traffic);
    without ``with_stats`` only the totals, cheaper for deciding whether to write one."""
    stats: dict[str, BundleStats] = {}
    rate_in = 0.0
    topics = 0
    for bundle in owned:
        r, n = table[bundle].rate_in, len(table[bundle].hashes)
        rate_in += r
        topics += n
        if not with_stats:
            continue
        stats[bundle] = BundleStats(
            msg_rate_in=r,
            msg_rate_out=r * FANOUT,
            msg_throughput_in=r * MSG_SIZE,
            msg_throughput_out=r * FANOUT * MSG_SIZE,
            consumer_count=n,
            producer_count=n,
            topics=n,
        )
    # A saturated broker shows 100% (its limit), not more: over 100% the usage would be taken for a
    # wrong limit and left out.
    cpu = min(100.0, CPU_AT_MEAN * rate_in / MEAN_RATE_IN)
    return BrokerLoad(
        broker,
        cpu=ResourceUsage(cpu, 100.0),
        memory=ResourceUsage(30.0 + topics * 0.002, 100.0),
        bandwidth_in=ResourceUsage(rate_in * MSG_SIZE, NIC_BYTES),
        bandwidth_out=ResourceUsage(rate_in * FANOUT * MSG_SIZE, NIC_BYTES),
        msg_rate_in=rate_in,
        msg_rate_out=rate_in * FANOUT,
        msg_throughput_in=rate_in * MSG_SIZE,
        msg_throughput_out=rate_in * FANOUT * MSG_SIZE,
        num_topics=topics,
        num_bundles=len(owned),
        num_consumers=topics,
        num_producers=topics,
        bundles=set(owned) if with_stats else set(),
        last_stats=stats,
    )


def percent_change(old: float, new: float) -> float:
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return 100.0 * abs(new - old) / old


def needs_update(old: BrokerLoad | None, new: BrokerLoad, age_ms: int, settings: LoadBalancerSettings) -> bool:
    """Pulsar's rule for writing a new load report."""
    if old is None or age_ms >= settings.report_update_max_interval_minutes * 60_000:
        return True
    change = max(
        100.0 * abs(old.max_resource_usage() - new.max_resource_usage()),
        percent_change(old.msg_rate, new.msg_rate),
        percent_change(old.throughput, new.throughput),
        percent_change(old.num_bundles, new.num_bundles),
    )
    return change > settings.report_update_threshold_percentage


def max_over_mean(usages: Sequence[float]) -> float:
    mean = sum(usages) / len(usages)
    return max(usages) / mean if mean else 0.0


def rendezvous(bundle: str, live: Sequence[str]) -> str:
    return max(live, key=lambda b: score(bundle, b))


@dataclass
class RoundRow:
    round: int
    event: str
    moved: int = 0
    splits: int = 0
    placed: int = 0
    lb_ratio: float = 0.0
    hash_ratio: float = 0.0
    report_writes: int = 0
    ownership_writes: int = 0
    leader_cpu_ms: float = 0.0
    stale: int = 0


class Simulation:
    def __init__(self, brokers: int, bundles: int, seed: int, zipf: float) -> None:
        self.rng = random.Random(seed)
        self.settings = LoadBalancerSettings()
        self.brokers = [f"broker-{i:03d}" for i in range(brokers)]
        self.live = list(self.brokers)
        self.work = build_workload(self.rng, brokers, bundles, zipf)
        self.table = self.work.bundles()
        start = {b: rendezvous(b, self.live) for b in self.table}
        self.owner = dict(start)  # balanced cluster
        self.hash_owner = dict(start)  # today's placement
        self.shedder = ThresholdShedder()
        self.written: dict[str, tuple[int, BrokerLoad]] = {}  # broker -> (time, report as written)
        self.view: dict[str, BrokerLoad] = {}  # the leader's decoded reports
        self.assigned: dict[str, list[str]] = {}  # broker -> bundles placed since its report
        self.recent: dict[str, int] = {}  # bundle -> unload time
        self.now = 0

    def owned(self, owner: Mapping[str, str]) -> dict[str, list[str]]:
        by: dict[str, list[str]] = {b: [] for b in self.live}
        for bundle, broker in owner.items():
            by[broker].append(bundle)
        return by

    def usages(self, owner: Mapping[str, str]) -> list[float]:
        by = self.owned(owner)
        return [
            weighted_max_usage(broker_load(b, by[b], self.table, with_stats=False), self.settings) for b in self.live
        ]

    def place(self, chooser: LeastResourceUsageWithWeight, bundle: str, exclude: str = "") -> str:
        candidates = [b for b in self.live if b != exclude] or self.live
        broker = chooser.select(candidates, bundle, self.assigned) or candidates[0]
        self.assigned.setdefault(broker, []).append(bundle)
        self.owner[bundle] = broker
        return broker

    def step(self, row: RoundRow) -> None:
        self.now += ROUND_MS
        by = self.owned(self.owner)
        cpu = 0.0
        for broker in self.live:
            load = broker_load(broker, by[broker], self.table, with_stats=False)
            at, old = self.written.get(broker, (0, None))
            if needs_update(old, load, self.now - at, self.settings):
                raw = broker_load(broker, by[broker], self.table).to_json()
                self.written[broker] = (self.now, load)
                self.assigned.pop(broker, None)
                row.report_writes += 1
                t0 = time.process_time()
                self.view[broker] = BrokerLoad.from_json(raw, broker)
                cpu += time.process_time() - t0
        for gone in set(self.view) - set(self.live):
            del self.view[gone], self.written[gone]
        t0 = time.process_time()
        plan = self.shedder.find_bundles_to_unload(self.view, self.settings, self.now, self.recent)
        chooser = LeastResourceUsageWithWeight(self.view, self.settings, self.shedder.history.snapshot())
        for unload in plan.unloads:
            if self.owner.get(unload.bundle) != unload.broker:
                row.stale += 1  # the report is older than a move or split: the unload would fail
                continue
            self.place(chooser, unload.bundle, exclude=unload.broker)
            self.recent[unload.bundle] = self.now
            row.moved += 1
            row.ownership_writes += 4
        counts = {ns: r.count for ns, r in self.work.ranges.items()}
        for split in find_bundles_to_split(self.view, self.settings, counts):
            if self.owner.get(split.bundle) != split.broker:
                row.stale += 1
                continue
            if self.split(chooser, split.bundle):
                row.splits += 1
                row.ownership_writes += 4
        cpu += time.process_time() - t0
        for bundle in self.table:
            if bundle not in self.owner:
                self.place(chooser, bundle)
                row.placed += 1
                row.ownership_writes += 1
        row.leader_cpu_ms = cpu * 1000.0

    def split(self, chooser: LeastResourceUsageWithWeight, bundle: str) -> bool:
        ns, name = bundle.rsplit("/", 1)
        lo, hi = bundle_ranges.parse_bundle(name)
        algorithm = self.settings.default_namespace_bundle_split_algorithm
        parent = self.table[bundle]
        at = bundle_ranges.split_boundary(lo, hi, algorithm, parent.hashes)
        if at is None or not lo < at < hi:
            return False
        self.work.ranges[ns] = self.work.ranges[ns].with_split(name, at)
        del self.owner[bundle], self.table[bundle]
        rates = dict(zip(self.work.hashes[ns], self.work.rates[ns], strict=True))
        low, high = Bundle(), Bundle()
        for h in parent.hashes:
            (low if h < at else high).add(h, rates[h])
        for child, part in ((bundle_ranges.format_bundle(lo, at), low), (bundle_ranges.format_bundle(at, hi), high)):
            self.table[f"{ns}/{child}"] = part
            self.place(chooser, f"{ns}/{child}")
        return True


def run(args: argparse.Namespace) -> tuple[list[RoundRow], float]:
    """The rounds, and the hottest topic's traffic over a mean broker's before the hot tenant."""
    sim = Simulation(args.brokers, args.bundles, args.seed, args.zipf)
    floor = max(max(r) for r in sim.work.rates.values() if r) / MEAN_RATE_IN
    hash_work = Workload(dict(sim.work.hashes), dict(sim.work.rates), dict(sim.work.ranges))
    hash_table = hash_work.bundles()
    hot_at, lost_at = events(args.rounds)
    rows: list[RoundRow] = []
    for r in range(1, args.rounds + 1):
        event = ""
        if r == hot_at:
            event = "hot tenant"
            add_hot_tenant(sim.rng, sim.work, args.brokers)
            sim.table.update(sim.work.bundles(HOT_NAMESPACE))
            hash_work.hashes[HOT_NAMESPACE] = sim.work.hashes[HOT_NAMESPACE]
            hash_work.rates[HOT_NAMESPACE] = sim.work.rates[HOT_NAMESPACE]
            hash_work.ranges[HOT_NAMESPACE] = bundle_ranges.equal(4)
            hash_table.update(hash_work.bundles(HOT_NAMESPACE))
            for bundle in hash_table:
                sim.hash_owner.setdefault(bundle, rendezvous(bundle, sim.live))
        if r == lost_at:
            event = "broker lost"
            by = sim.owned(sim.owner)
            # the broker with the most bundles: the most placements to make at once
            lost = max(sim.live, key=lambda b: (len(by[b]), b))
            sim.live.remove(lost)
            for bundle in [b for b, o in sim.owner.items() if o == lost]:
                del sim.owner[bundle]
            for bundle, o in sim.hash_owner.items():
                if o == lost:
                    sim.hash_owner[bundle] = rendezvous(bundle, sim.live)
        row = RoundRow(r, event)
        sim.step(row)
        row.lb_ratio = max_over_mean(sim.usages(sim.owner))
        saved = sim.table
        sim.table = hash_table
        row.hash_ratio = max_over_mean(sim.usages(sim.hash_owner))
        sim.table = saved
        rows.append(row)
    return rows, floor


def events(rounds: int) -> tuple[int, int]:
    """The rounds the hot tenant arrives and a broker is lost."""
    return max(2, rounds // 6), max(3, rounds * 7 // 12)


def quiet_after(rows: Sequence[RoundRow], start: int, end: int) -> str:
    """Rounds from ``start`` to the first round (before ``end``) with no unload, split or placement."""
    for row in rows:
        if start <= row.round < end and row.moved == 0 and row.splits == 0 and row.placed == 0:
            return str(row.round - start)
    return "-"


def settled_after(rows: Sequence[RoundRow], start: int, end: int) -> str:
    """Rounds from ``start`` to the first round (before ``end``) whose LB max/mean is within 5% of
    the phase's best: where the balancer got to, whatever the floor the hottest topic sets."""
    phase = [row for row in rows if start <= row.round < end]
    best = min(row.lb_ratio for row in phase)
    return next(str(row.round - start) for row in phase if row.lb_ratio <= best * 1.05)


def settled_ratio(rows: Sequence[RoundRow], start: int, end: int, attr: str) -> float:
    """The median max/mean over a phase's last 5 rounds (one round's hot potato aside)."""
    tail = [float(getattr(row, attr)) for row in rows if start <= row.round < end][-5:]
    return statistics.median(tail)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--brokers", type=int, default=100)
    parser.add_argument("--bundles", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=90)
    parser.add_argument("--zipf", type=float, default=0.8, help="topic popularity exponent")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--quick", action="store_true", help="10 brokers, 2,000 bundles, 24 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.brokers, args.bundles, args.rounds = 10, 2000, 24
    started = time.monotonic()
    rows, floor = run(args)
    print(f"{args.brokers} brokers, {args.bundles} bundles, Zipf {args.zipf}, one round = one shedding interval")
    print(
        "round  event         moved  splits  placed  stale  max/mean LB  max/mean hash"
        "  report writes  ownership writes  leader CPU ms"
    )
    for x in rows:
        print(
            f"{x.round:5d}  {x.event:12s}  {x.moved:5d}  {x.splits:6d}  {x.placed:6d}  {x.stale:5d}  {x.lb_ratio:11.2f}"
            f"  {x.hash_ratio:13.2f}  {x.report_writes:13d}  {x.ownership_writes:16d}  {x.leader_cpu_ms:13.1f}"
        )
    hot_at, lost_at = events(args.rounds)
    phases = (
        (1, "the start", hot_at),
        (hot_at, "the hot tenant", lost_at),
        (lost_at, "the broker lost", len(rows) + 1),
    )
    print("rounds to converge:")
    for start, what, end in phases:
        print(
            f"  after {what}: to a round without unload, split or placement {quiet_after(rows, start, end)}; "
            f"to within 5% of the phase's best max/mean {settled_after(rows, start, end)}; "
            f"max/mean at the phase's end (median of 5 rounds): LB {settled_ratio(rows, start, end, 'lb_ratio'):.2f}, "
            f"hash {settled_ratio(rows, start, end, 'hash_ratio'):.2f}"
        )
    print(f"  (the hottest topic alone carries {floor:.2f} x a mean broker's traffic: no move or split goes under it)")
    total = sum(x.moved for x in rows)
    writes = sum(x.report_writes + x.ownership_writes for x in rows)
    print(
        f"bundles moved in all: {total}; metadata writes per round: mean {writes / len(rows):.0f}, "
        f"max {max(x.report_writes + x.ownership_writes for x in rows)}; "
        f"leader CPU per round: max {max(x.leader_cpu_ms for x in rows):.0f} ms"
    )
    print(f"simulated in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
