"""The scrubber and the storage checks it relies on (``bookie/scrub.py``, ``storage.verify_all``).

Storage-level cases damage a stored value behind the storage's back (through lmdb directly, with
the storage closed) and check that the walk names exactly what was damaged; the service-level
cases run three real ``BookieService`` nodes with auto-recovery (as in ``test_autorecovery.py``)
and check that a damaged or lost copy found by the scrubber is rewritten on that same bookie from
another replica, byte for byte, through the under-replication marker.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import lmdb
import pytest
from prometheus_client import CollectorRegistry

from magnetar.bookie.autorecovery.underreplication import (
    UnderReplicated,
    mark_damaged,
    mark_underreplicated,
    read_marker,
    underreplicated_count,
)
from magnetar.bookie.scrub import Scrubber
from magnetar.bookie.storage import (
    CRC,
    ENTRY_KEY,
    LEDGER_KEY,
    LEDGER_STATE,
    BookieStorage,
    StorageCorrupt,
)
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.metadata import paths
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import ChecksumError, LedgerFenced, PersistenceError

from .conftest import entry
from .test_autorecovery import FAST, Nodes, until, write_ledgers


def _edit(directory: Path, db: bytes, change: Callable[[lmdb.Transaction, lmdb._Database], None]) -> None:
    env = lmdb.open(str(directory / "ledgers"), max_dbs=3, subdir=True)
    handle = env.open_db(db)
    with env.begin(write=True) as txn:
        change(txn, handle)
    env.close()


def _flip_value(directory: Path, ledger: int, entry_id: int, index: int) -> None:
    def change(txn: lmdb.Transaction, db: lmdb._Database) -> None:
        key = ENTRY_KEY.pack(ledger, entry_id)
        value = bytearray(txn.get(key, db=db))
        value[index] ^= 0x10
        txn.put(key, bytes(value), db=db)

    _edit(directory, b"entries", change)


async def _fill(directory: Path, ledgers: int = 2, entries: int = 5) -> dict[tuple[int, int], bytes]:
    storage = BookieStorage(directory)
    written: dict[tuple[int, int], bytes] = {}
    for led in range(1, ledgers + 1):
        for e in range(entries):
            data, crc = entry(f"entry-{led}-{e}-".encode() + os.urandom(32))
            await storage.add(led, e, data, crc, e - 1)
            written[(led, e)] = data
    await storage.close()
    return written


async def test_a_clean_store_verifies_clean_and_counts_everything(tmp_path: Path) -> None:
    await _fill(tmp_path)
    storage = BookieStorage(tmp_path)
    try:
        report = storage.verify_all()
        assert (report.entries, report.ledgers) == (10, 2)
        assert report.damaged_entries == [] and report.damaged_states == []
    finally:
        await storage.close()


@pytest.mark.parametrize("index", [1, 5, 12], ids=["stored-crc", "key-check", "payload"])
async def test_the_walk_names_exactly_the_damaged_entry(tmp_path: Path, index: int) -> None:
    await _fill(tmp_path)
    _flip_value(tmp_path, 2, 3, index)
    storage = BookieStorage(tmp_path)
    try:
        assert storage.verify_all().damaged_entries == [(2, 3)]
        with pytest.raises(ChecksumError):
            storage.read_sync(2, 3)
        assert storage.read_sync(2, 2).data.startswith(b"entry-2-2-")
    finally:
        await storage.close()


async def test_a_value_found_under_another_key_is_refused_not_served(tmp_path: Path) -> None:
    """What a flipped bit in an index key amounts to: the B-tree finds entry 1's value (with its
    valid data CRC) when asked for entry 4. The key check catches it; the data CRC alone cannot."""
    written = await _fill(tmp_path)

    def misplace(txn: lmdb.Transaction, db: lmdb._Database) -> None:
        txn.put(ENTRY_KEY.pack(1, 4), txn.get(ENTRY_KEY.pack(1, 1), db=db), db=db)

    _edit(tmp_path, b"entries", misplace)
    storage = BookieStorage(tmp_path)
    try:
        with pytest.raises(ChecksumError, match="key check"):
            storage.read_sync(1, 4)
        assert storage.read_sync(1, 1).data == written[(1, 1)]
        assert storage.verify_all().damaged_entries == [(1, 4)]
    finally:
        await storage.close()


async def test_a_damaged_ledger_state_reads_as_fenced_and_is_restored_in_queue_order(tmp_path: Path) -> None:
    await _fill(tmp_path)

    def flip_lac(txn: lmdb.Transaction, db: lmdb._Database) -> None:
        key = LEDGER_KEY.pack(1)
        value = bytearray(txn.get(key, db=db))
        value[8] ^= 0x40  # a bit of the LAC: without its CRC this would read as LAC 3 + 64
        txn.put(key, bytes(value), db=db)

    _edit(tmp_path, b"ledgers", flip_lac)
    storage = BookieStorage(tmp_path)
    try:
        assert storage.verify_all().damaged_states == [1]
        with pytest.raises(ChecksumError):
            await storage.read_lac(1)
        assert await storage.is_fenced(1), "a damaged state must read as fenced (the safe answer)"
        assert storage.read_sync(1, 0).lac == NO_ENTRY  # the entry is fine; its LAC is unknown
        data, crc = entry(b"late")
        with pytest.raises(LedgerFenced):
            await storage.add(1, 5, data, crc, 4)
        assert await storage.restore_state(1, True, 4)
        assert not await storage.restore_state(1, False, 0), "a sound state is never overwritten"
        assert await storage.read_lac(1) == 4 and await storage.is_fenced(1)
        assert storage.verify_all().damaged_states == []
        assert await storage.read_lac(2) == 3
    finally:
        await storage.close()


async def test_a_fence_that_lands_first_wins_over_a_restore(tmp_path: Path) -> None:
    await _fill(tmp_path, ledgers=1)

    def garble(txn: lmdb.Transaction, db: lmdb._Database) -> None:
        txn.put(LEDGER_KEY.pack(1), b"\x07" * 13, db=db)

    _edit(tmp_path, b"ledgers", garble)
    storage = BookieStorage(tmp_path)
    try:
        fence = storage.fence_nowait(1)
        restore = storage.restore_state(1, False, 4)  # a scrubber that read OPEN metadata earlier
        assert await fence == NO_ENTRY
        assert not await restore
        assert await storage.is_fenced(1)
    finally:
        await storage.close()


async def test_an_environment_of_format_1_keeps_reading_and_writing_format_1(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path / "ledgers"), max_dbs=2, subdir=True)
    entries, ledgers = env.open_db(b"entries"), env.open_db(b"ledgers")
    data = b"written-by-an-older-bookie"
    with env.begin(write=True) as txn:
        txn.put(ENTRY_KEY.pack(7, 0), CRC.pack(crc32c(data)) + data, db=entries)
        txn.put(LEDGER_KEY.pack(7), LEDGER_STATE.pack(False, 0), db=ledgers)
    env.close()
    storage = BookieStorage(tmp_path)
    try:
        assert storage.format == 1
        assert storage.read_sync(7, 0).data == data
        more, crc = entry(b"next")
        await storage.add(7, 1, more, crc, 0)
        assert storage.read_sync(7, 1).data == more and await storage.read_lac(7) == 0
        assert storage.verify_all().damaged_entries == []
    finally:
        await storage.close()
    assert BookieStorage(tmp_path / "fresh").format == 2


async def test_a_failed_storage_refuses_everything_and_the_next_open(tmp_path: Path) -> None:
    await _fill(tmp_path, ledgers=1)
    storage = BookieStorage(tmp_path)
    reasons: list[str] = []
    storage.failure_listener = reasons.append
    storage.fail("test: MDB_CORRUPTED")
    with pytest.raises(PersistenceError):
        storage.read_sync(1, 0)
    data, crc = entry(b"x")
    with pytest.raises(PersistenceError):
        storage.add_nowait(1, 9, data, crc, 0)
    await storage.close()
    assert reasons == ["test: MDB_CORRUPTED"]
    with pytest.raises(StorageCorrupt, match="reprovision"):
        BookieStorage(tmp_path)


# --- repair through auto-recovery ---------------------------------------------------------------


class ScrubNodes(Nodes):
    """``Nodes`` whose services run the scrubber every ``scrub_interval`` seconds."""

    scrub_interval = 3600.0  # passes are forced with scrub_now(); the first runs at start


@pytest.fixture
async def scrub_nodes(tmp_path: Path) -> AsyncIterator[ScrubNodes]:
    store = await LmdbMetadataStore.open(tmp_path / "meta")
    n = ScrubNodes(tmp_path, store, FAST)
    try:
        yield n
    finally:
        await n.close()
        await store.close()


def _sample(registry: CollectorRegistry, name: str, bookie: str) -> float:
    return float(registry.get_sample_value(name, {"bookie": bookie}) or 0.0)


async def test_a_damaged_and_a_lost_copy_are_rewritten_from_another_replica(scrub_nodes: ScrubNodes) -> None:
    nodes = scrub_nodes
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 2, 20, (3, 3, 2))
    (ledger, data), (other, _) = sorted(written.items())
    await nodes.crash("b1")
    directory = nodes.root / "b1"
    _flip_value(directory, ledger, 7, 20)  # payload

    def lose(txn: lmdb.Transaction, db: lmdb._Database) -> None:
        assert txn.delete(ENTRY_KEY.pack(other, 3), db=db)  # as if the index dropped the key

    _edit(directory, b"entries", lose)
    svc = await nodes.start("b1")
    assert svc.scrubber is not None

    async def repaired() -> bool:
        scrubbed = svc.scrubber is not None and svc.scrubber.passes >= 1
        return scrubbed and await underreplicated_count(nodes.store) == 0 and not svc.storage.damaged

    await until(nodes.store, [paths.UNDERREPLICATED], repaired)
    report = svc.scrubber.last_report
    assert report is not None and report.damaged_entries == [(ledger, 7)]
    assert report.missing_entries == [(other, 3)]
    assert svc.storage.read_sync(ledger, 7).data == data[7]
    assert svc.storage.read_sync(other, 3).data == written[other][3]
    again = await svc.scrubber.scrub_now()
    assert again.damaged_entries == [] and again.missing_entries == []
    assert _sample(nodes.registry, "magnetar_bookie_scrub_repaired_total", "b1") >= 2
    assert _sample(nodes.registry, "magnetar_bookie_scrub_damaged_entries", "b1") == 0


async def test_damage_found_by_a_read_is_repaired_without_waiting_for_a_pass(scrub_nodes: ScrubNodes) -> None:
    nodes = scrub_nodes
    nodes.scrub_interval = 0.0  # no scrubber in the services: the test runs one without passes
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 1, 10, (3, 3, 2))
    ledger, data = next(iter(written.items()))
    await nodes.crash("b1")
    _flip_value(nodes.root / "b1", ledger, 5, 30)
    svc = await nodes.start("b1")
    scrubber = Scrubber(svc.storage, "b1", interval=3600.0, store=nodes.store, first_pass=False)
    await scrubber.start()
    try:
        with pytest.raises(ChecksumError):
            svc.storage.read_sync(ledger, 5)

        async def fixed() -> bool:
            return not svc.storage.damaged and await _count_zero(nodes.store)

        await until(nodes.store, [paths.UNDERREPLICATED], fixed)
        assert svc.storage.read_sync(ledger, 5).data == data[5]
        assert scrubber.passes == 0, "the repair came from the read's report, not from a pass"
    finally:
        await scrubber.stop()


async def _count_zero(store: LmdbMetadataStore) -> bool:
    return await underreplicated_count(store) == 0


async def test_the_marker_of_a_damaged_copy_names_the_bookie_and_survives_an_audit(scrub_nodes: ScrubNodes) -> None:
    nodes = scrub_nodes
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 1, 6, (3, 3, 2))
    ledger = next(iter(written))
    for svc in nodes.running():
        if svc.replication is not None:
            await svc.replication.stop()  # nobody repairs: the marker must stay as written
    assert await mark_damaged(nodes.store, ledger, "b2", [3, 1])
    assert not await mark_damaged(nodes.store, ledger, "b2", [1])
    leader = await nodes.leader()
    assert leader.auditor is not None
    await leader.auditor.audit_now()
    found = await read_marker(nodes.store, ledger)
    assert found is not None
    assert found[0] == UnderReplicated(frozenset(), found[0].since, {"b2": frozenset({1, 3})})
    assert UnderReplicated.from_bytes(found[0].to_bytes()) == found[0]
    # The auditor's merge of a lost bookie keeps the damaged copies (they are another bookie's).
    assert await mark_underreplicated(nodes.store, ledger, ["b9"])
    merged = await read_marker(nodes.store, ledger)
    assert merged is not None and merged[0].missing == {"b9"} and merged[0].damaged == {"b2": frozenset({1, 3})}


async def test_damaged_copies_of_a_bookie_that_is_then_lost_do_not_block_its_replacement(
    scrub_nodes: ScrubNodes,
) -> None:
    """The scrubber of a bookie marked damage, then the bookie died: its copies are all replaced
    on the spare, the damaged ones included; trying to rewrite them on a dead bookie must not hold
    the marker forever."""
    nodes = scrub_nodes
    nodes.scrub_interval = 0.0
    for b in ("b0", "b1", "b2", "b3"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 1, 8, (3, 3, 2))
    ledger = next(iter(written))
    md = await nodes.manager.open(ledger)
    victim = md.metadata.last_ensemble[0]
    await nodes.crash(victim)
    await mark_damaged(nodes.store, ledger, victim, [0, 1])  # its scrubber's last words

    async def replaced() -> bool:
        if not await _count_zero(nodes.store):
            return False
        current = await nodes.manager.open(ledger)
        return victim not in current.metadata.all_bookies()

    await until(nodes.store, [paths.UNDERREPLICATED, paths.LEDGERS], replaced)


async def test_a_damaged_ledger_state_is_restored_from_the_metadata(scrub_nodes: ScrubNodes) -> None:
    """A closed ledger's state comes back fenced, with the closed ledger's last entry as LAC."""
    nodes = scrub_nodes
    for b in ("b0", "b1", "b2"):
        await nodes.start(b)
    written = await write_ledgers(nodes, 1, 6, (3, 3, 2))
    ledger = next(iter(written))
    await nodes.crash("b1")

    def garble(txn: lmdb.Transaction, db: lmdb._Database) -> None:
        key = LEDGER_KEY.pack(ledger)
        value = bytearray(txn.get(key, db=db))
        value[0] ^= 0x01  # fenced flips
        txn.put(key, bytes(value), db=db)

    _edit(nodes.root / "b1", b"ledgers", garble)
    svc = await nodes.start("b1")

    async def restored() -> bool:
        return svc.scrubber is not None and svc.scrubber.passes >= 1 and not svc.storage.damaged

    await until(nodes.store, [], restored)
    assert svc.scrubber is not None and svc.scrubber.last_report is not None
    assert svc.scrubber.last_report.damaged_states == [ledger]
    assert svc.scrubber.last_report.states_restored == 1
    assert await svc.storage.is_fenced(ledger)
    assert await svc.storage.read_lac(ledger) == 5
