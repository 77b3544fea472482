"""``LedgerManager``: create, open, delete ledgers (PROTOCOL.md R3, R5, R16, R22).

It owns no state beyond its two seams, so a broker can keep one for its lifetime and share it
between all its topics.
"""

from __future__ import annotations

import asyncio
import logging
import random

from magnetar.ledger.bookie_api import BookieResolver
from magnetar.ledger.metadata_format import (
    LEDGER_ID_COUNTER,
    LedgerMetadata,
    decode,
    encode,
    ledger_path,
    new_metadata,
    validate_quorums,
)
from magnetar.ledger.read_handle import ReadHandle, read_lac_from_bookies
from magnetar.ledger.recovery import recover
from magnetar.ledger.write_handle import WriteHandle
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import NoSuchLedger, NotEnoughBookies, NotFound

log = logging.getLogger(__name__)


class LedgerManager:
    def __init__(self, store: MetadataStore, bookies: BookieResolver) -> None:
        self._store = store
        self._bookies = bookies

    @property
    def bookies(self) -> BookieResolver:
        """The resolver this manager places and reads ledgers through."""
        return self._bookies

    async def create(
        self,
        ensemble_size: int = 1,
        write_quorum: int = 1,
        ack_quorum: int = 1,
        custom: dict[str, str] | None = None,
    ) -> WriteHandle:
        """A new OPEN ledger on ``ensemble_size`` random writable bookies (R3, R5)."""
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        writable = await self._bookies.writable_bookies()
        if len(writable) < ensemble_size:
            # BookKeeper's words for it, which Pulsar users search for; a full disk is the usual cause.
            raise NotEnoughBookies(
                f"Not enough non-faulty bookies available: need {ensemble_size} writable bookies, have "
                f"{len(writable)}: {writable} (a bookie whose disk is full is read-only)"
            )
        ensemble = random.sample(writable, ensemble_size)
        md = new_metadata(ensemble, write_quorum, ack_quorum, custom)
        ledger_id = await self._store.increment(LEDGER_ID_COUNTER)
        stat = await self._store.put(ledger_path(ledger_id), encode(md), MUST_NOT_EXIST)
        return WriteHandle(ledger_id, md, stat.version, self._store, self._bookies)

    async def open(self, ledger_id: int, *, recovery: bool = True) -> ReadHandle:
        """With ``recovery``, a ledger not yet CLOSED is fenced, recovered and closed first
        (R16-R21); without, it is opened read-only up to the LAC the bookies report (R15)."""
        if recovery:
            md = await recover(self._store, self._bookies, ledger_id)
            return ReadHandle(ledger_id, md, self._store, self._bookies)
        md = await self.get_metadata(ledger_id)
        if md.is_closed:
            return ReadHandle(ledger_id, md, self._store, self._bookies)
        lac = await read_lac_from_bookies(self._bookies, ledger_id, md)
        md = await self.get_metadata(ledger_id)  # after the LAC: see read_handle.ReadHandle.read_lac
        return ReadHandle(ledger_id, md, self._store, self._bookies, last_add_confirmed=lac)

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata:
        current = await self._store.get(ledger_path(ledger_id))
        if current is None:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist")
        return decode(current.value)

    async def delete(self, ledger_id: int) -> None:
        """R22: metadata first (nobody can open it again), then the bookies, best effort."""
        path = ledger_path(ledger_id)
        current = await self._store.get(path)
        if current is None:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist")
        try:
            await self._store.delete(path)
        except NotFound:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist") from None
        md = decode(current.value)
        answers = await asyncio.gather(
            *(self._bookies.client(b).delete_ledger(ledger_id) for b in sorted(md.all_bookies())),
            return_exceptions=True,
        )
        for bookie_id, answer in zip(sorted(md.all_bookies()), answers, strict=True):
            if isinstance(answer, BaseException) and not isinstance(answer, NoSuchLedger):
                log.warning("ledger %d: delete on bookie %s failed (left to its GC): %r", ledger_id, bookie_id, answer)
