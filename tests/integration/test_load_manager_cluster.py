"""The load manager on a real 3-broker cluster (etcd, 3 bookies, 3 broker processes), one per module.

Short intervals through the broker flags: usage is sampled every 1.2 s, reports may be written every
0.5 s, the leader sheds every 6 s, and the NIC is declared tiny
(``--load-balancer-override-broker-nic-speed-gbps``) so that a few KB/s of test traffic is a
measurable share of a broker. The usage history keeps 20 % of the past instead of Pulsar's 90 %,
so that a broker that was just relieved looks relieved at the next round (a test has seconds, not
Pulsar's minutes). ``loadBalancerNamespaceBundleMaxTopics`` is 6, so a bundle of ten topics splits.

Shown here: the leader is elected and every broker answers it; load reports appear and follow
traffic; sixteen deduplicated topics placed on one broker are spread by shedding within two
intervals, the brokers' message rates evened out, with nothing lost, duplicated or out of order;
a bundle of ten topics splits by itself under running producers and consumers, losing nothing,
its halves placed by load; and kill -9 of the leader brings a new one within a lease, which goes on
shedding.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from tests.faults.nemesis import in_thread
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster, http_json, wait_until

from magnetar.broker.cluster.ownership import topic_hash
from magnetar.broker.loadbalance.broker_usage import weighted_max_usage
from magnetar.broker.loadbalance.bundle_ranges import equal
from magnetar.broker.loadbalance.model import BrokerLoad
from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.protocol.topic_name import TopicName

pytestmark = [pytest.mark.timeout(300)]

SHEDDING_INTERVAL_S = 6.0
LEASE_TTL = 3.0
THRESHOLD = 0.10  # loadBalancerBrokerThresholdShedderPercentage, as a fraction
BROKER_FLAGS = [
    "--load-balancer-host-usage-check-interval-minutes",
    "0.02",
    "--load-balancer-report-update-min-interval-millis",
    "500",
    "--load-balancer-shedding-interval-minutes",
    str(SHEDDING_INTERVAL_S / 60),
    "--load-balancer-override-broker-nic-speed-gbps",
    "0.00005",
    "--load-balancer-bundle-unload-min-throughput-threshold",
    "0.0001",
    "--load-balancer-history-resource-percentage",
    "0.2",
    "--load-balancer-namespace-bundle-max-topics",
    "6",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    c = LocalCluster(
        tmp_path_factory.mktemp("lm") / "cluster", brokers=3, lease_ttl=LEASE_TTL, broker_args=BROKER_FLAGS
    )
    try:
        c.start()
    except BaseException:
        print(f"\n===== cluster failed to start =====\n{c.log_tails()}")
        raise
    try:
        yield c
    except BaseException:
        print(f"\n===== process logs (tails) =====\n{c.log_tails()}")
        raise
    finally:
        c.close()


def _live(cluster: LocalCluster) -> list[int]:
    return [i for i, p in enumerate(cluster.brokers) if p.alive]


def _reports(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """Every live broker's fresh load report, by broker id."""
    out = {}
    for i in _live(cluster):
        status, doc = http_json(cluster.admin_urls[i] + "/admin/v2/broker-stats/load-report")
        assert status == 200, doc
        out[doc["brokerId"]] = doc
    return out


def _leader(cluster: LocalCluster, i: int) -> str | None:
    status, doc = http_json(cluster.admin_urls[i] + "/admin/v2/brokers/leaderBroker", timeout=5)
    return doc["brokerId"] if status == 200 else None


def _create_namespace(cluster: LocalCluster, ns: str, bundles: int) -> None:
    base = cluster.admin_urls[_live(cluster)[0]]
    status, doc = http_json(f"{base}/admin/v2/namespaces/public/{ns}", "PUT", {"bundles": {"numBundles": bundles}})
    assert status in (200, 204), doc
    status, doc = http_json(f"{base}/admin/v2/namespaces/public/{ns}/deduplication", "POST", True)
    assert status in (200, 204), doc


def _spread_names(ns: str, n: int, bundles: int, per_bundle: int) -> list[str]:
    """``n`` topic names of ``public/ns`` with at most ``per_bundle`` in any of ``bundles`` equal
    bundles, so that no bundle is over the split limit by chance."""
    ranges = equal(bundles)
    count: dict[str, int] = {}
    names: list[str] = []
    i = 0
    while len(names) < n:
        name = f"persistent://public/{ns}/t{i}"
        bundle = ranges.find(topic_hash(TopicName.parse(name)))
        if count.get(bundle, 0) < per_bundle:
            count[bundle] = count.get(bundle, 0) + 1
            names.append(name)
        i += 1
    return names


