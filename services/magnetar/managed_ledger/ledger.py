"""ManagedLedger: one topic's log as a sequence of ledgers, with roll-over and a tail cache.

Only the last ledger is ever written. Its entry count is known only to the writer, so after a
crash ``open`` recovers it (fence, read forward, close — ledger/PROTOCOL.md) before anything is
read or written; every earlier ledger was closed at roll-over and its entry count recorded in the
managed ledger's metadata in the same compare-and-set that added its successor.

The class is assembled by concern from the modules of this package, as base classes:
``ledger_list.py`` (the ledgers, their metadata, positions), ``message_counts.py`` (messages per
entry, backlog in messages), ``reads.py`` (the entry cache, reads), ``trimming.py`` (retention
applied) and ``appends.py`` (the add path and roll-over). This module opens, recovers, closes and
deletes the whole, and keeps its cursors.

Non-durable cursors (readers) live in ``non_durable_cursors``, apart from the durable ones in
``cursors``: they are never stored or loaded, and they do not hold back trimming (when their
ledgers are trimmed they move up to the first remaining entry, as Pulsar's NonDurableCursor).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger.appends import AddedListener, LedgerAppends, settle
from magnetar.managed_ledger.clock import policy_time
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.ledger_list import LedgerInfo
from magnetar.managed_ledger.position import Position
from magnetar.metadata import paths
from magnetar.metadata.store import ANY_VERSION, MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import NoSuchLedger, NotFound, PersistenceError

__all__ = ["AddedListener", "LedgerInfo", "ManagedLedger", "settle"]

# The managed ledger logs under one name, whichever of its modules holds the code, so that a log
# filter set for it keeps catching every line.
log = logging.getLogger("magnetar.managed_ledger.ledger")


class ManagedLedger(LedgerAppends):
    """The log of one topic. Create with ``await ManagedLedger.open(...)``."""

    def __init__(
        self,
        name: str,
        store: MetadataStore,
        ledgers: LedgerManager,
        config: ManagedLedgerConfig,
        entry_messages: Callable[[bytes], int] | None = None,
    ) -> None:
        # Each attribute is declared, with its type and what it means, in the base class that owns it.
        self.name = name
        self._entry_messages = entry_messages
        self._counts = {}
        self._store = store
        self._ledgers = ledgers
        self.config = config
        self._infos = {}
        self._ids = []
        self._meta_version = MUST_NOT_EXIST
        self._current = None
        self._current_created = 0.0
        self._issued = 0
        self._issued_bytes = 0
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._rollover_task = None
        self._ledger_failed = False
        self._roll_error = None
        self._roll_failures = 0
        self._retry_roll_at = 0.0
        self._wake_roll = asyncio.Event()
        self._queue = deque()
        self._read_handles = {}
        self._cache = OrderedDict()
        self._cache_bytes = 0
        self._closed = False
        self.cursors = {}
        self.non_durable_cursors = {}
        self._listeners = []
        self._trim_task = None
        self.retain_from = None

    # ------------------------------------------------------------------ opening
    @classmethod
    async def open(
        cls,
        name: str,
        store: MetadataStore,
        ledgers: LedgerManager,
        config: ManagedLedgerConfig,
        *,
        entry_messages: Callable[[bytes], int] | None = None,
    ) -> ManagedLedger:
        """Open (creating or recovering) the managed ledger ``name``. ``entry_messages`` gives
        the message count of a stored entry; it is used only to count the entries of a ledger a
        crashed writer left open."""
        ml = cls(name, store, ledgers, config, entry_messages)
        await ml._initialize()
        return ml

    async def _initialize(self) -> None:
        found = await self._store.get(self.meta_path)
        recorded: list[dict[str, Any]] = []
        if found is not None:
            recorded = json.loads(found.value)["ledgers"]
            self._meta_version = found.version
        # A last ledger found empty is deleted only once the ledger list without it is stored: deleted
        # first, a failed list write (another opener raced us) left a list naming a missing ledger.
        empty_last: int | None = None
        for i, rec in enumerate(recorded):
            info = LedgerInfo(
                int(rec["id"]),
                int(rec.get("entries") or 0),
                int(rec.get("size") or 0),
                float(rec.get("closed_at") or policy_time()),
            )
            if i == len(recorded) - 1:
                # The last ledger may have been open when its writer died: recover and close it.
                try:
                    handle = await self._ledgers.open(info.ledger_id, recovery=True)
                except NoSuchLedger:
                    if rec.get("closed_at") and not rec.get("entries"):
                        continue  # closed empty, and deleted by an opener before this fix: nothing lost
                    raise
                info.entries = handle.last_entry_id + 1
                info.size = handle.metadata.length
                self._read_handles[info.ledger_id] = handle
                if info.entries == 0:
                    self._read_handles.pop(info.ledger_id, None)
                    empty_last = info.ledger_id
                    continue
                if "msgs" in rec:
                    self._counts[info.ledger_id] = await self._load_counts(info.ledger_id, info.entries, rec["msgs"])
                else:  # its writer died before recording them: count them from the entries
                    self._counts[info.ledger_id] = await self._count_entries(handle, info.entries)
                    await self._store_counts(info.ledger_id)
            else:
                self._counts[info.ledger_id] = await self._load_counts(info.ledger_id, info.entries, rec.get("msgs"))
            self._infos[info.ledger_id] = info
            self._ids.append(info.ledger_id)
        await self._create_ledger()
        if empty_last is not None:
            try:
                await self._ledgers.delete(empty_last)
            except Exception as exc:  # an empty ledger left behind costs nothing; the topic opens
                log.warning("could not delete empty ledger %s of %s: %s", empty_last, self.name, exc)
        for cursor_name in await self._store.children(paths.managed_ledger_cursors(self.name)):
            cursor = await ManagedCursor.load(self, cursor_name)
            self.cursors[cursor_name] = cursor

    # ------------------------------------------------------------------ cursors
    async def open_cursor(self, name: str, *, start_at_earliest: bool = False) -> ManagedCursor:
        cursor = self.cursors.get(name)
        if cursor is None:
            start = self.first_position if start_at_earliest else self.last_confirmed
            cursor = ManagedCursor(self, name, start)
            await cursor.flush_now()
            self.cursors[name] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is not None:
            await cursor.close()
        if await self._store.exists(self.cursor_path(name)):
            await self._store.delete(self.cursor_path(name))

    def open_non_durable_cursor(self, name: str, start: Position) -> ManagedCursor:
        """A reader's cursor (Pulsar's NonDurableCursor): mark-delete ``start`` (raised to just
        before the oldest stored entry when older), in memory only, not counted by trimming.
        Opening a name that is open returns that cursor."""
        cursor = self.non_durable_cursors.get(name)
        if cursor is None:
            cursor = ManagedCursor(self, name, max(start, self.first_position), durable=False)
            self.non_durable_cursors[name] = cursor
        return cursor

    def close_non_durable_cursor(self, name: str) -> None:
        self.non_durable_cursors.pop(name, None)

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Flush cursors and close the current ledger, so the next owner need not recover it."""
        if self._closed:
            return
        self._closed = True
        self._wake_roll.set()  # a roll-over backing off gives up now: its queued adds fail as closed
        if self._trim_task is not None and not self._trim_task.done():
            await asyncio.gather(self._trim_task, return_exceptions=True)
        for cursor in self.cursors.values():
            await cursor.close()
        self.non_durable_cursors.clear()
        while self._rollover_task is not None and not self._rollover_task.done():
            await asyncio.shield(self._rollover_task)
        await self._drained.wait()
        if self._current is not None:
            await self._current.close()
            lid = self._current.ledger_id
            self._infos[lid].entries = self._current.last_add_confirmed + 1
            self._infos[lid].closed_at = policy_time()
            self._current = None
            try:
                await self._store_counts(lid)
            except Exception as exc:  # the ledger list still says how many; readers fall back
                log.warning("could not store the message counts of ledger %s of %s: %s", lid, self.name, exc)
            try:
                await self._write_meta()
            except PersistenceError:
                log.warning("could not record the final state of %s", self.name)

    async def delete(self) -> None:
        """Close, then delete every ledger, every cursor, the message counts and the metadata."""
        await self.close()
        for name in list(self.cursors):
            await self.delete_cursor(name)
        for lid in self._ids:
            await self._ledgers.delete(lid)
        for leftover in await self._store.children(self.counts_folder):
            try:
                await self._store.delete(f"{self.counts_folder}/{leftover}")
            except NotFound:
                pass
        for prop in await self._store.children(paths.managed_ledger_properties(self.name)):
            try:
                await self._store.delete(self.property_path(prop))
            except NotFound:
                pass
        await self._store.delete(self.meta_path, ANY_VERSION)
