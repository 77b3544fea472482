"""A broker's clock jumped forward and back (issue 13, scenario 6), with libfaketime.

The owning broker runs under ``LD_PRELOAD=libfaketime`` with ``FAKETIME_TIMESTAMP_FILE``: the test
rewrites that file ("+3600s", "-600s", "+0s") and, with ``FAKETIME_NO_CACHE=1``, the broker sees
the new offset on its next clock reading. Clients, bookies and etcd keep the real clock, so the
broker's clock is the wrong one, as when an operator mis-sets it or a VM resumes with a stale
clock.

What "behave" means here, as a Pulsar user would expect it (the clients' clocks are right):

- **TTL** (message TTL 600 s, checked every 1.2 s): no message younger than its TTL is expired.
  The drain subscription must still hold every acknowledged message (``lost == 0``) and no
  subscription counts an expiry. Pulsar itself compares the publish time with the broker's wall
  clock, so one hour ahead it expires everything younger than an hour at once.
- **Delayed delivery** (every message 2-6 s ahead, Shared subscription): no message reaches a
  consumer before its deliver-at time, beyond the guard's declared slew (1 % of the time since
  the step); a backward step does not hold messages back until the wall clock catches up: of
  the messages due while the clock is back (up to 1.5 s before it is put right), most must be
  delivered before it is put right (a plain wall clock delivers none of them until then).
- **Retention** (30 minutes, a second topic whose subscription acknowledges everything and whose
  ledgers roll every 20 entries): nothing that retention keeps is trimmed, so a reader from the
  earliest position reads every acknowledged message of that topic. A ledger closed while the
  clock is an hour back would otherwise be recorded as closed an hour ago and trimmed at once.
- **Leases**: the steps do not move ownership (etcd times the lease), and the receipts show no
  two brokers acknowledging sends of the topic at once: per ledger, the interval between its first
  and last acknowledgement, and ledgers acknowledged through different brokers never overlap.
  No acknowledged entry lies beyond its ledger's close (``acks_beyond_close``).

The broker's guard is ``magnetar.managed_ledger.clock`` (wall time cross-checked against the
monotonic clock). ``FAULTS_CLOCK_CONTROL=1`` also runs the control: the same scenario with the
guard off (``MAGNETAR_CLOCK_GUARD=0``), which must show early expiry (lost messages), early
deliveries or trimmed retained messages.

The second test steps the monotonic clock too (libfaketime's default): the broker then believes
the time really passed (as after a long pause) and no guard can tell; only a forward step is
tried (a monotonic clock never goes back, and asyncio would sleep through a backward one). Its
own deadline for the etcd keep-alive then passes at once, so it declares its session lost,
revokes the lease etcd (on the real clock) still held, stops serving and exits: the checks there are
the lease ones, no loss and no duplicate (deduplication on; no TTL is set), and the time until
the other broker acknowledges sends.

Cost at one seed: about 45 s (wall) + 25 s (monotonic); the control adds about 70 s when asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.faults.checker import OK
from tests.faults.nemesis import acks_beyond_close, enable_dedup, finish, in_thread, owner_of
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster, Proc
from tests.support.metrics import scrape, total

from magnetar.broker.cluster.ownership import bundle_of
from magnetar.client import aio as mg
from magnetar.managed_ledger.clock import GUARD_ENV, SLEW
from magnetar.protocol.errors import MagnetarError, Timeout
from magnetar.protocol.topic_name import TopicName

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
CONTROL_ENV = "FAULTS_CLOCK_CONTROL"
TTL_SECONDS = 600
RETENTION_MINUTES = 30
# Of the messages due during a backward step, the share that must come before the step ends.
ON_TIME_SHARE = 0.5
BROKER_ARGS = [
    "--message-expiry-check-interval-minutes",
    "0.02",  # 1.2 s
    "--retention-check-interval-seconds",
    "1",
    "--managed-ledger-max-entries-per-ledger",
    "20",
    "--managed-ledger-min-ledger-rollover-time-minutes",
    "0",
]


class ClockDial:
    """One broker's faked clock: the offset libfaketime reads from a file on every reading."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.set(0)

    def set(self, seconds: int) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{seconds:+d}s\n")
        tmp.replace(self.path)  # atomic: the broker never reads a half-written offset
        self.offset = seconds


