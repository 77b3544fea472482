"""Auto-recovery and decommission on real bookies: ``BookieService`` nodes (TCP on loopback, LMDB
storage in temp dirs) sharing one LMDB metadata store, ledgers written by the real ``LedgerManager``
through ``MetadataBookieResolver``.

A crash is ``BookieService.stop()``: the server deregisters, which is what the store does to an
ephemeral key when a crashed process's session ends (the LMDB store serves one process, so the
session of one node cannot end alone). Waits are on store watches or the auditor's own events,
each with a deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from tests.support.etcd import EtcdProcess

from magnetar.bookie.autorecovery.auditor import AUDITOR_PATH, current_auditor
from magnetar.bookie.autorecovery.decommission import (
    DecommissionTimeout,
    cancel_decommission,
    decommission,
    decommissioning,
)
from magnetar.bookie.autorecovery.underreplication import (
    UNDERREPLICATED,
    UnderReplicated,
    entries_on_slots,
    fragment_ranges,
    ledgers_referencing,
    mark_underreplicated,
    missing_bookies,
    read_marker,
    underreplicated_count,
    underreplicated_ledgers,
)
from magnetar.bookie.registration import lookup
from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.bookie.service import AutoRecoveryOptions, BookieService
from magnetar.ledger.distribution import write_set
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_format import Fragment, LedgerMetadata, LedgerState
from magnetar.ledger.write_handle import WriteHandle
from magnetar.metadata import paths
from magnetar.metadata.etcd_store import EtcdMetadataStore, SessionLost
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.metadata.store import ANY_VERSION, MetadataStore, Notification, Stat, Versioned
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import NoSuchEntry, NotEnoughBookies

T = TypeVar("T")
DEADLINE = 60.0
FAST = AutoRecoveryOptions(grace_period=0.2, recheck_interval=30.0, poll_interval=30.0, retry_delay=0.2)


class Nodes:
    """Bookie processes in miniature: each a full ``BookieService`` with auto-recovery."""

    scrub_interval = 0.0  # the scrubber's period (0: none); tests/bookie/test_scrub.py turns it on

    def __init__(self, root: Path, store: LmdbMetadataStore, options: AutoRecoveryOptions) -> None:
        self.root = root
        self.store = store
        self.options = options
        self.registry = CollectorRegistry()
        self.services: dict[str, BookieService] = {}
        self.resolver = MetadataBookieResolver(store, request_timeout=10)
        self.manager = LedgerManager(store, self.resolver)

    async def start(self, bookie_id: str) -> BookieService:
        svc = BookieService(
            self.root / bookie_id,
            bookie_id=bookie_id,
            store=self.store,
            readonly_threshold=None,
            sync=False,
            registry=self.registry,
            autorecovery_options=self.options,
            scrub_interval=self.scrub_interval,
        )
        await svc.start()
        self.services[bookie_id] = svc
        return svc

    async def crash(self, bookie_id: str) -> None:
        await self.services.pop(bookie_id).stop()

    def running(self) -> list[BookieService]:
        return list(self.services.values())

    async def leader(self) -> BookieService:
        async def elected() -> BookieService | None:
            leaders = [s for s in self.running() if s.auditor is not None and s.auditor.is_leader]
            return leaders[0] if len(leaders) == 1 else None

        return await until(self.store, [AUDITOR_PATH], elected)

    async def close(self) -> None:
        for svc in list(self.services.values()):
            await svc.stop()
        self.services.clear()
        await self.resolver.close()


async def until(
    store: MetadataStore, prefixes: list[str], check: Callable[[], Awaitable[T | None]], within: float = DEADLINE
) -> T:
    """Re-evaluate ``check`` after every change under ``prefixes`` until it returns a truthy value.

    A short poll backs the watch up, because some conditions (an auditor's in-memory state) change
    without a store write of their own."""
    changed = asyncio.Event()
    unsubscribe = [store.watch(p, lambda _n: changed.set()) for p in prefixes]
    try:
        async with asyncio.timeout(within):
            while True:
                changed.clear()
                result = await check()
                if result:
                    return result
                try:
                    async with asyncio.timeout(0.05):
                        await changed.wait()
                except TimeoutError:
                    pass
    finally:
        for unsub in unsubscribe:
            unsub()


async def count_is(store: MetadataStore, expected: int) -> bool:
    return await underreplicated_count(store) == expected


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LmdbMetadataStore]:
    s = await LmdbMetadataStore.open(tmp_path / "meta")
    yield s
    await s.close()


@pytest.fixture
async def nodes(tmp_path: Path, store: LmdbMetadataStore) -> AsyncIterator[Nodes]:
    n = Nodes(tmp_path, store, FAST)
    yield n
    await n.close()


async def write_ledgers(
    nodes: Nodes, count: int, entries: int, quorums: tuple[int, int, int], *, size: int = 256, close: bool = True
) -> dict[int, list[bytes]]:
    """``count`` ledgers of ``entries`` random entries each, pipelined; closed unless told."""
    written: dict[int, list[bytes]] = {}
    for _ in range(count):
        handle = await nodes.manager.create(*quorums)
        data = [os.urandom(size) for _ in range(entries)]
        await asyncio.gather(*(handle.append_nowait(d) for d in data))
        if close:
            await handle.close()
        written[handle.ledger_id] = data
    return written


async def assert_replica_holds_its_entries(
    nodes: Nodes, ledger_id: int, md: LedgerMetadata, bookie_id: str, expected: list[bytes]
) -> int:
    """Read, from ``bookie_id`` itself, every entry its slots hold; each must carry the right CRC.

    Also checks that it holds nothing else of those fragments (the copy followed the striping rule
    instead of copying whole ledgers). Returns how many entries it holds."""
    client = nodes.resolver.client(bookie_id)
    held = 0
    for fragment, first, last in fragment_ranges(md):
        if bookie_id not in fragment.bookies:
            continue
        slot = fragment.bookies.index(bookie_id)
        for entry_id in range(first, last + 1):
            if slot in write_set(entry_id, md.ensemble_size, md.write_quorum):
                result = await client.read_entry(ledger_id, entry_id)
                assert result.data == expected[entry_id]
                assert result.crc == crc32c(expected[entry_id])
                held += 1
            else:
                with pytest.raises(NoSuchEntry):
                    await client.read_entry(ledger_id, entry_id)
    return held


# --- lost bookie --------------------------------------------------------------------------------


async def test_lost_bookie_is_rereplicated_to_the_spare_and_the_count_returns_to_zero(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 10, 1000, (3, 2, 2))  # every ledger on b0, b1, b2
    await nodes.start("b3")  # the spare: the only bookie outside each ensemble
    slot_of_b1 = {lid: (await nodes.manager.get_metadata(lid)).fragments[0].bookies.index("b1") for lid in written}

    lost_at = time.monotonic()
    await nodes.crash("b1")

    async def drained() -> bool:
        return await count_is(nodes.store, 0) and not await ledgers_referencing(nodes.store, {"b1"})

    await until(nodes.store, [UNDERREPLICATED, paths.LEDGERS], drained)
    elapsed = time.monotonic() - lost_at

    async def accounted() -> list[int]:  # a worker records its repair just after its marker delete
        done = sorted(lid for s in nodes.running() if s.replication for lid in s.replication.repaired)
        return done if len(done) >= len(written) else []

    repaired = await until(nodes.store, [], accounted)
    assert repaired == sorted(written), "every ledger was marked and repaired exactly once"
    copied = sum(s.replication.entries_copied for s in nodes.running() if s.replication)
    # E3/Qw2: the lost slot held 2 of every 3 entries, and only those were copied.
    assert copied == sum(len(entries_on_slots(0, 999, [slot], 3, 2)) for slot in slot_of_b1.values())
    for ledger_id, data in written.items():
        md = await nodes.manager.get_metadata(ledger_id)
        assert md.state is LedgerState.CLOSED and md.last_entry_id == 999
        assert set(md.all_bookies()) == {"b0", "b2", "b3"}
        assert md.fragments[0].bookies.index("b3") == slot_of_b1[ledger_id], "b3 took b1's slot"
        held = await assert_replica_holds_its_entries(nodes, ledger_id, md, "b3", data)
        assert held == len(entries_on_slots(0, 999, [slot_of_b1[ledger_id]], 3, 2))
        reader = await nodes.manager.open(ledger_id)
        assert await reader.read(0, 999) == data
    leader = await nodes.leader()

    async def gauge_is_zero() -> bool:
        sample = nodes.registry.get_sample_value(
            "magnetar_bookie_underreplicated_ledgers", {"bookie": leader.bookie_id}
        )
        return sample == 0

    await until(nodes.store, [UNDERREPLICATED], gauge_is_zero)
    print(f"\n10 ledgers x 1000 entries (E3/Qw2/Qa2, 256 B): bookie loss -> under-replicated == 0 in {elapsed:.2f}s")


async def test_auditor_marks_exactly_the_ledgers_that_used_lost_bookies(nodes: Nodes) -> None:
    await nodes.start("b0")
    await nodes.start("b2")
    pair = await write_ledgers(nodes, 2, 5, (2, 2, 2))  # on b0, b2 only
    await nodes.start("b1")
    triple = await write_ledgers(nodes, 2, 5, (3, 3, 2))  # on b0, b1, b2
    # Three bookies and ensembles of two or three: no spare exists, so markers stay put.
    await nodes.crash("b1")
    assert await until(nodes.store, [UNDERREPLICATED], lambda: _markers(nodes, 2)) == {
        lid: frozenset({"b1"}) for lid in triple
    }
    await nodes.crash("b2")
    assert await until(nodes.store, [UNDERREPLICATED], lambda: _markers(nodes, 4, frozenset({"b2"}))) == {
        **{lid: frozenset({"b2"}) for lid in pair},
        **{lid: frozenset({"b1", "b2"}) for lid in triple},
    }


async def _markers(nodes: Nodes, count: int, naming: frozenset[str] = frozenset()) -> dict[int, frozenset[str]] | None:
    """The markers' missing sets once there are ``count`` markers, all naming ``naming``."""
    out: dict[int, frozenset[str]] = {}
    for ledger_id in await underreplicated_ledgers(nodes.store):
        found = await read_marker(nodes.store, ledger_id)
        if found is not None:
            out[ledger_id] = found[0].missing
    return out if len(out) == count and all(naming <= m for m in out.values()) else None


async def test_with_no_spare_the_marker_stays_until_a_bookie_joins(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 3, 20, (3, 3, 2))
    await nodes.crash("b0")
    await until(nodes.store, [UNDERREPLICATED], lambda: count_is(nodes.store, 3))
    # Workers tried and found no replacement (R2: a fragment needs E distinct bookies).
    for ledger_id in written:
        assert "b0" in (await nodes.manager.get_metadata(ledger_id)).all_bookies()
    await nodes.start("b3")  # its registration wakes the workers at once
    await until(nodes.store, [UNDERREPLICATED], lambda: count_is(nodes.store, 0))
    for ledger_id, data in written.items():
        md = await nodes.manager.get_metadata(ledger_id)
        assert "b0" not in md.all_bookies()
        assert await assert_replica_holds_its_entries(nodes, ledger_id, md, "b3", data) == 20


async def test_bookie_back_within_the_grace_period_causes_no_work(tmp_path: Path, store: LmdbMetadataStore) -> None:
    nodes = Nodes(tmp_path, store, AutoRecoveryOptions(grace_period=5.0, recheck_interval=30.0, retry_delay=0.2))
    try:
        for b in ("b0", "b1", "b2", "b3"):
            await nodes.start(b)
        written = await write_ledgers(nodes, 3, 10, (4, 2, 2))  # every ledger uses every bookie
        before = {lid: await nodes.manager.get_metadata(lid) for lid in written}
        leader = await nodes.leader()
        victim = next(b for b in ("b1", "b2") if b != leader.bookie_id)
        assert leader.auditor is not None

        await nodes.crash(victim)
        await until(store, [], lambda: _pending(leader, victim, True), within=5)
        await nodes.start(victim)  # same data directory, same cookie: its replicas are intact
        await until(store, [], lambda: _pending(leader, victim, False), within=5)

        report = await leader.auditor.audit_now()
        assert report.lost == frozenset() and report.waiting == frozenset() and report.marked == 0
        assert await underreplicated_count(store) == 0
        assert all(not s.replication.repaired for s in nodes.running() if s.replication)
        assert {lid: await nodes.manager.get_metadata(lid) for lid in written} == before
    finally:
        await nodes.close()


async def _pending(leader: BookieService, bookie_id: str, expected: bool) -> bool:
    assert leader.auditor is not None
    return (bookie_id in leader.auditor.pending_losses) == expected


async def test_marker_is_cleared_without_copying_when_the_bookie_returns_before_repair(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 2, 10, (3, 3, 2))
    before = {lid: await nodes.manager.get_metadata(lid) for lid in written}
    await nodes.crash("b1")
    await until(nodes.store, [UNDERREPLICATED], lambda: count_is(nodes.store, 2))  # no spare: stuck
    await nodes.start("b1")
    await until(nodes.store, [UNDERREPLICATED], lambda: count_is(nodes.store, 0))
    assert sum(s.replication.entries_copied for s in nodes.running() if s.replication) == 0
    assert {lid: await nodes.manager.get_metadata(lid) for lid in written} == before


# --- open ledgers -------------------------------------------------------------------------------


async def test_open_ledger_is_left_to_its_writer_and_repaired_once_closed(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    handle: WriteHandle = await nodes.manager.create(3, 3, 2)
    data = [os.urandom(64) for _ in range(50)]
    await asyncio.gather(*(handle.append_nowait(d) for d in data))
    await nodes.start("b3")
    await nodes.crash("b1")

    async def deferred() -> bool:
        return any(s.replication is not None and handle.ledger_id in s.replication.deferred for s in nodes.running())

    await until(nodes.store, [UNDERREPLICATED], deferred)
    md = await nodes.manager.get_metadata(handle.ledger_id)
    assert md.state is LedgerState.OPEN and "b1" in md.all_bookies()  # the writer's metadata untouched
    assert await underreplicated_count(nodes.store) == 1

    await handle.close()  # the writer's compare-and-set still succeeds: nobody changed its record
    await until(nodes.store, [UNDERREPLICATED], lambda: count_is(nodes.store, 0))
    md = await nodes.manager.get_metadata(handle.ledger_id)
    assert md.is_closed and md.last_entry_id == 49 and "b1" not in md.all_bookies()
    assert await assert_replica_holds_its_entries(nodes, handle.ledger_id, md, "b3", data) == 50


# --- auditor election ---------------------------------------------------------------------------


async def test_auditor_failover_when_the_leader_session_ends(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2", "b3"):
        await nodes.start(b)
    first = await nodes.leader()
    assert await current_auditor(nodes.store) == first.bookie_id
    assert nodes.registry.get_sample_value("magnetar_bookie_auditor_leader", {"bookie": first.bookie_id}) == 1

    assert first.auditor is not None
    await first.auditor.stop()  # its session ends: the key goes, a watcher takes over
    second = await nodes.leader()
    assert second is not first
    assert await current_auditor(nodes.store) == second.bookie_id
    assert nodes.registry.get_sample_value("magnetar_bookie_auditor_leader", {"bookie": first.bookie_id}) == 0
    assert (
        nodes.registry.get_sample_value("magnetar_bookie_underreplicated_ledgers", {"bookie": first.bookie_id}) is None
    ), "a resigned auditor stops exporting the count"

    # The new auditor does the job: lose a bookie that holds ledgers, get them repaired.
    victim = next(b for b in ("b0", "b1", "b2", "b3") if b not in (first.bookie_id, second.bookie_id))
    written: dict[int, list[bytes]] = {}
    while not await ledgers_referencing(nodes.store, {victim}):  # placement is random
        written |= await write_ledgers(nodes, 3, 30, (3, 3, 2))
    on_victim = await ledgers_referencing(nodes.store, {victim})
    await nodes.crash(victim)
    await until(nodes.store, [UNDERREPLICATED, paths.LEDGERS], lambda: _gone_from_metadata(nodes, victim))
    for ledger_id in on_victim:
        md = await nodes.manager.get_metadata(ledger_id)
        for bookie_id in md.all_bookies():
            assert await assert_replica_holds_its_entries(nodes, ledger_id, md, bookie_id, written[ledger_id]) == 30


async def _gone_from_metadata(nodes: Nodes, bookie_id: str) -> bool:
    return await count_is(nodes.store, 0) and not await ledgers_referencing(nodes.store, {bookie_id})


async def test_leader_whose_key_vanishes_steps_down_and_one_auditor_remains(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    first = await nodes.leader()
    assert first.auditor is not None
    terms = sum(s.auditor.terms for s in nodes.running() if s.auditor)
    await nodes.store.delete(AUDITOR_PATH)  # as an expired lease would

    async def re_elected() -> BookieService | None:
        total = sum(s.auditor.terms for s in nodes.running() if s.auditor)
        leaders = [s for s in nodes.running() if s.auditor and s.auditor.is_leader]
        return leaders[0] if total == terms + 1 and len(leaders) == 1 else None

    leader = await until(nodes.store, [AUDITOR_PATH], re_elected)
    assert await current_auditor(nodes.store) == leader.bookie_id


# --- decommission -------------------------------------------------------------------------------


async def test_decommission_drains_a_live_bookie(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2", "b3"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 6, 200, (3, 3, 2))
    on_b0 = await ledgers_referencing(nodes.store, {"b0"})
    assert on_b0, "random placement put no ledger on b0; the scenario needs one"
    started = time.monotonic()
    report = await decommission(nodes.store, nodes.resolver, "b0", timeout=DEADLINE, poll_interval=0.2)
    elapsed = time.monotonic() - started
    assert report.complete and report.ledgers_marked == len(on_b0)
    assert not await ledgers_referencing(nodes.store, {"b0"})
    assert await underreplicated_count(nodes.store) == 0
    assert await lookup(nodes.store, "b0") is not None, "the bookie stayed up during its drain"
    assert await decommissioning(nodes.store) == ["b0"]
    for ledger_id, data in written.items():
        md = await nodes.manager.get_metadata(ledger_id)
        for bookie_id in md.all_bookies():
            assert await assert_replica_holds_its_entries(nodes, ledger_id, md, bookie_id, data) == 200
    await cancel_decommission(nodes.store, "b0")
    assert await decommissioning(nodes.store) == []
    print(f"\ndecommission of a bookie in {len(on_b0)} ledgers x 200 entries took {elapsed:.2f}s")


async def test_decommission_refuses_when_no_bookie_could_take_over(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    await write_ledgers(nodes, 1, 3, (3, 3, 2))
    with pytest.raises(NotEnoughBookies):
        await decommission(nodes.store, nodes.resolver, "b0", timeout=5)
    assert await decommissioning(nodes.store) == []
    assert await underreplicated_count(nodes.store) == 0


async def test_decommission_times_out_on_an_open_ledger_and_names_it(nodes: Nodes) -> None:
    for b in ("b0", "b1", "b2", "b3"):
        await nodes.start(b)
    handle = await nodes.manager.create(4, 2, 2)  # certainly on b0, and left open
    await handle.append(b"x")
    await nodes.start("b4")  # so that a drain is possible at all (E4 needs four others)
    with pytest.raises(DecommissionTimeout) as caught:
        await decommission(nodes.store, nodes.resolver, "b0", timeout=0.5, poll_interval=0.1)
    assert caught.value.report.remaining == (handle.ledger_id,)
    assert not caught.value.report.complete


# --- records and rules (no bookies) -------------------------------------------------------------


@given(st.frozensets(st.text(min_size=1, max_size=12)), st.integers(min_value=0, max_value=2**53))
def test_marker_round_trips(missing: frozenset[str], since: int) -> None:
    marker = UnderReplicated(missing, since)
    assert UnderReplicated.from_bytes(marker.to_bytes()) == marker


def test_marker_reads_the_documented_json_and_ignores_unknown_keys() -> None:
    raw = b'{"missing": ["b2", "b1"], "since": 1700000000000, "future": true}'
    assert UnderReplicated.from_bytes(raw) == UnderReplicated(frozenset({"b1", "b2"}), 1700000000000)
    with pytest.raises(ValueError):
        UnderReplicated.from_bytes(b'{"since": 1}')


@given(
    st.integers(min_value=1, max_value=6).flatmap(
        lambda e: st.tuples(
            st.just(e),
            st.integers(min_value=1, max_value=e),
            st.sets(st.integers(min_value=0, max_value=e - 1), min_size=1),
            st.integers(min_value=0, max_value=40),
            st.integers(min_value=0, max_value=40),
        )
    )
)
def test_entries_on_slots_follow_the_striping_rule(args: tuple[int, int, set[int], int, int]) -> None:
    ensemble, quorum, slots, first, length = args
    got = entries_on_slots(first, first + length - 1, slots, ensemble, quorum)
    expected = [e for e in range(first, first + length) if set(write_set(e, ensemble, quorum)) & slots]
    assert got == expected


def test_fragment_ranges_end_at_the_next_fragment_and_skip_empty_ones() -> None:
    md = LedgerMetadata(
        3,
        2,
        2,
        (Fragment(0, ("a", "b", "c")), Fragment(10, ("a", "d", "c")), Fragment(25, ("e", "d", "c"))),
        state=LedgerState.CLOSED,
        last_entry_id=24,
    )
    assert [(f.first_entry, first, last) for f, first, last in fragment_ranges(md)] == [(0, 0, 9), (10, 10, 24)]
    empty = LedgerMetadata(3, 2, 2, (Fragment(0, ("a", "b", "c")),), state=LedgerState.CLOSED, last_entry_id=-1)
    assert list(fragment_ranges(empty)) == []


def test_decommissioning_bookies_count_as_missing_while_registered() -> None:
    assert missing_bookies({"a", "b", "c"}, available={"a", "b"}, decommissioning={"b"}) == {"b", "c"}


async def test_markers_merge_by_compare_and_set(store: LmdbMetadataStore) -> None:
    assert await mark_underreplicated(store, 7, {"b1"})
    first = await read_marker(store, 7)
    assert first is not None
    results = await asyncio.gather(*(mark_underreplicated(store, 7, {f"b{i}"}) for i in range(2, 6)))
    assert all(results)
    assert not await mark_underreplicated(store, 7, {"b3"}), "already named: no write"
    marker = await read_marker(store, 7)
    assert marker is not None
    assert marker[0].missing == {"b1", "b2", "b3", "b4", "b5"}
    assert marker[0].since == first[0].since, "the first marking time is kept"
    assert await underreplicated_count(store) == 1


# --- on etcd, one session per bookie ------------------------------------------------------------


class Session:
    """A ``MetadataStore`` that forwards to one etcd session until ``end_session`` closes it (its
    lease is revoked: that bookie's registration and auditor key vanish, as on a crash or a lease
    expiry). Afterwards it behaves as an etcd store whose session is lost — plain reads and writes
    work (through a surviving session), ephemeral puts raise ``SessionLost`` — so the node cannot
    win an election or a lock again, and the test can still stop it cleanly."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.lost = False

    async def end_session(self, fallback: MetadataStore) -> None:
        inner, self.inner = self.inner, fallback
        self.lost = True
        await inner.close()

    async def get(self, path: str) -> Versioned | None:
        return await self.inner.get(path)

    async def put(
        self, path: str, value: bytes, expected_version: int = ANY_VERSION, *, ephemeral: bool = False
    ) -> Stat:
        if ephemeral and self.lost:
            raise SessionLost("this session's lease is gone")
        return await self.inner.put(path, value, expected_version, ephemeral=ephemeral)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await self.inner.delete(path, expected_version)

    async def children(self, path: str) -> list[str]:
        return await self.inner.children(path)

    async def exists(self, path: str) -> bool:
        return await self.inner.exists(path)

    def watch(self, prefix: str, callback: Callable[[Notification], None]) -> Callable[[], None]:
        return self.inner.watch(prefix, callback)

    async def increment(self, path: str) -> int:
        return await self.inner.increment(path)

    async def close(self) -> None:
        await self.inner.close()


async def test_on_etcd_a_lost_session_fails_the_auditor_over_and_its_ledgers_are_repaired(
    etcd_server: EtcdProcess, tmp_path: Path
) -> None:
    prefix = f"/autorecovery-{uuid.uuid4().hex[:10]}"

    async def connect() -> MetadataStore:
        return await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=3)

    admin = await connect()  # the writer's and the test's own session
    sessions: dict[str, Session] = {}
    services: dict[str, BookieService] = {}
    registry = CollectorRegistry()
    resolver = MetadataBookieResolver(admin)
    try:

        async def start(bookie_id: str) -> None:
            sessions[bookie_id] = Session(await connect())
            services[bookie_id] = BookieService(
                tmp_path / bookie_id,
                bookie_id=bookie_id,
                store=sessions[bookie_id],
                readonly_threshold=None,
                sync=False,
                registry=registry,
                autorecovery_options=FAST,
            )
            await services[bookie_id].start()

        await start("b0")  # first up, so it is the auditor
        for b in ("b1", "b2"):
            await start(b)
        assert await until(admin, [AUDITOR_PATH], lambda: _auditor_is(admin, "b0")) == "b0"
        manager = LedgerManager(admin, resolver)
        written: dict[int, list[bytes]] = {}
        for _ in range(3):
            handle = await manager.create(3, 2, 2)
            data = [os.urandom(128) for _ in range(100)]
            await asyncio.gather(*(handle.append_nowait(d) for d in data))
            await handle.close()
            written[handle.ledger_id] = data
        await start("b3")

        lost_at = time.monotonic()
        # The auditor's bookie loses its session. In the background: closing waits for that
        # session's own watchers, which is no part of how fast the others react.
        ending = asyncio.get_running_loop().create_task(sessions["b0"].end_session(admin))
        successor = await until(admin, [AUDITOR_PATH], lambda: _auditor_other_than(admin, "b0"))
        assert successor in {"b1", "b2", "b3"}

        async def repaired() -> bool:
            return await count_is(admin, 0) and not await ledgers_referencing(admin, {"b0"})

        await until(admin, [UNDERREPLICATED, paths.LEDGERS], repaired)
        elapsed = time.monotonic() - lost_at
        await ending
        for ledger_id, data in written.items():
            md = await manager.get_metadata(ledger_id)
            assert set(md.all_bookies()) == {"b1", "b2", "b3"}
            assert await (await manager.open(ledger_id)).read(0, 99) == data
            for fragment, first, last in fragment_ranges(md):
                slot = fragment.bookies.index("b3")
                for entry_id in entries_on_slots(first, last, [slot], 3, 2):
                    result = await resolver.client("b3").read_entry(ledger_id, entry_id)
                    assert (result.data, result.crc) == (data[entry_id], crc32c(data[entry_id]))
        print(f"\netcd: auditor's session lost -> new auditor and under-replicated == 0 in {elapsed:.2f}s")
    finally:
        for svc in services.values():
            await svc.stop()
        for session in sessions.values():
            if not session.lost:
                await session.close()
        await resolver.close()
        await admin.close()


async def _auditor_is(store: MetadataStore, bookie_id: str) -> str | None:
    current = await current_auditor(store)
    return current if current == bookie_id else None


async def _auditor_other_than(store: MetadataStore, bookie_id: str) -> str | None:
    current = await current_auditor(store)
    return current if current not in (None, bookie_id) else None
