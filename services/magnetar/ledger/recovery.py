"""Open-with-recovery (PROTOCOL.md R16-R21): close a ledger whose writer may be gone.

Recovery must never lose an entry the writer acknowledged, yet it cannot ask the writer. It makes
the writer harmless instead: fencing enough bookies of the last ensemble that no write set can
gather an ack quorum any more (R17). Every acknowledged entry then has a copy on a fenced bookie,
so reading forward entry by entry from the highest LAC finds all of them (R18); the first entry
that provably has fewer than Qa copies ends the ledger. Re-adding the found entries to their full
write set (R19) makes the tail as durable as the rest, and the final compare-and-set (R21) makes
concurrent recoveries agree on one answer.
"""

from __future__ import annotations

import asyncio
import logging

from magnetar.ledger.bookie_api import BookieClient, BookieResolver, ReadResult
from magnetar.ledger.distribution import covers_ack_quorums, missing_threshold, write_set
from magnetar.ledger.metadata_format import LedgerMetadata, LedgerState, decode, encode, ledger_path
from magnetar.ledger.replica_reads import read_entries
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import BadVersion, NoSuchEntry, NoSuchLedger, NotEnoughBookies

log = logging.getLogger(__name__)


async def recover(store: MetadataStore, bookies: BookieResolver, ledger_id: int) -> LedgerMetadata:
    """Recover and close ``ledger_id``; returns its CLOSED metadata (R16-R21)."""
    md, version = await _enter_recovery(store, ledger_id)
    if md.is_closed:
        return md
    max_lac = await _fence(bookies, ledger_id, md)
    last, tail_bytes = await _read_forward(bookies, ledger_id, md, max_lac)
    head = await read_entries(bookies, ledger_id, md, 0, max_lac) if max_lac >= 0 else []
    closed = md.closed(last, sum(len(d) for d in head) + tail_bytes)
    try:
        await store.put(ledger_path(ledger_id), encode(closed), version)
    except BadVersion:
        current = await store.get(ledger_path(ledger_id))
        if current is None:
            raise NoSuchLedger(f"ledger {ledger_id} was deleted during recovery") from None
        winner = decode(current.value)
        if not winner.is_closed:
            raise
        log.info("ledger %d: concurrent recovery closed it at %d", ledger_id, winner.last_entry_id)
        return winner
    log.info("ledger %d: recovered and closed at entry %d", ledger_id, last)
    return closed


async def _enter_recovery(store: MetadataStore, ledger_id: int) -> tuple[LedgerMetadata, int]:
    """R16: the metadata in IN_RECOVERY (or CLOSED) and the version to compare against."""
    path = ledger_path(ledger_id)
    while True:
        current = await store.get(path)
        if current is None:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist")
        md = decode(current.value)
        if md.state is not LedgerState.OPEN:
            return md, current.version
        recovering = md.in_state(LedgerState.IN_RECOVERY)
        try:
            stat = await store.put(path, encode(recovering), current.version)
        except BadVersion:
            continue  # the writer changed its ensemble, or another recovery got there first
        return recovering, stat.version


async def _fence(bookies: BookieResolver, ledger_id: int, md: LedgerMetadata) -> int:
    """R17: fence the last ensemble; return the highest LAC among the bookies that answered."""
    ensemble = md.last_ensemble
    answers = await asyncio.gather(*(bookies.client(b).fence(ledger_id) for b in ensemble), return_exceptions=True)
    fenced = {slot: lac for slot, lac in enumerate(answers) if isinstance(lac, int)}
    if not covers_ack_quorums(fenced, md.ensemble_size, md.write_quorum, md.ack_quorum):
        errors = [a for a in answers if isinstance(a, BaseException)]
        raise NotEnoughBookies(
            f"ledger {ledger_id}: fenced {len(fenced)} of {len(ensemble)} bookies, not enough to stop "
            f"the writer (E={md.ensemble_size} Qw={md.write_quorum} Qa={md.ack_quorum}): {errors!r}"
        )
    return max(fenced.values())


async def _read_forward(bookies: BookieResolver, ledger_id: int, md: LedgerMetadata, max_lac: int) -> tuple[int, int]:
    """R18 + R19: the last entry of the ledger, and the bytes of the entries after ``max_lac``."""
    entry_id = max_lac + 1
    tail_bytes = 0
    while True:
        data = await _probe(bookies, ledger_id, md, entry_id)
        if data is None:
            return entry_id - 1, tail_bytes
        await _readd(bookies, ledger_id, md, entry_id, data)
        tail_bytes += len(data)
        entry_id += 1


def _write_set_clients(bookies: BookieResolver, md: LedgerMetadata, entry_id: int) -> list[BookieClient]:
    fragment = md.fragment_for(entry_id)
    return [bookies.client(fragment.bookies[s]) for s in write_set(entry_id, md.ensemble_size, md.write_quorum)]


async def _probe(bookies: BookieResolver, ledger_id: int, md: LedgerMetadata, entry_id: int) -> bytes | None:
    """R18: the entry's data if present, None if provably missing; raises if undecidable."""
    clients = _write_set_clients(bookies, md, entry_id)
    answers = await asyncio.gather(*(c.read_entry(ledger_id, entry_id) for c in clients), return_exceptions=True)
    absent = 0
    for answer in answers:
        if isinstance(answer, ReadResult):
            if crc32c(answer.data) == answer.crc:
                return answer.data
        elif isinstance(answer, NoSuchEntry | NoSuchLedger):
            absent += 1
    if absent >= missing_threshold(md.write_quorum, md.ack_quorum):
        return None
    raise NotEnoughBookies(
        f"ledger {ledger_id}: cannot tell whether entry {entry_id} exists: {absent} bookie(s) lack it, "
        f"the others failed: {answers!r}"
    )


async def _readd(bookies: BookieResolver, ledger_id: int, md: LedgerMetadata, entry_id: int, data: bytes) -> None:
    """R19: copy a recovered entry to its whole write set; Qa confirmations are required."""
    crc = crc32c(data)
    clients = _write_set_clients(bookies, md, entry_id)
    answers = await asyncio.gather(
        *(c.add_entry(ledger_id, entry_id, data, crc, entry_id - 1, recovery=True) for c in clients),
        return_exceptions=True,
    )
    confirmed = sum(1 for a in answers if not isinstance(a, BaseException))
    if confirmed < md.ack_quorum:
        raise NotEnoughBookies(
            f"ledger {ledger_id}: re-replicating entry {entry_id} reached {confirmed} of {md.ack_quorum} "
            f"bookies: {answers!r}"
        )