def fake_clock(proc: Proc, base: Path, *, monotonic: bool, guard: bool) -> ClockDial:
    """Give ``proc`` (not started yet) a clock the test can move."""
    dial = ClockDial(base / f"{proc.name}.faketime")
    env = {
        **proc.env,  # a copy: the cluster's processes share one dict
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME_TIMESTAMP_FILE": str(dial.path),
        "FAKETIME_NO_CACHE": "1",
    }
    if not monotonic:
        env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    if not guard:
        env[GUARD_ENV] = "0"
    proc.env = env
    return dial


@contextlib.contextmanager
def faked_cluster(base: Path, *, monotonic: bool, guard: bool = True) -> Iterator[tuple[LocalCluster, list[ClockDial]]]:
    """etcd, 3 bookies, 2 brokers; each broker on a clock of its own (all at +0 to start)."""
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    if not os.path.exists(LIBFAKETIME):
        if os.environ.get("CI", "").lower() == "true":  # CI installs it: a skip would prove nothing
            pytest.fail(f"CI=true but {LIBFAKETIME} is missing (apt-get install libfaketime)")
        pytest.skip("libfaketime is not installed (apt-get install libfaketime)")
    c = LocalCluster(base / "cluster", broker_args=BROKER_ARGS)
    dials = [fake_clock(b, base, monotonic=monotonic, guard=guard) for b in c.brokers]
    ok = False
    try:
        c.start()
        yield c, dials
        ok = True
    finally:
        c.close()
        if not ok:
            print(f"\n===== process logs (tails) under {c.logs} =====\n{c.log_tails()}")


def sibling_topic(topic: str, bundles: int = 4) -> str:
    """A topic of the same namespace bundle as ``topic`` (so the same broker owns both)."""
    want = bundle_of(TopicName.parse(topic), bundles)
    while True:
        name = f"persistent://public/default/clock-retained-{uuid.uuid4().hex[:10]}"
        if bundle_of(TopicName.parse(name), bundles) == want:
            return name


