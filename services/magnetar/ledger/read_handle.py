"""Reading a ledger that someone else writes or wrote (PROTOCOL.md R14, R15).

A closed (or recovered) ledger is immutable, so its handle can serve any entry up to
``last_entry_id`` forever. A handle opened without recovery on a still-OPEN ledger reads only up to
the LAC it last learned from the bookies, and ``read_lac`` moves that forward: this is how a
tailing reader follows a writer without disturbing it (no fencing).
"""

from __future__ import annotations

import asyncio

from magnetar.ledger.bookie_api import NO_ENTRY, BookieResolver
from magnetar.ledger.metadata_format import LedgerMetadata, decode, ledger_path
from magnetar.ledger.replica_reads import check_range, read_entries
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import NoSuchLedger, NotEnoughBookies


class ReadHandle:
    """Obtain it from ``LedgerManager.open``."""

    def __init__(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        store: MetadataStore,
        bookies: BookieResolver,
        last_add_confirmed: int | None = None,
    ) -> None:
        self._ledger_id = ledger_id
        self._md = metadata
        self._store = store
        self._resolver = bookies
        self._lac = (
            metadata.last_entry_id
            if metadata.is_closed
            else (NO_ENTRY if last_add_confirmed is None else last_add_confirmed)
        )

    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def is_closed(self) -> bool:
        return self._md.is_closed

    @property
    def last_entry_id(self) -> int:
        """The last readable entry: ``last_entry_id`` when closed, else the last LAC learned."""
        return self._lac

    async def read(self, first: int, last: int) -> list[bytes]:
        """Entries ``first..last``, each from the first replica that returns a verified copy."""
        check_range(self._ledger_id, first, last, self._lac)
        return await read_entries(self._resolver, self._ledger_id, self._md, first, last)

    async def read_lac(self) -> int:
        """R15: a closed ledger's last entry, or the highest LAC the last ensemble reports."""
        if self._md.is_closed:
            return self._lac
        lac = await read_lac_from_bookies(self._resolver, self._ledger_id, self._md)
        # Refresh the metadata *after* learning the LAC: every entry up to it was sent only after
        # its fragment was recorded, so this read sees the fragments those entries live in.
        current = await self._store.get(ledger_path(self._ledger_id))
        if current is None:
            raise NoSuchLedger(f"ledger {self._ledger_id} was deleted")
        self._md = decode(current.value)
        if self._md.is_closed:
            lac = self._md.last_entry_id
        self._lac = max(self._lac, lac)
        return self._lac


async def read_lac_from_bookies(resolver: BookieResolver, ledger_id: int, md: LedgerMetadata) -> int:
    """Max LAC over the bookies of the last fragment that answer; every bookie's LAC is a lower
    bound of the writer's, so any answer is safe to use. A bookie that never saw the ledger
    (``NoSuchLedger``) knows of no confirmed entry."""
    results = await asyncio.gather(
        *(resolver.client(b).read_lac(ledger_id) for b in md.last_ensemble), return_exceptions=True
    )
    lacs: list[int] = []
    for answer in results:
        if isinstance(answer, int):
            lacs.append(answer)
        elif isinstance(answer, NoSuchLedger):
            lacs.append(NO_ENTRY)
    if not lacs:
        errors = [r for r in results if isinstance(r, BaseException)]
        raise NotEnoughBookies(f"ledger {ledger_id}: no bookie answered read_lac: {errors!r}")
    return max(lacs)
