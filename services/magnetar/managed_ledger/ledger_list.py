"""The ledger list of a managed ledger: which ledgers make up the log, and where its positions are.

Every ledger but the last was closed at roll-over, and its entry count was recorded in the managed
ledger's metadata (``{"ledgers": [...]}`` under the managed ledger's path) in the same
compare-and-set that added its successor; so the list alone says which positions exist. The list
is written with the version it was read at: a second owner's write fails instead of losing one.

``LedgerList`` holds that list and answers position questions from it (first, last, next, how
many after): the cursors, the reads, the trimming and the appends all build on these answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.write_handle import WriteHandle
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.counts import LedgerCounts
from magnetar.managed_ledger.position import EARLIEST, Position
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import BadVersion, PersistenceError


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    # When the ledger was closed (epoch seconds); 0 while it is the one being written.
    closed_at: float = 0.0


class LedgerList:
    """The ledgers of one managed ledger, their metadata and the positions they hold.

    The managed ledger is assembled from this class and the classes built on it (message counts,
    reads, trimming, appends), one per concern, as base classes rather than as parts it forwards
    to: a call on the data path looks its method up as it would on a single class. The state is
    assigned in ``ManagedLedger.__init__``, in one place; each class declares the part it owns."""

    name: str
    config: ManagedLedgerConfig
    _store: MetadataStore
    _ledgers: LedgerManager
    # Every ledger of the log, oldest first (``_ids``), with what is recorded of each.
    _infos: dict[int, LedgerInfo]
    _ids: list[int]
    _meta_version: int
    # Per-ledger message counts: the ledger list records each closed ledger's total (``msgs``).
    _counts: dict[int, LedgerCounts]
    # The ledger being written, the last of ``_ids`` (None once closed).
    _current: WriteHandle | None
    _closed: bool

    # ------------------------------------------------------------------ paths and metadata
    @property
    def meta_path(self) -> str:
        return paths.managed_ledger(self.name)

    def cursor_path(self, cursor: str) -> str:
        return paths.managed_ledger_cursor(self.name, cursor)

    @property
    def counts_folder(self) -> str:
        return f"{self.meta_path}/ledger-counts"

    @property
    def store(self) -> MetadataStore:
        """The metadata store, for features that keep properties of their own (``property_path``)."""
        return self._store

    @property
    def closed(self) -> bool:
        return self._closed

    def property_path(self, key: str) -> str:
        """Where property ``key`` of this managed ledger is kept; ``delete`` removes it with the rest."""
        return paths.managed_ledger_property(self.name, key)

    def counts_path(self, ledger_id: int) -> str:
        """Where a closed ledger's per-entry message counts are stored (module docstring)."""
        return f"{self.counts_folder}/{int(ledger_id)}"

    def _meta_doc(self) -> bytes:
        ledgers: list[dict[str, Any]] = []
        for i in self._infos.values():
            rec: dict[str, Any] = {"id": i.ledger_id, "entries": i.entries, "size": i.size, "closed_at": i.closed_at}
            counts = self._counts.get(i.ledger_id)
            if i.closed_at and counts is not None:
                rec["msgs"] = counts.upto(i.entries - 1)
            ledgers.append(rec)
        return json.dumps({"ledgers": ledgers}).encode()

    async def _write_meta(self) -> None:
        try:
            stat = await self._store.put(self.meta_path, self._meta_doc(), self._meta_version)
        except BadVersion as exc:
            raise PersistenceError(
                f"managed ledger {self.name} metadata changed under us (another owner?): {exc}"
            ) from exc
        self._meta_version = stat.version

    # ------------------------------------------------------------------ positions
    @property
    def ledger_ids(self) -> list[int]:
        return list(self._ids)

    def entries_in(self, ledger_id: int) -> int:
        info = self._infos.get(ledger_id)
        return info.entries if info else 0

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        """A copy of what the log records of ``ledger_id`` (None when it is not one of ours)."""
        info = self._infos.get(ledger_id)
        return None if info is None else LedgerInfo(info.ledger_id, info.entries, info.size, info.closed_at)

    @property
    def current_ledger_id(self) -> int | None:
        """The ledger being written, if one is open."""
        return self._current.ledger_id if self._current is not None else None

    @property
    def ledger_manager(self) -> LedgerManager:
        """Where the ledgers' metadata lives (read-only use: internal stats, tools)."""
        return self._ledgers

    def ledger_size(self, ledger_id: int) -> int:
        """Bytes stored in ledger ``ledger_id`` (0 when it is not one of ours)."""
        info = self._infos.get(ledger_id)
        return info.size if info else 0

    @property
    def first_position(self) -> Position:
        """The position just before the oldest stored entry."""
        return Position(self._ids[0], -1) if self._ids else EARLIEST

    @property
    def last_confirmed(self) -> Position:
        """The newest durable entry, or the position just before the first one."""
        for lid in reversed(self._ids):
            n = self._infos[lid].entries
            if n > 0:
                return Position(lid, n - 1)
        return self.first_position

    def next_position(self, pos: Position) -> Position:
        """The position after ``pos``; past the newest entry it is the next one to be written."""
        lid, eid = pos
        if lid in self._infos:
            if eid + 1 < self._infos[lid].entries:
                return Position(lid, eid + 1)
            for later in self._ids:
                if later > lid:
                    if self._infos[later].entries > 0:
                        return Position(later, 0)
            if lid == self._ids[-1]:
                return Position(lid, eid + 1)
            return Position(self._ids[-1], 0)
        for later in self._ids:
            if later > lid:
                return Position(later, 0)
        return Position(self._ids[-1], self._infos[self._ids[-1]].entries) if self._ids else pos

    def is_readable(self, pos: Position) -> bool:
        info = self._infos.get(pos.ledger_id)
        return info is not None and 0 <= pos.entry_id < info.entries

    def entries_after(self, pos: Position) -> int:
        """Number of stored entries strictly after ``pos`` (backlog arithmetic)."""
        total = 0
        for lid in self._ids:
            n = self._infos[lid].entries
            if lid > pos.ledger_id:
                total += n
            elif lid == pos.ledger_id:
                total += max(0, n - (pos.entry_id + 1))
        return total

    @property
    def total_entries(self) -> int:
        return sum(i.entries for i in self._infos.values())

    @property
    def total_size(self) -> int:
        return sum(i.size for i in self._infos.values())

    def first_readable(self, pos: Position) -> Position | None:
        """``pos`` if an entry is stored there, else the next stored entry after it, else None."""
        lid, eid = pos
        for candidate in self._ids:
            if candidate < lid:
                continue
            start = max(eid, 0) if candidate == lid else 0
            if start < self._infos[candidate].entries:
                return Position(candidate, start)
        return None
