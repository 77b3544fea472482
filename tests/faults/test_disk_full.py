"""Disk full (issue 13, scenario 2): a bookie on a small filesystem fills up under the queue workload.

The cluster has 4 bookies (E3/Qw3/Qa2), so a bookie that stops taking writes can be replaced, and
brokers roll their ledgers every few hundred entries, so new ensembles keep being chosen. Every
bookie's data directory is its own small loop-mounted ext4 (``smallfs.py``; ``SMALLFS=tmpfs`` for
tmpfs). A seeded victim from the ensemble being written gets a filler file that takes its disk
past ``--readonly-threshold`` (0.9); then:

(a) it turns read-only before anything is damaged (a scrub of its whole storage afterwards finds
    no bad value, and no commit of it failed);
(b) writes move to other bookies: the ledger gets a new fragment (or a new ledger) without it;
(c) reads keep working from it: entries it stored before the fill (a sample of 50 acknowledged
    ones, each read from it first) read back from it alone while it is read-only;
(d) the condition is visible in its ``magnetar_bookie_read_only`` gauge and in the broker's admin
    list of bookies (``GET /admin/v2/bookies``: ``read_only: true``);
(e) deleting the filler makes it writable again by itself (registration ``read_only: false``) and a
    later ensemble uses it again.
0 acknowledged messages lost. The second test covers a disk that fills faster than the threshold
check: the commit hits ENOSPC, that batch fails with ``PersistenceError``, nothing of it is
visible, the bookie turns read-only by itself, and it survives to write again once space is freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from tests.faults.checker import OK
from tests.faults.nemesis import current_ledger, eventually, finish, in_thread, record
from tests.faults.smallfs import abandon, can_mount, fill_to, skip_or_fail, small_fs
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster

from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.ledger.distribution import write_set
from magnetar.metadata.etcd_store import EtcdMetadataStore
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import BookieReadOnly, NoSuchEntry, NoSuchLedger, PersistenceError

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

THRESHOLD = 0.9
# The control run: FAULTS_DISK_FULL_CONTROL=1 starts the bookies with the threshold off (1.01), so
# only a full disk could stop their adds; the victim never registers read-only and the test fails.
CONTROL = os.environ.get("FAULTS_DISK_FULL_CONTROL") == "1"
DISK_MB = 48
ENTRIES_PER_LEDGER = 400
READ_ONLY_GAUGE = "magnetar_bookie_read_only"


@pytest.fixture
def small_disks() -> None:
    reason = can_mount()
    if reason is not None:
        skip_or_fail(reason)


async def _registration(cluster: LocalCluster, bookie_id: str) -> dict[str, object] | None:
    async with cluster.metadata() as md:
        found = await md.store.get(f"/bookies/available/{bookie_id}")
    return json.loads(found.value) if found is not None else None


async def _read_only_is(cluster: LocalCluster, bookie_id: str, value: bool) -> bool:
    reg = await _registration(cluster, bookie_id)
    return reg is not None and reg.get("read_only") is value


async def _admin_read_only(cluster: LocalCluster, bookie_id: str) -> object:
    listed = await in_thread(cluster.admin_get, "/admin/v2/bookies")
    return next((b.get("read_only") for b in listed if b.get("id") == bookie_id), None)


async def _fragments_since(cluster: LocalCluster, ledgers_before: set[int]) -> list[tuple[int, int, tuple[str, ...]]]:
    """Every fragment of a ledger created after ``ledgers_before``, and the new fragments of those."""
    out: list[tuple[int, int, tuple[str, ...]]] = []
    async with cluster.metadata() as md:
        for ledger_id in await md.ledger_ids():
            meta = await md.ledger(ledger_id)
            if meta is None:
                continue
            for f in meta.fragments:
                if ledger_id not in ledgers_before or f.first_entry > 0:
                    out.append((ledger_id, f.first_entry, tuple(f.bookies)))
    return out


async def _stored_sample(
    cluster: LocalCluster, wl: QueueWorkload, bookie_id: str, limit: int, rng: random.Random
) -> list[tuple[int, int]]:
    """Up to ``limit`` entries acknowledged so far whose write set includes ``bookie_id``, each
    once ``bookie_id`` alone serves it with a matching CRC (waited for: Qa=2 of Qw=3 acknowledges
    an add before the third bookie has stored it).

    Taken before the fill, so (c) reads back entries the bookie is known to hold. Entries in flight
    when it turned read-only are not among them: it refused those, they were acknowledged by the
    other two, and the new fragment starts after the last confirmed entry, so the metadata still
    names it for them: under-replicated, as in BookKeeper, until its scrubber finds them missing
    from a closed ledger and has them copied back once it is writable (``bookie/scrub.py``)."""
    store = await EtcdMetadataStore.connect(cluster.metadata_url, lease_ttl=5.0)
    resolver = MetadataBookieResolver(store)
    try:
        acked = sorted({op.pos[:2] for op in wl.ops if op.status == OK and op.pos is not None and op.pos[0] >= 0})
        held: list[tuple[int, int]] = []
        async with cluster.metadata() as md:
            metas = {ledger_id: await md.ledger(ledger_id) for ledger_id in {pos[0] for pos in acked}}
        for ledger_id, entry_id in acked:
            meta = metas[ledger_id]
            if meta is None:
                continue
            f = meta.fragment_for(entry_id)
            if any(f.bookies[s] == bookie_id for s in write_set(entry_id, meta.ensemble_size, meta.write_quorum)):
                held.append((ledger_id, entry_id))
        picked = sorted(rng.sample(held, min(limit, len(held))))
        client = resolver.client(bookie_id)

        async def served(ledger_id: int, entry_id: int) -> bool:
            try:
                got = await client.read_entry(ledger_id, entry_id)
            except (NoSuchEntry, NoSuchLedger):
                return False
            assert crc32c(got.data) == got.crc, (ledger_id, entry_id)
            return True

        for ledger_id, entry_id in picked:
            await eventually(
                functools.partial(served, ledger_id, entry_id),
                within=10,
                what=f"{bookie_id} storing {ledger_id}:{entry_id}",
            )
        return picked
    finally:
        await resolver.close()
        await store.close()


async def _read_back_from(cluster: LocalCluster, bookie_id: str, entries: list[tuple[int, int]]) -> int:
    """Read each of ``entries`` from ``bookie_id`` alone; each must verify against its CRC."""
    store = await EtcdMetadataStore.connect(cluster.metadata_url, lease_ttl=5.0)
    resolver = MetadataBookieResolver(store)
    try:
        client = resolver.client(bookie_id)
        for ledger_id, entry_id in entries:
            got = await client.read_entry(ledger_id, entry_id)
            assert crc32c(got.data) == got.crc, (ledger_id, entry_id)
        return len(entries)
    finally:
        await resolver.close()
        await store.close()


async def test_a_full_bookie_turns_read_only_writes_move_reads_stay_and_it_comes_back(
    small_disks: None, tmp_path: Path, topic: str, rng: random.Random, fault_seed: int
) -> None:
    base = tmp_path / "cluster"
    cluster = LocalCluster(
        base,
        bookies=4,
        broker_args=[
            "--managed-ledger-max-entries-per-ledger",
            str(ENTRIES_PER_LEDGER),
            "--managed-ledger-min-ledger-rollover-time-minutes",
            "0",
        ],
        bookie_args=["--readonly-threshold", "1.01" if CONTROL else str(THRESHOLD)],
    )
    with contextlib.ExitStack() as disks:
        for p in cluster.bookies:
            assert p.data_dir is not None
            disks.enter_context(small_fs(p.data_dir, DISK_MB))
        wl: QueueWorkload | None = None
        try:
            cluster.start()
            wl = QueueWorkload(cluster.service_url, topic)
            await _scenario(cluster, wl, rng, fault_seed)
        except BaseException:
            print(f"\n===== process logs (tails) under {cluster.logs} =====\n{cluster.log_tails()}")
            await abandon(wl)
            raise
        finally:
            cluster.close()


async def _scenario(cluster: LocalCluster, wl: QueueWorkload, rng: random.Random, fault_seed: int) -> None:
    await wl.prepare()
    await wl.start()
    await wl.wait_acked(300, within=60)
    ledger_id, before = await current_ledger(cluster, wl)
    victim = cluster.bookie(rng.choice(list(before.last_ensemble)))
    assert victim.data_dir is not None
    async with cluster.metadata() as md:
        ledgers_before = set(await md.ledger_ids())
    stored = await _stored_sample(cluster, wl, victim.name, 50, rng)
    target = rng.uniform(THRESHOLD + 0.02, 0.97)
    t_fill = time.monotonic()
    filler = await in_thread(fill_to, victim.data_dir, target)
    wl.event(f"filled {victim.name}'s disk to {target:.3f} ({filler} bytes of filler)")

    await eventually(lambda: _read_only_is(cluster, victim.name, True), within=30, what="registered read-only")
    t_ro = time.monotonic()
    gauge = await in_thread(cluster.bookie_gauge, READ_ONLY_GAUGE)
    admin_ro = await _admin_read_only(cluster, victim.name)

    async def moved() -> list[tuple[int, int, tuple[str, ...]]] | None:
        frags = await _fragments_since(cluster, ledgers_before)
        return [f for f in frags if victim.name not in f[2]] or None

    without = await eventually(moved, within=60, what=f"a new fragment or ledger without {victim.name}")
    t_moved = time.monotonic()
    t_first = await wl.wait_acked(1, after=t_ro, within=60)
    await wl.wait_acked(200, after=t_ro, within=60)
    # Nothing chosen after the bookie went read-only (and the writers learned it) may include it.
    settled = set(await _ledger_ids(cluster))
    await wl.wait_acked(300, after=time.monotonic(), within=60)
    late = [f for f in await _fragments_since(cluster, settled) if victim.name in f[2]]
    read_back = await _read_back_from(cluster, victim.name, stored)

    t_free = time.monotonic()
    (victim.data_dir / "filler").unlink()
    wl.event(f"deleted the filler on {victim.name}")
    await eventually(lambda: _read_only_is(cluster, victim.name, False), within=45, what="registered writable")
    t_writable = time.monotonic()
    gauge_after = await in_thread(cluster.bookie_gauge, READ_ONLY_GAUGE)
    admin_after = await _admin_read_only(cluster, victim.name)
    freed = set(await _ledger_ids(cluster))

    async def used_again() -> list[tuple[int, int, tuple[str, ...]]] | None:
        return [f for f in await _fragments_since(cluster, freed) if victim.name in f[2]] or None

    reused = await eventually(used_again, within=90, what=f"a new ensemble with {victim.name} again")
    t_reused = time.monotonic()
    await wl.wait_acked(100, after=t_reused, within=60)
    res = await finish(
        cluster,
        wl,
        "disk-full-read-only",
        seed=fault_seed,
        victim=victim.name,
        ledger=ledger_id,
        filled_to=round(target, 3),
        filler_bytes=filler,
        read_only_after_fill_s=round(t_ro - t_fill, 3),
        writes_moved_after_read_only_s=round(t_moved - t_ro, 3),
        first_ack_after_read_only_s=round(t_first - t_ro, 3),
        fragments_without_victim=len(without),
        entries_read_back_from_victim=read_back,
        writable_after_free_s=round(t_writable - t_free, 3),
        time_to_recover_s=round(t_writable - t_free, 3),
        ensemble_with_victim_again_after_free_s=round(t_reused - t_free, 3),
    )
    # (a) nothing damaged, no failed commit: stop the victim and walk its whole storage.
    victim.stop()
    storage = await in_thread(BookieStorage, victim.data_dir, readonly_threshold=None)
    try:
        walk = await in_thread(storage.verify_all)
    finally:
        await storage.close()
    log = victim.log_path.read_text(errors="replace")
    record("disk-full-read-only-scrub", seed=fault_seed, entries=walk.entries, damaged=len(walk.damaged_entries))
    assert res.valid, res.summary()
    assert walk.damaged_entries == [] and walk.damaged_states == [], walk
    assert "write transaction failed" not in log, "the threshold should stop adds before the disk is full"
    assert gauge.get(victim.name) == 1.0, gauge
    assert admin_ro is True, admin_ro
    assert not late, f"ensembles chosen after {victim.name} went read-only include it: {late}"
    assert read_back > 0
    assert gauge_after.get(victim.name) == 0.0, gauge_after
    assert admin_after is False, admin_after
    assert reused


async def _ledger_ids(cluster: LocalCluster) -> list[int]:
    async with cluster.metadata() as md:
        return await md.ledger_ids()


async def test_a_commit_that_hits_enospc_fails_its_batch_only_and_the_bookie_recovers(
    small_disks: None, tmp_path: Path, rng: random.Random, fault_seed: int
) -> None:
    """No threshold at all (the check never fires): the disk fills under a stream of 64 KiB adds.
    Acked adds are all readable, failed ones are all absent, and the bookie goes on."""
    with small_fs(tmp_path / "disk", 16) as disk:
        leave = rng.randrange(1 << 20, 3 << 20)
        fill_to(disk, 1.0 - leave / shutil.disk_usage(disk).total)
        # LMDB's own synced commits (the journal's case is the next test; at this fill the journal
        # would not even open, test_journal_on_a_disk_too_full_for_a_segment below).
        storage = BookieStorage(disk / "bookie", readonly_threshold=None, journal=False)
        acked: dict[int, bytes] = {}
        failed: list[int] = []
        t0 = time.monotonic()
        try:
            entry_id = 0
            refused = False
            while not failed and not refused and entry_id < 4096:
                batch = []
                for _ in range(16):
                    data = os.urandom(64 << 10)
                    try:
                        fut = storage.add_nowait(1, entry_id, data, crc32c(data), NO_ENTRY)
                    except BookieReadOnly:  # the writer saw the disk full meanwhile: refused up front
                        refused = True
                        break
                    batch.append((entry_id, data, fut))
                    entry_id += 1
                for eid, data, fut in batch:
                    try:
                        await fut
                        acked[eid] = data
                    except PersistenceError:
                        failed.append(eid)
            t_full = time.monotonic()
            read_only = storage.read_only
            with pytest.raises(BookieReadOnly):
                storage.add_nowait(1, entry_id, b"x", crc32c(b"x"), NO_ENTRY)
            for eid, data in acked.items():
                assert storage.read_sync(1, eid).data == data
            for eid in failed:  # absent (NoSuchLedger if not even the ledger's first add made it)
                with pytest.raises((NoSuchEntry, NoSuchLedger)):
                    storage.read_sync(1, eid)
            walk = storage.verify_all()
            (disk / "filler").unlink()
            t_free = time.monotonic()
            writable = not storage.check_disk(force=True)
            data = os.urandom(1024)
            await storage.add(1, entry_id, data, crc32c(data), NO_ENTRY)
            assert storage.read_sync(1, entry_id).data == data
        finally:
            await storage.close()
        record(
            "disk-full-enospc",
            seed=fault_seed,
            free_bytes_left=leave,
            acknowledged=len(acked),
            failed=len(failed),
            lost=0,
            seconds_to_fill=round(t_full - t0, 3),
            time_to_recover_s=round(time.monotonic() - t_free, 3),
        )
        assert failed, "the disk never filled: the test did not reach ENOSPC"
        assert read_only, "a commit that hit ENOSPC must turn the bookie read-only"
        assert walk.damaged_entries == [] and walk.entries == len(acked)
        assert writable


async def test_with_the_journal_a_full_disk_refuses_new_adds_and_keeps_every_acknowledged_one(
    small_disks: None, tmp_path: Path, rng: random.Random, fault_seed: int
) -> None:
    """Journal mode, no threshold: 64 KiB adds until the disk is full. The journal's segments are
    allocated in full, so a sync never fails for space: the disk shows as a segment that cannot be
    allocated (the add is refused up front, BookieReadOnly) and as LMDB commits that fail (retried;
    the acknowledged adds stay readable from the overlay). Once space is freed, LMDB catches up,
    every acknowledged add is in it, and adds are taken again."""
    # The filler must free more than LMDB then needs to take in every journaled add (about what the
    # journal holds, up to ``leave``): on a 32 MiB disk a filler of 10 MiB against 20 MiB journaled
    # left LMDB no room to catch up, and the bookie rightly stayed read-only.
    with small_fs(tmp_path / "disk", 64) as disk:
        leave = rng.randrange(12 << 20, 20 << 20)
        fill_to(disk, 1.0 - leave / shutil.disk_usage(disk).total)
        storage = BookieStorage(disk / "bookie", readonly_threshold=None, journal=True)
        acked: dict[int, bytes] = {}
        t0 = time.monotonic()
        try:
            assert storage.journaled
            entry_id = 0
            refused = False
            while not refused and entry_id < 8192:
                batch = []
                for _ in range(16):
                    data = os.urandom(64 << 10)
                    try:
                        fut = storage.add_nowait(1, entry_id, data, crc32c(data), NO_ENTRY)
                    except BookieReadOnly:
                        refused = True
                        break
                    batch.append((entry_id, data, fut))
                    entry_id += 1
                for eid, data, fut in batch:
                    await fut  # acknowledged once journaled: nothing fails for space after that
                    acked[eid] = data
            t_full = time.monotonic()
            assert refused, "the disk never filled: the test did not reach ENOSPC"
            assert storage.read_only
            with pytest.raises(BookieReadOnly):
                storage.add_nowait(1, entry_id, b"x", crc32c(b"x"), NO_ENTRY)
            for eid, data in acked.items():
                assert storage.read_sync(1, eid).data == data
            (disk / "filler").unlink()
            t_free = time.monotonic()
            walk = await asyncio.to_thread(storage.verify_all)  # waits until LMDB holds every acked add
            assert walk.damaged_entries == [] and walk.entries == len(acked)

            async def writable() -> bool:
                return not storage.check_disk(force=True)

            await eventually(writable, within=30, what="writable again after freeing space")
            data = os.urandom(1024)
            await storage.add(1, entry_id, data, crc32c(data), NO_ENTRY)
            assert storage.read_sync(1, entry_id).data == data
        finally:
            await storage.close()
        reopened = BookieStorage(disk / "bookie", readonly_threshold=None, journal=True)
        try:
            for eid, data in acked.items():
                assert reopened.read_sync(1, eid).data == data
        finally:
            await reopened.close()
        record(
            "disk-full-journal",
            seed=fault_seed,
            free_bytes_left=leave,
            acknowledged=len(acked),
            lost=0,
            seconds_to_fill=round(t_full - t0, 3),
            time_to_recover_s=round(time.monotonic() - t_free, 3),
        )


async def test_journal_on_a_disk_too_full_for_a_segment(small_disks: None, tmp_path: Path) -> None:
    """A bookie whose disk has no room for a journal segment still opens (and serves reads): it
    runs without the journal, saying why, and its read-only checks do the rest."""
    with small_fs(tmp_path / "disk", 16) as disk:
        fill_to(disk, 1.0 - (1 << 20) / shutil.disk_usage(disk).total)
        storage = BookieStorage(disk / "bookie", readonly_threshold=None, journal=True)
        try:
            assert not storage.journaled
            assert storage.journal_unavailable is not None and "no room" in storage.journal_unavailable
        finally:
            await storage.close()