def _owners(cluster: LocalCluster, ns: str) -> dict[str, str]:
    """bundle -> owner id of ``public/ns``, from every live broker's ownedNamespaces."""
    out: dict[str, str] = {}
    for i in _live(cluster):
        broker = cluster.broker_address(i).broker_id
        status, doc = http_json(f"{cluster.admin_urls[i]}/admin/v2/brokers/local/{broker}/ownedNamespaces")
        assert status == 200, doc
        for bundle in doc:
            if bundle.startswith(f"public/{ns}/"):
                out[bundle] = broker
    return out


def _weighted_usage(doc: dict[str, Any]) -> float:
    """A report's largest resource share, as the shedder weighs it with Pulsar's weights of 1 (a
    figure over its limit left out): the broker's own computation, on the JSON it answered."""
    return weighted_max_usage(BrokerLoad.from_doc(doc), LoadBalancerSettings())


def _rates(reports: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {b: round(r["msgRateIn"] + r["msgRateOut"], 1) for b, r in sorted(reports.items())}


def _one_leader(cluster: LocalCluster, brokers: Iterable[int], not_: str | None = None) -> set[str] | None:
    """The one leader every broker in ``brokers`` names (other than ``not_``), else None."""
    ids = {_leader(cluster, i) for i in brokers}
    if len(ids) != 1 or None in ids or not_ in ids:
        return None
    return {x for x in ids if x is not None}


def _loaded(cluster: LocalCluster, broker: str) -> dict[str, dict[str, Any]] | None:
    """The reports once ``broker``'s shows the 16 topics and their traffic."""
    reports = _reports(cluster)
    mine = reports.get(broker)
    return reports if mine is not None and mine["msgRateIn"] > 200 and mine["numTopics"] >= 16 else None


async def _abandon(workloads: list[QueueWorkload]) -> None:
    """After a failure: stop every workload's clients quickly, so the test's loop can close."""
    await asyncio.wait_for(asyncio.gather(*(wl.stop(settle_timeout=5) for wl in workloads), return_exceptions=True), 90)


async def _finish(workloads: list[QueueWorkload]) -> None:
    await asyncio.gather(*(wl.stop() for wl in workloads))
    await asyncio.gather(*(wl.drain(quiet=2.0) for wl in workloads))
    for wl in workloads:
        res = wl.check()
        assert res.valid and res.lost == 0 and res.duplicated == 0 and res.reordered == 0, (wl.topic, res.summary())


def test_a_leader_is_elected_and_every_broker_answers_it(cluster: LocalCluster) -> None:
    leaders = wait_until(lambda: _one_leader(cluster, range(3)), 30, "every broker to name one leader")
    (leader,) = leaders
    assert leader in {cluster.broker_address(i).broker_id for i in range(3)}
    for i in range(3):  # the leader's metric says which one it is
        text = cluster.metrics_text(cluster.admin_urls[i] + "/metrics")
        line = next(x for x in text.splitlines() if x.startswith("magnetar_lb_leader "))
        assert float(line.split()[1]) == (1.0 if cluster.broker_address(i).broker_id == leader else 0.0)


async def test_every_broker_writes_a_load_report_that_follows_its_traffic(cluster: LocalCluster) -> None:
    from magnetar.broker.loadbalance.model import BrokerLoad
    from magnetar.metadata import paths

    async def stored() -> dict[str, BrokerLoad]:
        async with cluster.metadata() as md:
            names = await md.store.children(paths.LOADBALANCE_BROKERS)
            out = {}
            for name in names:
                found = await md.store.get(paths.load_report(name))
                if found is not None:
                    out[name] = BrokerLoad.from_json(found.value, name)
            return out

    reports = await stored()
    assert set(reports) == {cluster.broker_address(i).broker_id for i in range(3)}, reports
    for report in reports.values():
        assert report.cpu.limit > 0 and report.memory.limit > 0 and report.bandwidth_in.limit > 0
    _create_namespace(cluster, "reports", 1)
    wl = QueueWorkload(cluster.service_url, "persistent://public/reports/t", producers=1, rate=50.0, dedup=True)
    try:
        await wl.prepare()
        await wl.start()
        deadline = time.monotonic() + 30
        while True:  # the owner's stored report shows the bundle and its traffic (each poll is a store read)
            owner = next(
                (r for r in (await stored()).values() if "public/reports/0x00000000_0xffffffff" in r.last_stats), None
            )
            if owner is not None and owner.last_stats["public/reports/0x00000000_0xffffffff"].msg_rate_in > 20:
                break
            assert time.monotonic() < deadline, await stored()
            await asyncio.sleep(0.2)  # polling the store: no event tells a test that a report was written
        print(f"\nreport of {owner.broker_id}: {owner.last_stats}")
    except BaseException:
        await _abandon([wl])
        raise
    await _finish([wl])


async def test_shedding_spreads_a_namespace_placed_on_one_broker(cluster: LocalCluster) -> None:
    _create_namespace(cluster, "hot", 8)
    first = cluster.broker_address(0).broker_id
    base = cluster.admin_urls[0]
    status, doc = http_json(f"{base}/admin/v2/namespaces/public/hot/bundles")
    assert status == 200 and doc["numBundles"] == 8, doc
    bundles = [f"{lo}_{hi}" for lo, hi in zip(doc["boundaries"], doc["boundaries"][1:], strict=False)]
    for bundle in bundles:  # every bundle's next owner: broker 0
        status, doc = http_json(
            f"{base}/admin/v2/namespaces/public/hot/{bundle}/unload?destinationBroker={first}", "PUT"
        )
        assert status in (200, 204), doc
    topics = _spread_names("hot", 16, 8, 4)
    workloads = [QueueWorkload(cluster.service_url, t, producers=1, rate=25.0, dedup=True) for t in topics]
    try:
        await asyncio.gather(*(wl.prepare() for wl in workloads))
        await asyncio.gather(*(wl.start() for wl in workloads))
        # Before: every bundle on broker 0, and its report shows the traffic.
        before = await in_thread(
            wait_until,
            lambda: _loaded(cluster, first),
            60,
            "broker 0's report to show the 16 topics' traffic",
        )
        owners_before = await in_thread(_owners, cluster, "hot")
        rates_before = _rates(before)
        usage_before = {b: round(_weighted_usage(r), 3) for b, r in before.items()}
        print(
            f"\nLB before: owners {sorted(set(owners_before.values()))} msg rates {rates_before} usage {usage_before}"
        )
        moved_at = time.monotonic()

        seen: list[str] = []

        def balanced() -> dict[str, dict[str, Any]] | None:
            reports = _reports(cluster)
            usage = {b: _weighted_usage(r) for b, r in reports.items()}
            average = sum(usage.values()) / len(usage)
            rates = _rates(reports)
            seen.append(
                f"{time.monotonic() - moved_at:.1f}s rates {rates} usage { {b: round(u, 3) for b, u in usage.items()} }"
            )
            spread = min(rates.values()) > 0 and all(u < average + THRESHOLD for u in usage.values())
            return reports if spread else None

        try:
            after = await in_thread(
                wait_until, balanced, 2 * SHEDDING_INTERVAL_S + 10, "no broker above the threshold", 0.5
            )
        except TimeoutError:
            print("\n".join(seen[-10:]))
            raise
        took = time.monotonic() - moved_at
        rates_after = _rates(after)
        usage_after = {b: round(_weighted_usage(r), 3) for b, r in after.items()}
        owners_after = await in_thread(_owners, cluster, "hot")
        ratio_before = max(rates_before.values()) / max(min(rates_before.values()), 1.0)
        ratio_after = max(rates_after.values()) / max(min(rates_after.values()), 1.0)
        print(
            f"LB after {took:.1f}s: msg rates {rates_after} usage {usage_after} "
            f"owners {sorted(owners_after.items())}; max/min msg-rate ratio {ratio_before:.1f} -> {ratio_after:.1f}"
        )
        assert ratio_after < ratio_before
        assert len(set(owners_after.values())) >= 2, owners_after
        status, stats = http_json(cluster.admin_urls[0] + "/admin/v2/broker-stats/load-balancer")
        assert status == 200, stats
        moves = [m for m in stats["recentMoves"] if m["kind"] == "unload" and m["bundle"].startswith("public/hot/")]
        assert moves and all(m["fromBroker"] == first and m["success"] for m in moves), stats
        assert all(m["reason"].startswith("Overloaded") for m in moves), moves
        rounds = sorted({m["timestamp"] for m in moves})  # one timestamp per shedding round
        print(f"LB shedding rounds that moved bundles: {len(rounds)}, bundles moved: {len(moves)}")
        assert len(rounds) <= 2, moves  # balanced within two shedding intervals
    except BaseException:
        await _abandon(workloads)
        raise
    await _finish(workloads)


async def test_a_bundle_over_the_topic_limit_splits_under_running_clients(cluster: LocalCluster) -> None:
    _create_namespace(cluster, "split", 1)
    # The earlier tests' traffic gone from every report first, so the split bundle's owner is the one
    # loaded broker when its halves are placed.
    await in_thread(
        wait_until,
        lambda: all(r["msgRateIn"] < 5 for r in _reports(cluster).values()),
        30,
        "quiet load reports",
        0.5,
    )
    topics = [f"persistent://public/split/t{i}" for i in range(10)]
    workloads = [QueueWorkload(cluster.service_url, t, producers=1, rate=25.0, dedup=True) for t in topics]
    try:
        await asyncio.gather(*(wl.prepare() for wl in workloads))
        await asyncio.gather(*(wl.start() for wl in workloads))
        base = cluster.admin_urls[0]

        def split() -> dict[str, Any] | None:
            status, doc = http_json(f"{base}/admin/v2/namespaces/public/split/bundles")
            return doc if status == 200 and doc["numBundles"] >= 2 else None

        doc = await in_thread(wait_until, split, 4 * SHEDDING_INTERVAL_S + 20, "the namespace's bundle to split")
        await asyncio.gather(*(wl.wait_acked(len(wl.ops) + 20, within=60) for wl in workloads))
        owners = await in_thread(_owners, cluster, "split")
        reports = _reports(cluster)
        print(f"\nsplit: {doc} owners {owners} usage { {b: round(_weighted_usage(r), 3) for b, r in reports.items()} }")
        _, stats = http_json(cluster.admin_urls[0] + "/admin/v2/broker-stats/load-balancer")
        splits = [m for m in stats["recentMoves"] if m["kind"] == "split" and m["bundle"].startswith("public/split/")]
        assert splits and splits[-1]["reason"] == "over topics limit", stats
        # The halves are in the grace period from the split on: the shedding right after it does
        # not move them again while their clients are still re-attaching.
        again = [m for m in stats["recentMoves"] if m["kind"] == "unload" and m["bundle"].startswith("public/split/")]
        assert not again, again
        # The halves went by load: the parent's owner carried the namespace's traffic and the other
        # brokers none, so they are not both placed back on it. (Not "neither": the leader's
        # placement reads usage smoothed over its rounds, which may still show the parent's owner
        # as it was before this traffic, and then it is as good a pick as the others.)
        parent_owner = splits[-1]["fromBroker"]
        assert set(owners.values()) != {parent_owner}, (parent_owner, owners)
    except BaseException:
        await _abandon(workloads)
        raise
    await _finish(workloads)


async def test_kill9_of_the_leader_elects_another_within_a_lease_which_goes_on_shedding(
    cluster: LocalCluster,
) -> None:
    leader = _leader(cluster, 0)
    assert leader is not None
    victim = cluster.broker_by_id(leader)
    others = [i for i in range(3) if cluster.brokers[i] is not victim]
    victim.kill9()
    killed = time.monotonic()
    new = await in_thread(
        wait_until,
        lambda: _one_leader(cluster, others, not_=leader),
        LEASE_TTL + 10,
        "a new leader",
    )
    took = time.monotonic() - killed
    print(f"\nleader {leader} killed; new leader {new} after {took:.1f}s (lease {LEASE_TTL}s)")
    assert took <= LEASE_TTL + 3.0  # one lease, plus the watch and a campaign
    (new_id,) = new
    i_new = next(i for i in others if cluster.broker_address(i).broker_id == new_id)
    # Shedding goes on: the new leader runs its rounds (its stats count them).
    await in_thread(
        wait_until,
        lambda: _shedding_rounds(cluster, i_new) >= 2,
        3 * SHEDDING_INTERVAL_S,
        "the new leader's shedding rounds",
    )


def _shedding_rounds(cluster: LocalCluster, i: int) -> int:
    status, stats = http_json(cluster.admin_urls[i] + "/admin/v2/broker-stats/load-balancer", timeout=5)
    return int(stats["lastShedding"]["rounds"]) if status == 200 and stats.get("isLeader") else 0
