"""Message counts of a managed ledger's entries: how cursors count their backlog in messages.

Each entry's message count (``add_entry(..., messages=n)``; a producer batch is one entry of n
messages) is kept per ledger (``counts.LedgerCounts``) so that cursors count their backlog in
messages. A ledger's counts are stored when it is closed (roll-over or close), under
``{managed ledger}/ledger-counts/{ledger id}`` and only when some entry holds other than one
message; the ledger list records each closed ledger's message total (``msgs``), which says
whether to look for that key. The ledger a crashed writer left open has no stored counts: its
entries are read back once when it is recovered (``entry_messages`` decodes the count of one
entry; without it, or for data written before counts existed, an entry counts as one message).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from magnetar.ledger.read_handle import ReadHandle
from magnetar.managed_ledger.counts import LedgerCounts
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position
from magnetar.protocol.errors import NotFound

# Entries read per request when counting the messages of a recovered ledger.
_COUNT_READ_CHUNK = 500

# The managed ledger logs under one name, whichever of its modules holds the code, so that a log
# filter set for it keeps catching every line.
log = logging.getLogger("magnetar.managed_ledger.ledger")


class MessageCounts(LedgerList):
    """Loading, recovering, storing and adding up the per-ledger message counts (module docstring)."""

    # Decodes the message count of one stored entry (``ManagedLedger.open``'s ``entry_messages``).
    _entry_messages: Callable[[bytes], int] | None

    async def _load_counts(self, ledger_id: int, entries: int, msgs: Any) -> LedgerCounts:
        """A closed ledger's counts: uniform unless its recorded total says otherwise."""
        if msgs is None or int(msgs) == entries:
            return LedgerCounts.uniform(entries)
        found = await self._store.get(self.counts_path(ledger_id))
        if found is not None:
            try:
                counts = LedgerCounts.decode(found.value.decode())
            except Exception:
                log.warning("message counts of ledger %s of %s are unreadable", ledger_id, self.name)
            else:
                if counts.entries >= entries:
                    counts.truncate(entries)
                    return counts
        log.warning("message counts of ledger %s of %s are missing: one per entry", ledger_id, self.name)
        return LedgerCounts.uniform(entries)

    async def _count_entries(self, handle: ReadHandle, entries: int) -> LedgerCounts:
        """Read a recovered ledger back to count its messages (once, at recovery)."""
        count = self._entry_messages
        if count is None:
            return LedgerCounts.uniform(entries)
        counts = LedgerCounts()
        try:
            for first in range(0, entries, _COUNT_READ_CHUNK):
                last = min(entries - 1, first + _COUNT_READ_CHUNK - 1)
                for data in await handle.read(first, last):
                    try:
                        counts.append(count(data))
                    except Exception:
                        counts.append(1)
        except Exception as exc:
            log.warning(
                "could not count the messages of recovered ledger %s of %s: %s", handle.ledger_id, self.name, exc
            )
            return LedgerCounts.uniform(entries)
        return counts

    async def _store_counts(self, ledger_id: int) -> None:
        """Store a closed ledger's counts (only when not uniform), before the ledger list that
        records it as closed, so that a reader of that list always finds them."""
        counts = self._counts.get(ledger_id)
        info = self._infos.get(ledger_id)
        if counts is None:
            return
        if info is not None:
            counts.truncate(info.entries)
        if not counts.is_uniform:
            await self._store.put(self.counts_path(ledger_id), counts.encode().encode())

    async def _delete_counts(self, ledger_id: int) -> None:
        self._counts.pop(ledger_id, None)
        try:
            await self._store.delete(self.counts_path(ledger_id))
        except NotFound:
            pass

    def messages_of(self, pos: Position) -> int:
        """Messages held by the stored entry at ``pos`` (0 when there is none)."""
        info = self._infos.get(pos.ledger_id)
        counts = self._counts.get(pos.ledger_id)
        if info is None or counts is None or not 0 <= pos.entry_id < info.entries:
            return 0
        return counts.of_entry(pos.entry_id)

    def messages_in(self, ledger_id: int) -> int:
        """Messages held by ledger ``ledger_id`` (0 when it is not one of ours): internal stats
        show it per ledger, so that a retention report counts messages, not only entries."""
        info = self._infos.get(ledger_id)
        if info is None:
            return 0
        counts = self._counts.get(ledger_id) or LedgerCounts.uniform(info.entries)
        return counts.upto(info.entries - 1)

    def messages_after(self, pos: Position) -> int:
        """Messages in the stored entries strictly after ``pos`` (backlog arithmetic)."""
        total = 0
        for lid in self._ids:
            if lid < pos.ledger_id:
                continue
            n = self._infos[lid].entries
            counts = self._counts.get(lid) or LedgerCounts.uniform(n)
            everything = counts.upto(n - 1)
            total += everything if lid > pos.ledger_id else everything - counts.upto(min(pos.entry_id, n - 1))
        return total

    @property
    def total_messages(self) -> int:
        return self.messages_after(self.first_position)
