"""Reading a managed ledger: from the tail cache when it holds the entries, else from the bookies.

Every entry made durable by this owner enters a cache bounded by ``cache_bytes`` (oldest out
first), so that subscriptions keeping up with the producers read the tail without a bookie round
trip. ``read_cached`` answers without a coroutine, so that a dispatcher can deliver an entry in
the very callback that made it durable; ``read_entries`` reads what the cache lacks from the
bookies, through the write handle for the ledger being written and read handles for the others.
"""

from __future__ import annotations

from collections import OrderedDict

from magnetar.ledger.read_handle import ReadHandle
from magnetar.managed_ledger.ledger_list import LedgerList
from magnetar.managed_ledger.position import Position


class LedgerReads(LedgerList):
    """The entry cache and the reads of a managed ledger (module docstring)."""

    # Read handles of closed ledgers, opened once on their first read.
    _read_handles: dict[int, ReadHandle]
    # Durable entries in the order they were added, and their total size.
    _cache: OrderedDict[Position, bytes]
    _cache_bytes: int

    # ------------------------------------------------------------------ the cache
    def _cache_put(self, pos: Position, data: bytes) -> None:
        self._cache[pos] = data
        self._cache_bytes += len(data)
        while self._cache_bytes > self.config.cache_bytes and self._cache:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= len(old)

    # ------------------------------------------------------------------ reading
    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to ``max_entries`` durable entries from ``start`` on, within one ledger."""
        out, lid, eid, last = self._read_cached_prefix(start, max_entries)
        if eid <= last:  # the rest from the bookies
            datas = await self._read_from_bookies(lid, eid, last)
            out.extend((Position(lid, eid + i), d) for i, d in enumerate(datas))
        return out

    def read_cached(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]] | None:
        """``read_entries``' answer if the cache holds all of it, else None: no coroutine, so that a
        dispatcher reading the tail can deliver an entry in the callback that made it durable."""
        out, _, eid, last = self._read_cached_prefix(start, max_entries)
        return out if eid > last else None

    def _read_cached_prefix(
        self, start: Position, max_entries: int
    ) -> tuple[list[tuple[Position, bytes]], int, int, int]:
        """The cached entries ``read_entries`` would return first, and the ledger and entry range
        (``lid``, from ``eid`` to ``last``) left to read from the bookies (empty when ``eid > last``)."""
        pos = self.first_readable(start)
        if pos is None:
            return [], 0, 0, -1
        lid, first = pos
        last = min(self._infos[lid].entries - 1, first + max_entries - 1)
        out: list[tuple[Position, bytes]] = []
        cache = self._cache
        eid = first
        while eid <= last:
            key = Position(lid, eid)
            data = cache.get(key)
            if data is None:
                break
            out.append((key, data))
            eid += 1
        return out, lid, eid, last

    async def _read_from_bookies(self, lid: int, first: int, last: int) -> list[bytes]:
        if self._current is not None and lid == self._current.ledger_id:
            return await self._current.read(first, last)
        handle = self._read_handles.get(lid)
        if handle is None:
            handle = await self._ledgers.open(lid, recovery=False)
            self._read_handles[lid] = handle
        return await handle.read(first, last)
