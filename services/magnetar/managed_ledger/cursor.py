"""ManagedCursor: a subscription's durable position in a managed ledger.

State is Pulsar's: the mark-delete position (everything at or before it is acknowledged) plus the
individually acknowledged positions after it, stored as ranges so a long run of acks costs a few
numbers. The read position (what to dispatch next) is in memory only: after a restart it starts
again just after the mark-delete position, and positions already acknowledged are skipped.

Acknowledgements are written to the metadata store in coalesced flushes: many acks inside
``cursor_flush_delay`` cost one durable write, and ``ack`` returns a future that resolves only
once that write is done, so an acknowledgement confirmed to a client survives kill -9.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger import ManagedLedger

log = logging.getLogger(__name__)


def to_ranges(positions: set[Position]) -> list[list[int]]:
    """Compress positions into [ledger, first_entry, last_entry] runs."""
    out: list[list[int]] = []
    for lid, eid in sorted(positions):
        if out and out[-1][0] == lid and out[-1][2] == eid - 1:
            out[-1][2] = eid
        else:
            out.append([lid, eid, eid])
    return out


def from_ranges(ranges: list[list[int]]) -> set[Position]:
    return {Position(lid, e) for lid, first, last in ranges for e in range(first, last + 1)}


class ManagedCursor:
    def __init__(self, ml: ManagedLedger, name: str, mark_delete: Position) -> None:
        self.ml = ml
        self.name = name
        self.mark_delete = mark_delete
        self.acked: set[Position] = set()
        self.read_position = ml.next_position(mark_delete)
        self._dirty = False
        self._waiters: list[asyncio.Future[None]] = []
        self._flush_task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def load(cls, ml: ManagedLedger, name: str) -> ManagedCursor:
        found = await ml._store.get(ml.cursor_path(name))
        doc: dict[str, Any] = json.loads(found.value) if found else {}
        md = Position(*doc.get("md", list(ml.first_position)))
        cursor = cls(ml, name, md)
        cursor.acked = {p for p in from_ranges(doc.get("acked", [])) if p > md}
        cursor._advance()  # also moves the read position past what the ranges acknowledged
        return cursor

    # ------------------------------------------------------------------ queries
    def is_acked(self, pos: Position) -> bool:
        return pos <= self.mark_delete or pos in self.acked

    @property
    def backlog(self) -> int:
        """Entries not yet acknowledged; with batching one entry holds many messages."""
        return max(0, self.ml.entries_after(self.mark_delete) - len(self.acked))

    def has_more(self) -> bool:
        return self.ml.first_readable(self.read_position) is not None

    # ------------------------------------------------------------------ updates
    def ack(self, positions: list[Position]) -> asyncio.Future[None]:
        for pos in positions:
            if pos > self.mark_delete:
                self.acked.add(pos)
        self._advance()
        return self._schedule_flush()

    def ack_cumulative(self, pos: Position) -> asyncio.Future[None]:
        if pos > self.mark_delete:
            self.mark_delete = pos
            self.acked = {p for p in self.acked if p > pos}
            self._advance()
        return self._schedule_flush()

    def reset(self, mark_delete: Position) -> asyncio.Future[None]:
        """Seek: everything after ``mark_delete`` becomes unacknowledged again."""
        self.mark_delete = mark_delete
        self.acked.clear()
        self.read_position = self.ml.next_position(mark_delete)
        return self._schedule_flush()

    def _advance(self) -> None:
        ml = self.ml
        while self.acked:
            nxt = ml.next_position(self.mark_delete)
            if nxt in self.acked:
                self.acked.discard(nxt)
                self.mark_delete = nxt
            else:
                break
        if self.read_position <= self.mark_delete:
            self.read_position = ml.next_position(self.mark_delete)

    # ------------------------------------------------------------------ persistence
    def _schedule_flush(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        self._dirty = True
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = loop.create_task(self._flush_loop())
        return fut

    async def _flush_loop(self) -> None:
        while self._dirty:
            await asyncio.sleep(self.ml.config.cursor_flush_delay)
            waiters, self._waiters = self._waiters, []
            self._dirty = False
            try:
                await self._write()
            except Exception as exc:
                log.exception("cursor %s/%s flush failed", self.ml.name, self.name)
                for w in waiters:
                    if not w.done():
                        w.set_exception(exc)
                continue
            for w in waiters:
                if not w.done():
                    w.set_result(None)
            self.ml.schedule_trim()

    async def _write(self) -> None:
        doc = {"md": list(self.mark_delete), "acked": to_ranges(self.acked)}
        await self.ml._store.put(self.ml.cursor_path(self.name), json.dumps(doc).encode())

    async def flush_now(self) -> None:
        await self._write()

    async def close(self) -> None:
        if self._flush_task is not None and not self._flush_task.done():
            await self._flush_task
        if not self._closed and self._dirty:
            await self._write()
        self._closed = True
