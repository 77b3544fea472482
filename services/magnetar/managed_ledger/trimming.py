"""Trimming a managed ledger: deleting the closed ledgers that no cursor and no retention keeps.

The rule (which ledgers may go) is ``retention_rule.py``, shared with the Spark retention sweep's
report; this module applies it to the live log: in the background after an acknowledgement, a
roll-over or a policy change, or at once for the admin ``trim`` verb, one trim at a time.
Non-durable cursors (readers) do not hold trimming back: when their ledgers are trimmed they move
up to the first remaining entry, as Pulsar's NonDurableCursor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from magnetar.managed_ledger.clock import policy_time
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.message_counts import MessageCounts
from magnetar.managed_ledger.position import Position
from magnetar.managed_ledger.reads import LedgerReads
from magnetar.managed_ledger.retention_rule import removable_ledgers, slowest_position
from magnetar.protocol.errors import AlreadyClosed

# The managed ledger logs under one name, whichever of its modules holds the code, so that a log
# filter set for it keeps catching every line.
log = logging.getLogger("magnetar.managed_ledger.ledger")


class LedgerTrimming(MessageCounts, LedgerReads):
    """Retention applied to the ledger list, its message counts and its cache (module docstring)."""

    # Durable cursors hold trimming back; non-durable ones (readers) follow it.
    cursors: dict[str, ManagedCursor]
    non_durable_cursors: dict[str, ManagedCursor]
    # Set by a feature that must re-read the entries after a position it stored (the broker's
    # deduplication snapshot): trimming keeps every ledger holding an entry after it.
    retain_from: Callable[[], Position | None] | None
    _trim_task: asyncio.Task[list[int]] | None

    def trimmable(self, now: float | None = None) -> list[int]:
        """Closed ledgers every durable cursor has passed that retention no longer keeps, oldest first.

        Pulsar's rule (``ManagedLedgerImpl.internalTrimLedgers``): going from the oldest consumed
        ledger on, a ledger is deleted when it is older than the retention time (closed more than
        ``retention_minutes`` ago) OR when the topic would still hold at least ``retention_mb``
        without it (every stored byte counts, consumed or not); the first ledger that neither
        rule deletes stops the walk. -1 switches a rule off (both -1: infinite retention); 0/0
        keeps nothing consumed. With no durable cursor at all nothing is held back by consumers
        (Pulsar does the same: without subscriptions or retention, data does not outlive its
        ledger). The ledger being written is never trimmed.
        """
        # The rule itself is ``retention_rule.py``, shared with the Spark retention sweep's report.
        kept = self.retain_from() if self.retain_from is not None else None  # a feature re-reads from there
        slowest = slowest_position((c.mark_delete for c in self.cursors.values()), kept, self.last_confirmed)
        removals = removable_ledgers(
            [self._infos[lid] for lid in self._ids],
            current=self._current.ledger_id if self._current is not None else None,
            slowest=slowest,
            now=policy_time() if now is None else now,
            retention_minutes=self.config.retention_minutes,
            retention_mb=self.config.retention_mb,
        )
        return [r.ledger_id for r in removals]

    def schedule_trim(self, now: float | None = None) -> None:
        """Trim in the background if retention allows (after an ack, a roll-over, a policy
        change, and on the broker's retention check with its clock's ``now``)."""
        if self._closed or (self._trim_task is not None and not self._trim_task.done()):
            return
        if len(self._ids) < 2 or not self.trimmable(now):
            return
        self._trim_task = asyncio.get_running_loop().create_task(self.trim(now))

    async def trim_now(self, now: float | None = None) -> list[int]:
        """Trim at once what retention allows (the admin ``trim`` verb), after a background trim
        that is running: two trims at a time would race on the ledger list's compare-and-set."""
        if self._closed:
            raise AlreadyClosed(f"managed ledger {self.name} is closed")
        while self._trim_task is not None and not self._trim_task.done():
            await asyncio.gather(asyncio.shield(self._trim_task), return_exceptions=True)
        self._trim_task = asyncio.get_running_loop().create_task(self.trim(now))
        return await asyncio.shield(self._trim_task)

    async def trim(self, now: float | None = None) -> list[int]:
        """Delete trimmable ledgers: metadata first (so nothing points at a deleted ledger),
        then the ledgers themselves on the bookies."""
        doomed = self.trimmable(now)
        if not doomed:
            return []
        for lid in doomed:
            self._ids.remove(lid)
            del self._infos[lid]
            self._read_handles.pop(lid, None)
        await self._write_meta()
        first = self.first_position
        for reader in self.non_durable_cursors.values():
            keep = reader.keeps_position_on_trim
            if keep is None or not keep():
                reader.skip_to(first)
        for lid in doomed:
            try:
                await self._ledgers.delete(lid)
            except Exception:
                log.warning("ledger %s of %s trimmed from metadata but not deleted on bookies", lid, self.name)
            try:
                await self._delete_counts(lid)
            except Exception:
                log.warning("message counts of trimmed ledger %s of %s not deleted", lid, self.name)
        for pos in [p for p in self._cache if p.ledger_id in doomed]:
            self._cache_bytes -= len(self._cache.pop(pos))
        log.info("managed ledger %s trimmed ledgers %s", self.name, doomed)
        return doomed
