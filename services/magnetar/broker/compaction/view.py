"""The compacted view of a topic: one compacted ledger, its horizon, and reads by original id.

A compacted ledger is an ordinary ledger whose entries are msgpack ``[ledger, entry, stored]``:
``stored`` is a topic entry (``entry.encode_entry``, ``[meta, payload]``) and ``ledger:entry`` the
position it had in the topic. Survivors keep their original ids so that the acknowledgements,
seeks and message ids of a read-compacted consumer are the topic's own (WIRE.md R46b). Entries are
in original-position order, so a position is found by binary search over the *index* (the
original positions, in entry order, packed as ``ledger * 2**32 + entry`` into one ``array('q')``:
eight bytes per survivor, which is what makes a million survivors affordable in memory).

The index is built by the compactor as it writes; after a restart or on another broker it is read
back from the ledger the first time a read-compacted consumer needs it (``ensure_index``), so that
loading a topic costs nothing when nobody reads compacted.

A view is retired (its ledger deleted) when a newer compaction replaces it; ``retire`` waits for
reads in flight, so a dispatcher that started a read on the old view finishes it.
"""

from __future__ import annotations

import asyncio
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import msgpack

from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.read_handle import ReadHandle
from magnetar.managed_ledger import Position

# Entries per bookie read when scanning a compacted ledger.
READ_CHUNK = 1000
_ENTRY_SHIFT = 2**32


def position_key(pos: Position) -> int:
    """The index key of ``pos``: order-preserving for ledger ids below 2**31 and entry ids below 2**32."""
    return pos.ledger_id * _ENTRY_SHIFT + pos.entry_id


def key_position(key: int) -> Position:
    ledger, entry = divmod(key, _ENTRY_SHIFT)
    return Position(ledger, entry)


def removed_indexes(meta: Mapping[str, Any]) -> set[int]:
    """The batch indexes a compaction removed from a rewritten entry (meta ``cx``, WIRE.md R46c)."""
    return {int(i) for i in meta.get("cx") or ()}


def encode_compacted(pos: Position, stored: bytes) -> bytes:
    """One compacted-ledger entry: the survivor's original position and its stored entry."""
    data: bytes = msgpack.packb([pos.ledger_id, pos.entry_id, stored], use_bin_type=True)
    return data


def decode_compacted(raw: bytes) -> tuple[Position, bytes]:
    ledger, entry, stored = msgpack.unpackb(raw, raw=False)
    return Position(int(ledger), int(entry)), stored


class CompactedView:
    """A finished compaction: ``ledger_id`` holds the survivors of everything up to ``horizon``."""

    def __init__(
        self,
        ledgers: LedgerManager,
        ledger_id: int,
        horizon: Position,
        entries: int,
        size: int,
        index: array[int] | None = None,
    ) -> None:
        self._ledgers = ledgers
        self.ledger_id = ledger_id
        self.horizon = horizon
        self.entries = entries
        self.size = size
        self._index = index
        self._index_lock = asyncio.Lock()
        self._handle: ReadHandle | None = None
        self._reads = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.retired = False

    # ------------------------------------------------------------------ index
    @property
    def loaded_index(self) -> array[int] | None:
        """The index if it is in memory (synchronous callers), else None."""
        return self._index

    async def ensure_index(self) -> array[int]:
        if self._index is not None:
            return self._index
        async with self._index_lock:
            if self._index is None:
                index: array[int] = array("q")
                for first in range(0, self.entries, READ_CHUNK):
                    last = min(self.entries - 1, first + READ_CHUNK - 1)
                    for raw in await self._read(first, last):
                        index.append(position_key(decode_compacted(raw)[0]))
                self._index = index
        return self._index

    def first_after(self, pos: Position) -> Position | None:
        """The first survivor strictly after ``pos`` (the index must be loaded), or None."""
        index = self._index
        if index is None:
            return None
        i = bisect_right(index, position_key(pos))
        return key_position(index[i]) if i < len(index) else None

    # ------------------------------------------------------------------ reads
    async def _read(self, first: int, last: int) -> list[bytes]:
        if self._handle is None:
            self._handle = await self._ledgers.open(self.ledger_id, recovery=False)
        return await self._handle.read(first, last)

    async def _guarded(self, first: int, last: int) -> list[tuple[Position, bytes]]:
        self._reads += 1
        self._idle.clear()
        try:
            return [decode_compacted(raw) for raw in await self._read(first, last)]
        finally:
            self._reads -= 1
            if self._reads == 0:
                self._idle.set()

    async def read_from(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to ``max_entries`` survivors at or after ``start``, in order."""
        index = await self.ensure_index()
        i = bisect_left(index, position_key(start))
        if i >= len(index) or max_entries <= 0:
            return []
        return await self._guarded(i, min(len(index), i + max_entries) - 1)

    async def read_at(self, positions: Iterable[Position]) -> dict[Position, bytes]:
        """The survivors among ``positions`` (the others are not in the view)."""
        index = await self.ensure_index()
        slots: list[int] = []
        for pos in positions:
            key = position_key(pos)
            i = bisect_left(index, key)
            if i < len(index) and index[i] == key:
                slots.append(i)
        slots.sort()
        out: dict[Position, bytes] = {}
        i = 0
        while i < len(slots):
            j = i
            while j + 1 < len(slots) and slots[j + 1] == slots[j] + 1:
                j += 1
            for pos, stored in await self._guarded(slots[i], slots[j]):
                out[pos] = stored
            i = j + 1
        return out

    async def last(self) -> tuple[Position, bytes] | None:
        """The last survivor, or None when the view is empty."""
        if self.entries == 0:
            return None
        got = await self._guarded(self.entries - 1, self.entries - 1)
        return got[0] if got else None

    async def chunks(self) -> AsyncIterator[list[tuple[Position, bytes]]]:
        """Every survivor, a chunk at a time (the compactor merges them with what came after the horizon)."""
        for first in range(0, self.entries, READ_CHUNK):
            yield await self._guarded(first, min(self.entries - 1, first + READ_CHUNK - 1))

    # ------------------------------------------------------------------ lifecycle
    async def retire(self) -> None:
        """Delete the ledger once no read is using it (a newer view replaced this one)."""
        self.retired = True
        await self._idle.wait()
        await self._ledgers.delete(self.ledger_id)