async def set_policies(cluster: LocalCluster, *, ttl: bool) -> None:
    def post(path: str, body: bytes) -> None:
        import urllib.request

        req = urllib.request.Request(
            f"{cluster.admin_urls[0]}/admin/v2/namespaces/public/default/{path}",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status in (200, 204), resp.status

    if ttl:
        await in_thread(post, "messageTTL", str(TTL_SECONDS).encode())
    retention = f'{{"retentionTimeInMinutes": {RETENTION_MINUTES}, "retentionSizeInMB": -1}}'
    await in_thread(post, "retention", retention.encode())


class RetainedTopic:
    """A topic whose subscription acknowledges everything at once: only retention keeps its data.

    One producer sends numbered values (20 a second); one consumer acknowledges each. ``check``
    reads the topic from the earliest position with a reader: every acknowledged value must be
    there (retention is 30 minutes, far longer than the run)."""

    def __init__(self, service_url: str, topic: str) -> None:
        self.topic = topic
        self.client = mg.Client(service_url, operation_timeout_seconds=10)
        self.acked: set[str] = set()
        self.consumed = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        consumer = await self.client.subscribe(
            self.topic, "clock-retained", initial_position=mg.InitialPosition.Earliest
        )
        producer = await self.client.create_producer(self.topic, batching_enabled=False, send_timeout_millis=20_000)
        self._tasks = [asyncio.create_task(self._produce(producer)), asyncio.create_task(self._consume(consumer))]

    async def _produce(self, producer: Any) -> None:
        i = 0
        while not self._stop.is_set():
            value = f"r-{i}"
            i += 1
            with contextlib.suppress(MagnetarError, TimeoutError):
                await producer.send_async(value.encode())
                self.acked.add(value)
            await asyncio.sleep(0.05)  # the send rate, not a wait for a condition
        with contextlib.suppress(MagnetarError, TimeoutError):
            await producer.close()

    async def _consume(self, consumer: Any) -> None:
        while not self._stop.is_set():
            try:
                msg = await consumer.receive(timeout_millis=250)
            except Timeout:
                continue
            except MagnetarError:
                await asyncio.sleep(0.2)  # the broker is reconnecting
                continue
            with contextlib.suppress(MagnetarError):
                await consumer.acknowledge(msg)
                self.consumed += 1
        with contextlib.suppress(MagnetarError, TimeoutError):
            await consumer.close()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def missing(self, within: float = 60.0) -> list[str]:
        """Acknowledged values a reader from the earliest position does not find."""
        reader = await self.client.create_reader(self.topic, mg.MessageId.earliest)
        seen: set[str] = set()
        deadline = time.monotonic() + within
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and not (self.acked <= seen and time.monotonic() - quiet_since > 2):
            try:
                msg = await reader.read_next(timeout_millis=250)
            except Timeout:
                if time.monotonic() - quiet_since > 5:
                    break
                continue
            seen.add(msg.data().decode())
            quiet_since = time.monotonic()
        with contextlib.suppress(MagnetarError, TimeoutError):
            await reader.close()
        return sorted(self.acked - seen, key=lambda v: int(v[2:]))

    async def close(self) -> None:
        with contextlib.suppress(MagnetarError, TimeoutError):
            await asyncio.wait_for(self.client.close(), 15)


def serving_overlaps(wl: QueueWorkload) -> list[str]:
    """Ledgers acknowledged through different brokers whose acknowledgement intervals overlap:
    two brokers serving the topic at once, seen from the producers' receipts."""
    spans: dict[int, list[Any]] = {}
    for op in wl.ops:
        if op.status == OK and op.pos is not None and op.pos[0] >= 0 and op.t_complete is not None:
            span = spans.setdefault(op.pos[0], [op.t_complete, op.t_complete, set()])
            span[0], span[1] = min(span[0], op.t_complete), max(span[1], op.t_complete)
            span[2].add(op.via)
    bad = [f"ledger {lid} acknowledged through {sorted(map(str, s[2]))}" for lid, s in spans.items() if len(s[2]) > 1]
    items = sorted(spans.items(), key=lambda kv: kv[1][0])
    for i, (a, sa) in enumerate(items):
        for b, sb in items[i + 1 :]:
            if sb[0] > sa[1]:
                break
            if sa[2] != sb[2]:
                bad.append(f"ledgers {a} via {sorted(map(str, sa[2]))} and {b} via {sorted(map(str, sb[2]))} overlap")
    return bad


def total_expired(cluster: LocalCluster, topic: str) -> int:
    stats = cluster.topic_stats(topic)
    return sum(int(s.get("totalMsgExpired", 0)) for s in (stats.get("subscriptions") or {}).values())


def jump_plan(rng: random.Random) -> list[tuple[int, float]]:
    """Steps of the broker's wall clock, each (offset seconds, hold seconds), ending at +0:
    one forward (+1 h or +1 day), one backward (-10 min or -1 h), in a random order, each
    held 4-8 s, with a return to the real time in between."""
    forward = rng.choice([3600, 86_400])
    backward = rng.choice([-600, -3600])
    steps = [forward, backward]
    rng.shuffle(steps)
    plan: list[tuple[int, float]] = []
    for s in steps:
        plan.append((s, round(rng.uniform(4, 8), 1)))
        plan.append((0, round(rng.uniform(2, 4), 1)))
    return plan


async def run_wall_clock_jumps(base: Path, rng: random.Random, seed: int, *, guard: bool) -> dict[str, Any]:
    with faked_cluster(base, monotonic=False, guard=guard) as (cluster, dials):
        topic = f"persistent://public/default/clock-{uuid.uuid4().hex[:10]}"
        await set_policies(cluster, ttl=True)
        wl = QueueWorkload(cluster.service_url, topic, rate=50.0, delay_ms=(2000, 6000))
        retained = RetainedTopic(cluster.service_url, sibling_topic(topic))
        try:
            await wl.prepare()
            await wl.start()
            await retained.start()
            await wl.wait_acked(200, within=60)
            owner = await owner_of(cluster, topic)
            assert owner is not None
            assert await owner_of(cluster, retained.topic) is owner
            dial = dials[cluster.broker_index(owner)]
            plan = jump_plan(rng)
            forward_hold = 0.0
            back_windows: list[tuple[int, int]] = []  # wall ms while the clock was set back
            for offset, hold in plan:
                if dial.offset < 0:
                    back_windows[-1] = (back_windows[-1][0], int(time.time() * 1000))
                dial.set(offset)
                if offset < 0:
                    back_windows.append((int(time.time() * 1000), 0))
                wl.event(f"{owner.name} clock at {offset:+d}s for {hold}s")
                forward_hold += hold if offset > 0 else 0.0
                await asyncio.sleep(hold)  # how long the clock stays stepped: the fault itself
            t_end = time.monotonic()
            # The owner's /metrics tell an operator its clock was stepped (with the guard on; off,
            # nothing watches for steps).
            owner_admin = cluster.admin_urls[cluster.broker_index(owner)]
            clock_steps = total(await in_thread(scrape, owner_admin + "/metrics"), "magnetar_broker_clock_steps_total")
            t_recovered = await wl.wait_acked(1, after=t_end, within=60)
            await wl.wait_acked(100, after=t_end, within=60)
            owner_after = await owner_of(cluster, topic)
            await retained.stop()
            await wl.stop(live_within=30)
            expired = await in_thread(total_expired, cluster, topic)
            expired_retained = await in_thread(total_expired, cluster, retained.topic)
            missing_retained = await retained.missing()
            dlv = wl.check_delivery()
            beyond = await acks_beyond_close(cluster, wl)
            overlaps = serving_overlaps(wl)
            # The guard slews towards a stepped clock at SLEW of the time since the step: a
            # delayed message may come that much early, and no more (plus 50 ms of rounding).
            allowance_ms = SLEW * forward_hold * 1000 + 50
            first_read: dict[str, int] = {}
            for r in wl.live_reads:
                first_read.setdefault(r.value, r.wall_ms)
            due_back: dict[str, int] = {}  # value -> end of the backward step it fell due in
            for op in wl.ops:
                if op.status == OK and op.deliver_at is not None:
                    for start, end in back_windows:
                        if start <= op.deliver_at <= end - 1500:
                            due_back[op.value] = end
            on_time_back = sum(1 for v, end in due_back.items() if first_read.get(v, end) < end)
            due = {op.value: op.deliver_at for op in wl.ops if op.status == OK and op.deliver_at is not None}
            early_ms = [due[r.value] - r.wall_ms for r in wl.live_reads if r.wall_ms < due.get(r.value, 0)]
            res = await finish(
                cluster,
                wl,
                "clock-jumps-wall" + ("" if guard else "-CONTROL-no-guard"),
                seed=seed,
                guard=guard,
                victim=owner.name,
                plan=plan,
                time_to_recover=round(t_recovered - t_end, 3),
                owner_moved=owner_after is not owner,
                expired_ttl=expired,
                early_expiries=expired + expired_retained,
                delayed=dlv.delayed,
                early_deliveries=dlv.early,
                early_beyond_slew=sum(1 for e in early_ms if e > allowance_ms),
                max_early_ms=max(early_ms, default=0),
                lateness_ms=dlv.lateness_ms,
                due_during_back_step=len(due_back),
                delivered_during_back_step=on_time_back,
                lost_live=dlv.lost_live,
                retained_acked=len(retained.acked),
                retained_consumed=retained.consumed,
                retained_trimmed=len(missing_retained),
                acks_beyond_close=len(beyond),
                serving_overlaps=len(overlaps),
                clock_steps_exported=clock_steps,
            )
            return {
                "res": res,
                "dlv": dlv,
                "expired": expired + expired_retained,
                "early_beyond": sum(1 for e in early_ms if e > allowance_ms),
                "missing_retained": missing_retained,
                "retained_acked": len(retained.acked),
                "beyond": beyond,
                "overlaps": overlaps,
                "owner_moved": owner_after is not owner,
                "due_back": len(due_back),
                "on_time_back": on_time_back,
                "clock_steps": clock_steps,
            }
        finally:
            await retained.close()
            await wl.close_clients()


async def test_broker_wall_clock_jumps_expire_trim_or_release_nothing_early(
    tmp_path: Path, rng: random.Random, fault_seed: int
) -> None:
    out = await run_wall_clock_jumps(tmp_path, rng, fault_seed, guard=True)
    res = out["res"]
    assert res.lost == 0 and res.duplicated == 0, res.summary()
    assert res.valid, res.summary()
    assert out["expired"] == 0, f"{out['expired']} messages expired by TTL within their {TTL_SECONDS}s"
    assert out["clock_steps"] >= 1, "the stepped broker's /metrics must count the step"
    assert out["early_beyond"] == 0, out["dlv"].summary()
    # A backward step is held 4-8 s: messages due meanwhile, held until it is undone, would come
    # that late (4.8-6.5 s in the control runs); followed by the guard, they come on time.
    assert out["due_back"] > 0
    assert out["on_time_back"] >= ON_TIME_SHARE * out["due_back"], (
        f"only {out['on_time_back']} of {out['due_back']} messages due while the clock was back came before"
        " it was put right"
    )
    assert out["dlv"].lost_live == 0, out["dlv"].summary()
    assert out["retained_acked"] > 0
    assert out["missing_retained"] == [], f"retained messages trimmed: {out['missing_retained'][:10]}"
    assert out["beyond"] == [], out["beyond"][:5]
    assert out["overlaps"] == [], out["overlaps"][:5]
    assert not out["owner_moved"], "a step of the broker's wall clock moved the topic's ownership"


@pytest.mark.skipif(not os.environ.get(CONTROL_ENV), reason=f"control run: set {CONTROL_ENV}=1")
async def test_control_without_the_guard_the_steps_expire_trim_or_release_early(
    tmp_path: Path, rng: random.Random, fault_seed: int
) -> None:
    """The same scenario with ``MAGNETAR_CLOCK_GUARD=0`` (Pulsar's plain wall clock): the forward
    step must show up as lost (expired) messages, early deliveries or trimmed retained data,
    proof that the checks above can fail."""
    out = await run_wall_clock_jumps(tmp_path, rng, fault_seed, guard=False)
    damage = out["res"].lost + out["expired"] + out["early_beyond"] + len(out["missing_retained"])
    assert damage > 0, "the control run showed no damage: the checks could not fail"


async def test_broker_wall_and_monotonic_clock_jump_forward_keeps_one_owner(
    tmp_path: Path, rng: random.Random, fault_seed: int
) -> None:
    """Both clocks of the owning broker one hour or one day ahead, and left there: every timer of
    its event loop fires at once (keep-alives, timeouts, roll-over by age). Its metadata session
    then looks expired to it (no keep-alive within the lease TTL by its own clock), so it stops
    serving and exits, and the other broker takes the topic over. Nothing acknowledged is lost,
    nothing is stored twice (deduplication on: the producers resend what the victim stored without
    answering), and the receipts never show two brokers serving the topic at once."""
    with faked_cluster(tmp_path, monotonic=True) as (cluster, dials):
        topic = f"persistent://public/default/clock-mono-{uuid.uuid4().hex[:10]}"
        await enable_dedup(cluster)  # the victim may die with acknowledgements unsent: resends
        wl = QueueWorkload(cluster.service_url, topic, rate=50.0, dedup=True)
        try:
            await wl.prepare()
            await wl.start()
            await wl.wait_acked(200, within=60)
            owner = await owner_of(cluster, topic)
            assert owner is not None
            offset = rng.choice([3600, 86_400])
            dials[cluster.broker_index(owner)].set(offset)
            t_jump = time.monotonic()
            wl.event(f"{owner.name} wall and monotonic clocks at {offset:+d}s")
            t_recovered = await wl.wait_acked(1, after=t_jump + 1, within=90)
            await wl.wait_acked(300, after=t_jump, within=90)
            owner_after = await owner_of(cluster, topic)
            beyond = await acks_beyond_close(cluster, wl)
            overlaps = serving_overlaps(wl)
            res = await finish(
                cluster,
                wl,
                "clock-jumps-monotonic",
                seed=fault_seed,
                victim=owner.name,
                offset=offset,
                time_to_recover=round(t_recovered - t_jump - 1, 3),
                owner_moved=owner_after is not owner,
                victim_alive=owner.alive,
                acks_beyond_close=len(beyond),
                serving_overlaps=len(overlaps),
            )
        finally:
            await wl.close_clients()
    assert res.lost == 0 and res.duplicated == 0, res.summary()
    assert res.valid, res.summary()
    assert beyond == [], beyond[:5]
    assert overlaps == [], overlaps[:5]
