"""Flipped bits (issue 13, scenario 3): stored data rots on one bookie; nobody ever sees the rot.

A cluster of 4 bookies (E3/Qw3/Qa2, so a lost bookie can be replaced) runs the queue workload with
brokers rolling ledgers every few hundred entries, and every bookie scrubbing (``--scrub-interval``,
``bookie/scrub.py``). A seeded victim holding data is killed, bits of its ``data.mdb`` are flipped
at seeded places of the LIVE B-tree (``lmdbpages.py`` walks it as LMDB does, so no flip lands in a
stale copy-on-write page), and it is started again:

1. ``test_flipped_payload_crc_and_ledger_state_are_detected_and_repaired_in_place``: bits in
   entry payloads, in entries' stored CRC / key check, and in ledger state records (fenced, LAC,
   their CRC). Reads of a damaged entry fail over to another replica and return the good bytes;
   the victim never returns a wrong byte; its scrubber finds every damaged value at its first pass,
   marks it, and a replication worker rewrites each on the victim from a good replica (checked
   byte for byte against the other replicas). Figures: time to detect, time to repair.
2. ``test_flipped_index_page_headers_never_serve_garbage``: bits in the headers (flags, lower,
   upper) of live branch/leaf pages of the entries B-tree. LMDB may notice (``MDB_CORRUPTED``: the
   bookie stops serving, refuses to start again, and the cluster re-replicates its ledgers as for a
   lost bookie), crash, or not notice (keys vanish: the scrubber finds them missing against the
   metadata and has them copied back; values read from the wrong place fail their checks). In
   every case the victim never returns wrong data and the cluster ends fully replicated.

Both end with the end-to-end check: the drain (and the live consumers) must see exactly the values
sent — a corrupt payload would be an unexpected value, a lost one lost — with 0 acknowledged lost.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.faults import lmdbpages
from tests.faults.nemesis import eventually, finish, in_thread, record, underreplicated, wait_underreplicated_zero
from tests.faults.smallfs import abandon
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster, Proc, ProcessExited

from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.bookie.storage import ENTRY_HEAD, ENTRY_KEY, LEDGER_KEY
from magnetar.ledger.distribution import write_set
from magnetar.ledger.metadata_format import LedgerMetadata
from magnetar.ledger.replica_reads import read_entry
from magnetar.metadata.etcd_store import EtcdMetadataStore
from magnetar.protocol.checksum import crc32c

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

SCRUB_INTERVAL = 10.0
# The control run: FAULTS_BITFLIPS_CONTROL=1 starts the bookies without the scrubber (as before this
# issue): nothing repairs a damaged copy that no read hits, nothing checks a crashed bookie's index
# before it serves again, and both tests must fail.
CONTROL = os.environ.get("FAULTS_BITFLIPS_CONTROL") == "1"
ENTRIES_PER_LEDGER = 150
CORRUPT_GAUGE = "magnetar_bookie_scrub_corrupt_total"
DAMAGED_GAUGE = "magnetar_bookie_scrub_damaged_entries"


def _cluster(base: Path) -> LocalCluster:
    return LocalCluster(
        base,
        bookies=4,
        broker_args=[
            "--managed-ledger-max-entries-per-ledger",
            str(ENTRIES_PER_LEDGER),
            "--managed-ledger-min-ledger-rollover-time-minutes",
            "0",
        ],
        bookie_args=[] if CONTROL else ["--scrub-interval", str(SCRUB_INTERVAL)],
    )


@dataclass
class Probe:
    """A direct view of the cluster: metadata and one client per bookie (its own etcd session)."""

    store: EtcdMetadataStore
    resolver: MetadataBookieResolver

    @classmethod
    async def open(cls, cluster: LocalCluster) -> Probe:
        store = await EtcdMetadataStore.connect(cluster.metadata_url, lease_ttl=5.0)
        return cls(store, MetadataBookieResolver(store, request_timeout=10))

    async def close(self) -> None:
        await self.resolver.close()
        await self.store.close()

    async def closed_ledgers(self, cluster: LocalCluster) -> dict[int, LedgerMetadata]:
        out: dict[int, LedgerMetadata] = {}
        async with cluster.metadata() as md:
            for ledger_id in await md.ledger_ids():
                meta = await md.ledger(ledger_id)
                if meta is not None and meta.is_closed:
                    out[ledger_id] = meta
        return out

    async def good_copy(self, ledger_id: int, entry_id: int, md: LedgerMetadata, victim: str) -> bytes:
        """The entry as every replica other than ``victim`` holds it (they must all agree)."""
        fragment = md.fragment_for(entry_id)
        copies = set()
        for slot in write_set(entry_id, md.ensemble_size, md.write_quorum):
            bookie = fragment.bookies[slot]
            if bookie == victim:
                continue
            try:
                got = await self.resolver.client(bookie).read_entry(ledger_id, entry_id)
            except Exception:
                continue
            assert crc32c(got.data) == got.crc
            copies.add(got.data)
        assert len(copies) == 1, f"{ledger_id}:{entry_id}: replicas other than {victim} disagree or are absent"
        return copies.pop()

    async def from_victim(self, victim: str, ledger_id: int, entry_id: int) -> bytes | BaseException:
        try:
            got = await self.resolver.client(victim).read_entry(ledger_id, entry_id)
        except Exception as exc:
            return exc
        return got.data


def _holdings(ledgers: dict[int, LedgerMetadata], bookie: str) -> list[tuple[int, int]]:
    held = []
    for ledger_id, md in sorted(ledgers.items()):
        for entry_id in range(md.last_entry_id + 1):
            fragment = md.fragment_for(entry_id)
            if any(fragment.bookies[s] == bookie for s in write_set(entry_id, md.ensemble_size, md.write_quorum)):
                held.append((ledger_id, entry_id))
    return held


def _flip(raw: bytearray, offset: int, rng: random.Random) -> None:
    raw[offset] ^= 1 << rng.randrange(8)


async def _start_workload(cluster: LocalCluster, topic: str) -> QueueWorkload:
    wl = QueueWorkload(cluster.service_url, topic)
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(1500, within=90)
    return wl


async def _pick_victim(cluster: LocalCluster, probe: Probe, rng: random.Random) -> tuple[Proc, list[tuple[int, int]]]:
    ledgers = await eventually(
        lambda: _at_least_closed(probe, cluster, 2), within=60, what="two closed ledgers to damage"
    )
    candidates = [b for b in cluster.bookie_ids if len(_holdings(ledgers, b)) >= 10]
    victim = cluster.bookie(rng.choice(sorted(candidates)))
    return victim, _holdings(ledgers, victim.name)


async def _at_least_closed(probe: Probe, cluster: LocalCluster, n: int) -> dict[int, LedgerMetadata] | None:
    ledgers = await probe.closed_ledgers(cluster)
    return ledgers if len(ledgers) >= n else None


async def _on_a_cluster(
    cluster_base: Path,
    topic: str,
    scenario: Callable[[LocalCluster, Probe, QueueWorkload], Awaitable[None]],
) -> None:
    """Start the cluster and the workload, run ``scenario``; print the logs if it fails."""
    cluster = _cluster(cluster_base)
    cluster.start()
    probe = await Probe.open(cluster)
    wl: QueueWorkload | None = None
    try:
        wl = await _start_workload(cluster, topic)
        await scenario(cluster, probe, wl)
    except BaseException:
        print(f"\n===== process logs (tails) under {cluster.logs} =====\n{cluster.log_tails()}")
        await abandon(wl)
        raise
    finally:
        await probe.close()
        cluster.close()


async def test_flipped_payload_crc_and_ledger_state_are_detected_and_repaired_in_place(
    cluster_base: Path, topic: str, rng: random.Random, fault_seed: int
) -> None:
    await _on_a_cluster(cluster_base, topic, lambda c, p, wl: _payload_scenario(c, p, wl, rng, fault_seed))


async def _payload_scenario(
    cluster: LocalCluster, probe: Probe, wl: QueueWorkload, rng: random.Random, fault_seed: int
) -> None:
    victim, held = await _pick_victim(cluster, probe, rng)
    held_set = set(held)
    victim.kill9()
    t_kill = time.monotonic()
    wl.event(f"kill -9 {victim.name} to damage its disk")
    assert victim.data_dir is not None
    data_file = victim.data_dir / "ledgers" / "data.mdb"
    raw = bytearray(data_file.read_bytes())
    entries = [n for n in lmdbpages.named_db(raw, b"entries").leaves if ENTRY_KEY.unpack(n.key) in held_set]
    states = lmdbpages.named_db(raw, b"ledgers").leaves
    picked = rng.sample(entries, rng.randint(4, 8))
    n_payload = len(picked) // 2
    damaged: dict[tuple[int, int], str] = {}
    for i, node in enumerate(picked):
        key = ENTRY_KEY.unpack(node.key)
        if i < n_payload:  # (a) a bit of the payload
            _flip(raw, node.data_offset + ENTRY_HEAD.size + rng.randrange(node.size - ENTRY_HEAD.size), rng)
            damaged[key] = "payload"
        else:  # (b) a bit of the stored CRC or key check
            _flip(raw, node.data_offset + rng.randrange(ENTRY_HEAD.size), rng)
            damaged[key] = "crc"
    state_nodes = rng.sample(states, min(len(states), rng.randint(1, 2)))
    for node in state_nodes:  # (b) a bit of a ledger's state: fenced, LAC or their CRC
        _flip(raw, node.data_offset + rng.randrange(node.size), rng)
    damaged_states = sorted(LEDGER_KEY.unpack(n.key)[0] for n in state_nodes)
    data_file.write_bytes(bytes(raw))
    wl.event(f"flipped bits in {victim.name}: entries {damaged}, ledger states {damaged_states}")

    await in_thread(victim.start)
    t_restart = time.monotonic()
    wl.event(f"{victim.name} restarted")
    # Reads right away: through the replicas (what a broker does) and from the victim alone.
    ledgers = await probe.closed_ledgers(cluster)
    wrong: list[str] = []
    refused = 0
    for (ledger_id, entry_id), _kind in sorted(damaged.items()):
        md = ledgers[ledger_id]
        good = await probe.good_copy(ledger_id, entry_id, md, victim.name)
        via_replicas = await read_entry(probe.resolver, ledger_id, md, entry_id)
        if via_replicas != good:
            wrong.append(f"{ledger_id}:{entry_id} via the replicas")
        direct = await probe.from_victim(victim.name, ledger_id, entry_id)
        if isinstance(direct, BaseException):
            refused += 1
        elif direct != good:
            wrong.append(f"{ledger_id}:{entry_id} from {victim.name}")

    async def detected() -> float | None:
        return await in_thread(_metric_sum, cluster, victim.name, CORRUPT_GAUGE) or None

    await eventually(detected, within=SCRUB_INTERVAL + 30, what=f"{victim.name}'s scrubber finds the damage")
    t_detect = time.monotonic()

    stale: set[tuple[int, int]] = set()

    async def repaired() -> bool:
        current = await probe.closed_ledgers(cluster)
        for ledger_id, entry_id in damaged:
            md = current[ledger_id]
            if victim.name not in _holders(md, entry_id):
                # Re-replicated elsewhere while the victim was down (past the auditor's grace):
                # readers are never sent to this copy, so it needs no repair.
                stale.add((ledger_id, entry_id))
                continue
            got = await probe.from_victim(victim.name, ledger_id, entry_id)
            if isinstance(got, BaseException) or got != await probe.good_copy(ledger_id, entry_id, md, victim.name):
                return False
        for ledger_id in damaged_states:
            try:
                await probe.resolver.client(victim.name).read_lac(ledger_id)
            except Exception:
                if ledger_id in ledgers:
                    return False
        gauge = await in_thread(cluster.bookie_gauge, DAMAGED_GAUGE)
        return gauge.get(victim.name) == 0.0 and not await underreplicated(cluster)

    await eventually(repaired, within=120, what="every damaged copy rewritten on the victim", interval=0.5)
    t_repaired = time.monotonic()
    await wl.wait_acked(200, after=t_repaired, within=60)
    found = {
        kind: await in_thread(_metric_sum, cluster, victim.name, CORRUPT_GAUGE, kind)
        for kind in ("entry", "state", "missing", "stale")
    }
    res = await finish(
        cluster,
        wl,
        "bitflips-payload-crc-state",
        seed=fault_seed,
        victim=victim.name,
        damaged_entries=len(damaged),
        damaged_payloads=n_payload,
        damaged_ledger_states=len(damaged_states),
        damaged_copies_replaced_elsewhere=len(stale),
        direct_reads_refused=refused,
        scrub_found_entries=found["entry"],
        scrub_found_states=found["state"],
        scrub_found_missing=found["missing"],  # entries it missed while down: repaired as well
        scrub_found_stale=found["stale"],
        down_s=round(t_restart - t_kill, 3),
        time_to_detect_s=round(t_detect - t_restart, 3),
        time_to_repair_s=round(t_repaired - t_restart, 3),
        time_to_recover_s=round(t_repaired - t_restart, 3),
    )
    assert not wrong, f"wrong data served: {wrong}"
    assert res.valid, res.summary()


async def test_flipped_index_page_headers_never_serve_garbage(
    cluster_base: Path, topic: str, rng: random.Random, fault_seed: int
) -> None:
    await _on_a_cluster(cluster_base, topic, lambda c, p, wl: _index_scenario(c, p, wl, rng, fault_seed))


async def _index_scenario(
    cluster: LocalCluster, probe: Probe, wl: QueueWorkload, rng: random.Random, fault_seed: int
) -> None:
    victim, held = await _pick_victim(cluster, probe, rng)
    victim.kill9()
    t_kill = time.monotonic()
    wl.event(f"kill -9 {victim.name} to damage its index")
    assert victim.data_dir is not None
    data_file = victim.data_dir / "ledgers" / "data.mdb"
    raw = bytearray(data_file.read_bytes())
    tree = lmdbpages.named_db(raw, b"entries")
    pages = rng.sample(tree.branch_pages, min(1, len(tree.branch_pages)))
    pages += rng.sample(tree.leaf_pages, min(len(tree.leaf_pages), rng.randint(1, 3)))
    flips: list[dict[str, int]] = []
    for pgno in pages:
        offset = pgno * lmdbpages.PAGE + rng.randrange(10, 16)  # flags, lower or upper
        _flip(raw, offset, rng)
        flips.append({"page": pgno, "byte": offset % lmdbpages.PAGE})
    data_file.write_bytes(bytes(raw))
    wl.event(f"flipped bits in {victim.name}'s index page headers: {flips}")

    victim.spawn()
    t_restart = time.monotonic()
    try:
        victim.wait_ready(60)
        started = True
    except ProcessExited:
        started = False
    wl.event(f"{victim.name} restarted: {'ready' if started else 'exited'}")
    ledgers = await probe.closed_ledgers(cluster)
    wrong: list[str] = []
    served = refused = 0
    for ledger_id, entry_id in held:
        md = ledgers[ledger_id]
        good = await probe.good_copy(ledger_id, entry_id, md, victim.name)
        if await read_entry(probe.resolver, ledger_id, md, entry_id) != good:
            wrong.append(f"{ledger_id}:{entry_id} via the replicas")
        direct = await probe.from_victim(victim.name, ledger_id, entry_id) if victim.alive else None
        if isinstance(direct, bytes):
            served += 1
            if direct != good:
                wrong.append(f"{ledger_id}:{entry_id} from {victim.name}")
        else:
            refused += 1

    # Either the victim repairs itself (damage found, copies rewritten) or it leaves the cluster
    # (corrupt index: stops serving / crashed) and its ledgers are re-replicated elsewhere.
    async def settled() -> str | None:
        if await underreplicated(cluster):
            return None
        registered = victim.name in await _available(cluster)
        if registered and victim.alive:
            for ledger_id, entry_id in held:
                got = await probe.from_victim(victim.name, ledger_id, entry_id)
                md = ledgers[ledger_id]
                if isinstance(got, BaseException) and victim.name in _holders(md, entry_id):
                    return None
            return "repaired in place"
        current = await probe.closed_ledgers(cluster)
        if any(victim.name in f.bookies for md in current.values() for f in md.fragments):
            return None
        return "left the cluster, its ledgers re-replicated"

    outcome = await eventually(settled, within=180, what="the damage repaired or the victim replaced", interval=1.0)
    t_settled = time.monotonic()
    await wait_underreplicated_zero(cluster, within=60)
    refused_restart: dict[str, Any] = {}
    if outcome.startswith("left"):
        # It must refuse to come back on the damaged disk, with a clear error (not serve from it).
        if victim.alive:
            victim.kill9()
        try:
            await in_thread(victim.start, 60)
            refused_restart = {"restarted": True}
        except ProcessExited as exc:
            refused_restart = {"exit_code": exc.code, "message": _refusal(exc.tail)}
    await wl.wait_acked(200, after=t_settled, within=60)
    res = await finish(
        cluster,
        wl,
        "bitflips-index",
        seed=fault_seed,
        victim=victim.name,
        flips=flips,
        victim_started=started,
        outcome=outcome,
        entries_held=len(held),
        direct_reads_served=served,
        direct_reads_refused=refused,
        down_s=round(t_restart - t_kill, 3),
        time_to_settle_s=round(t_settled - t_restart, 3),
        time_to_recover_s=round(t_settled - t_restart, 3),
        **refused_restart,
    )
    record("bitflips-index-outcome", seed=fault_seed, outcome=outcome, **refused_restart)
    assert not wrong, f"wrong data served: {wrong[:10]}"
    assert res.valid, res.summary()
    if outcome.startswith("left"):
        assert refused_restart.get("exit_code") == 2, f"must refuse to start on a corrupt index: {refused_restart}"
        assert "corrupt" in str(refused_restart.get("message")), refused_restart


def _metric_sum(cluster: LocalCluster, bookie_id: str, name: str, kind: str | None = None) -> float:
    """The sum of ``name``'s samples (every label set, or those with ``kind``) on one bookie."""
    text = cluster.metrics_text(cluster.bookie_metrics_url(bookie_id), timeout=2)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and (kind is None or f'kind="{kind}"' in line)
    )


def _holders(md: LedgerMetadata, entry_id: int) -> list[str]:
    fragment = md.fragment_for(entry_id)
    return [fragment.bookies[s] for s in write_set(entry_id, md.ensemble_size, md.write_quorum)]


def _refusal(tail: str) -> str:
    return next((line.strip() for line in tail.splitlines() if "refusing to start" in line), tail[-300:])


async def _available(cluster: LocalCluster) -> list[str]:
    async with cluster.metadata() as md:
        return await md.available_bookies()


@pytest.fixture
def cluster_base(tmp_path: Path) -> Path:
    return tmp_path / "cluster"
