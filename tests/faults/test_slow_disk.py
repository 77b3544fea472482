"""Slow disk (issue 13, scenario 5): one bookie's fsync turns slow under a running workload.

Every bookie's data directory is a lazyfs mount (``tests/support/lazyfs.py``); the fault is a
delay added to every sync of ONE bookie's mount, set at run time through lazyfs's control socket
(the bookie's group commit, an LMDB commit with two syncs, then takes at least twice the delay).

With E = 3, Qw = 3, Qa = 2 the writer acknowledges an entry once two bookies have it, so publish
latency must stay close to what it was before (p50 of the workload's acknowledged sends, before
vs during; p90 and p99 are recorded: the tail can rise, because an ack then needs both fast
bookies and a stall of either shows), and the slow bookie must be REPORTED the way a BookKeeper
or Pulsar operator expects: per-bookie add latency in the broker's ``/metrics``
(``magnetar_bookie_client_add_latency_seconds{bookie}``), a ``magnetar_bookie_client_slow{bookie}``
gauge set for that bookie and no other, and a WARNING in the broker's log naming it
(``services/magnetar/ledger/bookie_latency.py``); the bookie's own
``magnetar_bookie_group_commit_seconds`` shows the slow commits. When the delay is removed the
report clears (the scenario's "time to recover").

The control (Qa = 3, same fault) shows that the latency assertion can fail: there every ack waits
for the slow bookie.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.faults.checker import OK
from tests.faults.nemesis import current_ledger, eventually, finish, hold, in_thread
from tests.faults.workload import QueueWorkload
from tests.support.lazyfs import lazyfs_available
from tests.support.lazyfs_control import LazyCluster, lazy_cluster
from tests.support.metrics import samples, scrape

from magnetar.ledger.bookie_latency import BookieLatency

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

why_not = lazyfs_available()
lazyfs_only = pytest.mark.skipif(why_not is not None, reason=f"lazyfs cannot run here: {why_not}")

SLOW = "magnetar_bookie_client_slow"


@pytest.fixture
def lazy(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LazyCluster]:
    with lazy_cluster(tmp_path / "cluster", **dict(getattr(request, "param", None) or {})) as c:
        yield c


def _latencies(wl: QueueWorkload, start: float, end: float) -> list[float]:
    return sorted(
        op.t_complete - op.t_invoke
        for op in wl.ops
        if op.status == OK and op.t_complete is not None and start <= op.t_invoke < end
    )


def _pct(values: list[float], q: float) -> float:
    assert values, "no acknowledged sends in the window"
    return values[min(len(values) - 1, int(q * len(values)))]


async def _slow_reported(lazy: LazyCluster) -> dict[str, set[str]]:
    """``{broker admin url: bookies its /metrics flags slow}`` (brokers that flag none left out)."""
    out: dict[str, set[str]] = {}
    for url in lazy.cluster.admin_urls:
        text = await in_thread(scrape, f"{url}/metrics")
        slow = {b for b, v in samples(text, SLOW).items() if v == 1.0}
        if slow:
            out[url] = slow
    return out


def _commit_seconds(text: str, bookie: str) -> tuple[float, float]:
    """(sum, count) of the bookie's group-commit histogram."""
    total = samples(text, "magnetar_bookie_group_commit_seconds_sum").get(bookie)
    count = samples(text, "magnetar_bookie_group_commit_seconds_count").get(bookie)
    assert total is not None and count is not None, text[-2000:]
    return total, count


async def _slow_disk(lazy: LazyCluster, topic: str, rng: random.Random) -> dict[str, Any]:
    """Baseline window, then one ensemble bookie's syncs delayed; returns the figures."""
    c = lazy.cluster
    wl = QueueWorkload(c.service_url, topic)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    window = rng.uniform(5.0, 7.0)
    t0 = time.monotonic()
    await hold(window, what=f"{window:.1f}s of workload", interval=0.1)
    before = _latencies(wl, t0, t0 + window)
    ledger_id, md = await current_ledger(c, wl)
    victim = rng.choice(list(md.last_ensemble))
    delay_ms = rng.choice([150, 200, 300])
    port = c.bookie_http_ports[c.bookie_ids.index(victim)]
    bookie_metrics = f"http://127.0.0.1:{port}/metrics"
    commit_before = _commit_seconds(await in_thread(scrape, bookie_metrics), victim)
    fsyncs_before = lazy.mounts[victim].stats()["fsyncs"]
    await in_thread(lazy.mounts[victim].set_fsync_delay, delay_ms)
    t_slow = time.monotonic()
    wl.event(f"fsync of {victim} delayed by {delay_ms} ms (ensemble of ledger {ledger_id}: {md.last_ensemble})")
    reported = await eventually(lambda: _slow_reported(lazy), within=45, what=f"{victim} reported slow")
    t_reported = time.monotonic()
    # Measure a window of the same length while the disk is slow (starting once the bookie's
    # queue reached its slow steady state, i.e. from the report on).
    t1 = time.monotonic()
    await hold(window, what=f"{window:.1f}s of workload", interval=0.1)
    during = _latencies(wl, t1, t1 + window)
    reported_end = await _slow_reported(lazy)
    commit_during = _commit_seconds(await in_thread(scrape, bookie_metrics), victim)
    fsyncs_during = lazy.mounts[victim].stats()["fsyncs"] - fsyncs_before
    await in_thread(lazy.mounts[victim].set_fsync_delay, 0)
    t_fast = time.monotonic()
    wl.event(f"fsync of {victim} fast again")

    async def cleared() -> bool:
        return not await _slow_reported(lazy)

    await eventually(cleared, within=60, what="the slow report cleared")
    t_cleared = time.monotonic()
    commits = commit_during[1] - commit_before[1]
    mean_commit = (commit_during[0] - commit_before[0]) / commits if commits else None
    warned = [
        line.strip()
        for p in c.brokers
        for line in p.output().splitlines()
        if "magnetar.ledger.bookie_latency" in line and "is slow" in line
    ]
    return {
        "wl": wl,
        "victim": victim,
        "delay_ms": delay_ms,
        "reported": {k: sorted(v) for k, v in reported.items()},
        "reported_at_end_of_window": {k: sorted(v) for k, v in reported_end.items()},
        "warnings": warned,
        "report_after_s": round(t_reported - t_slow, 3),
        "time_to_recover_s": round(t_cleared - t_fast, 3),
        "p50_before_ms": round(_pct(before, 0.5) * 1000, 1),
        "p99_before_ms": round(_pct(before, 0.99) * 1000, 1),
        "p90_before_ms": round(_pct(before, 0.9) * 1000, 1),
        "p50_during_ms": round(_pct(during, 0.5) * 1000, 1),
        "p90_during_ms": round(_pct(during, 0.9) * 1000, 1),
        "p99_during_ms": round(_pct(during, 0.99) * 1000, 1),
        "sends_before": len(before),
        "sends_during": len(during),
        "victim_commit_mean_ms": round(mean_commit * 1000, 1) if mean_commit is not None else None,
        "victim_fsyncs_during": fsyncs_during,
    }


