"""Reading entries from a ledger's replicas (PROTOCOL.md R14), shared by write and read handles.

An entry lives on the Qw bookies of its write set; a reader needs only one good copy. Trying them in
write-set order spreads reads over the ensemble (consecutive entries start on different slots), and
failing over on *any* error — unreachable bookie, missing entry, checksum mismatch — keeps a ledger
readable while at least one copy of each entry survives.
"""

from __future__ import annotations

import asyncio

from magnetar.ledger.bookie_api import BookieResolver
from magnetar.ledger.distribution import write_set
from magnetar.ledger.metadata_format import LedgerMetadata
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import ChecksumError, NoSuchEntry

# Entries read concurrently by ``read_entries``: enough to hide per-read latency, few enough not to
# flood a bookie with requests of up to 5 MiB each.
READ_CONCURRENCY = 32


async def read_entry(resolver: BookieResolver, ledger_id: int, md: LedgerMetadata, entry_id: int) -> bytes:
    """One verified copy of ``entry_id``; raises the last replica's error if none has one."""
    fragment = md.fragment_for(entry_id)
    last_error: Exception = NoSuchEntry(f"ledger {ledger_id} entry {entry_id}: no replica")
    for slot in write_set(entry_id, md.ensemble_size, md.write_quorum):
        bookie_id = fragment.bookies[slot]
        try:
            result = await resolver.client(bookie_id).read_entry(ledger_id, entry_id)
        except Exception as exc:  # any failure of one replica means: try the next one
            last_error = exc
            continue
        if crc32c(result.data) != result.crc:
            last_error = ChecksumError(f"ledger {ledger_id} entry {entry_id} on {bookie_id}: crc mismatch")
            continue
        return result.data
    raise last_error


async def read_entries(
    resolver: BookieResolver, ledger_id: int, md: LedgerMetadata, first: int, last: int
) -> list[bytes]:
    """Entries ``first..last`` in order, read concurrently in windows of ``READ_CONCURRENCY``."""
    out: list[bytes] = []
    for start in range(first, last + 1, READ_CONCURRENCY):
        stop = min(last, start + READ_CONCURRENCY - 1)
        out.extend(await asyncio.gather(*(read_entry(resolver, ledger_id, md, e) for e in range(start, stop + 1))))
    return out


def check_range(ledger_id: int, first: int, last: int, last_readable: int) -> None:
    """R14: handles read only entries up to their last entry id / LAC."""
    if first < 0 or first > last:
        raise NoSuchEntry(f"ledger {ledger_id}: bad range {first}..{last}")
    if last > last_readable:
        raise NoSuchEntry(f"ledger {ledger_id}: entry {last} is beyond the last readable {last_readable}")