def _p50_limit(p50_before_ms: float) -> float:
    """ "Close to normal" for the median: at most twice the baseline, or 30 ms more."""
    return max(2 * p50_before_ms, p50_before_ms + 30)


@lazyfs_only
async def test_slow_disk_on_one_bookie_keeps_publish_latency_and_is_reported(
    lazy: LazyCluster, topic: str, rng: random.Random, fault_seed: int
) -> None:
    fig = await _slow_disk(lazy, topic, rng)
    wl = fig.pop("wl")
    res = await finish(lazy.cluster, wl, "slow-disk-one-bookie-qa2", seed=fault_seed, **fig)
    victim = fig["victim"]
    assert res.valid, res.summary()
    # Reported: by every broker that flags anything, and only the victim.
    assert fig["reported"] and all(v == [victim] for v in fig["reported"].values()), fig
    assert any(f"bookie {victim} is slow" in w for w in fig["warnings"]), fig["warnings"]
    assert not any(f"bookie {b} is slow" in w for w in fig["warnings"] for b in lazy.cluster.bookie_ids if b != victim)
    # The bookie's own metrics show the slow commits (two syncs per LMDB commit).
    assert fig["victim_commit_mean_ms"] is not None and fig["victim_commit_mean_ms"] >= fig["delay_ms"], fig
    # Publish latency stays close to normal: the median send does not wait for the slow bookie.
    # (The tail is recorded, not asserted: with one bookie slow, an ack needs BOTH fast bookies,
    # so a momentary stall of either one, common on a loaded 2-core machine, now shows in p90/p99
    # where before the third bookie hid it. See NOTES of issue 13, helper A.)
    assert fig["p50_during_ms"] <= _p50_limit(fig["p50_before_ms"]), fig


@lazyfs_only
@pytest.mark.parametrize("lazy", [{"ack_quorum": 3}], indirect=True, ids=["qa3"])
async def test_control_slow_disk_with_qa_equal_to_qw_slows_every_publish(
    lazy: LazyCluster, topic: str, rng: random.Random, fault_seed: int
) -> None:
    """The control: with Qa = Qw = 3 every acknowledgement waits for the slow bookie, so the
    latency assertion of the real run fails here (p50 rises by at least the sync delay)."""
    fig = await _slow_disk(lazy, topic, rng)
    wl = fig.pop("wl")
    res = await finish(lazy.cluster, wl, "slow-disk-control-qa3", seed=fault_seed, **fig)
    assert res.valid, res.summary()
    assert fig["p50_during_ms"] > _p50_limit(fig["p50_before_ms"]), fig
    assert fig["p50_during_ms"] >= fig["delay_ms"], fig


def test_bookie_latency_flags_only_a_clear_outlier() -> None:
    """The judgement itself (no cluster): jitter between fast bookies is not "slow"; one bookie
    at 4x and +50 ms over the others' median is; it clears when its samples are fast again."""
    now = [0.0]
    bl = BookieLatency(clock=lambda: now[0], evaluate_every=0.0)
    for _ in range(50):
        now[0] += 0.01
        bl.record("b0", 0.002)
        bl.record("b1", 0.006)  # 3x b0, but only 4 ms more: jitter
        bl.record("b2", 0.004)
    assert bl.slow_bookies() == []
    for _ in range(50):
        now[0] += 0.01
        bl.record("b0", 0.002)
        bl.record("b1", 0.003)
        bl.record("b2", 0.4)
    assert bl.slow_bookies() == ["b2"]
    now[0] += 20  # the slow samples leave the window
    for _ in range(50):
        now[0] += 0.01
        for b in ("b0", "b1", "b2"):
            bl.record(b, 0.003)
    assert bl.slow_bookies() == []
    stats = {s.bookie: s for s in bl.snapshot()}
    assert stats["b2"].count == 150 and stats["b2"].buckets[-1] == 150
