"""ManagedCursor: a subscription's durable position in a managed ledger.

State is Pulsar's: the mark-delete position (everything at or before it is acknowledged) plus the
individually acknowledged positions after it, stored as ranges so a long run of acks costs a few
numbers, plus the partial acknowledgements of batched entries (batch-index acks: which messages
of an entry of ``count`` messages are acknowledged; once all are, the entry is). The read
position (what to dispatch next) is in memory only: after a restart it starts again just after
the mark-delete position, and positions already acknowledged are skipped.

Acknowledgements are written to the metadata store in coalesced flushes: many acks inside
``cursor_flush_delay`` cost one durable write, and ``ack`` returns a future that resolves only
once that write is done, so an acknowledgement confirmed to a client survives kill -9. A batch
index ack (``ack_batch_indexes``) only schedules the flush; the caller then calls ``ack`` (with
the entries the same command acknowledged, or ``[]``) and that future covers both, because every
write stores the cursor's whole state as it is when the write starts.

A non-durable cursor (``durable=False``, Pulsar's NonDurableCursor, used by readers) has the same
state in memory only: nothing is written, its futures are already resolved, and it is never
loaded back after a restart.

Cursor document (one key per cursor)::

    {"md": [ledger, entry], "acked": [[ledger, first, last], ...],
     "batch": [[ledger, entry, count, [index, ...]], ...]}

``batch`` is absent from documents written before batch-index acks existed; they load as having
no partial acks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.position import Position
from magnetar.metadata.store import MetadataStore

log = logging.getLogger(__name__)


class CursorLedger(Protocol):
    """What a cursor uses of the managed ledger it belongs to (``ManagedLedger`` is the one).

    Named here rather than imported, so that the cursor module does not depend on the ledger
    module that creates its cursors: the dependency runs one way only, and a cursor can be
    driven by any log that answers these questions about its positions."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def store(self) -> MetadataStore: ...

    @property
    def first_position(self) -> Position: ...

    def cursor_path(self, cursor: str) -> str: ...

    def next_position(self, pos: Position) -> Position: ...

    def first_readable(self, pos: Position) -> Position | None: ...

    def messages_of(self, pos: Position) -> int: ...

    def messages_after(self, pos: Position) -> int: ...

    def schedule_trim(self, now: float | None = None) -> None: ...


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
    def __init__(self, ml: CursorLedger, name: str, mark_delete: Position, *, durable: bool = True) -> None:
        self.ml = ml
        self.name = name
        self.durable = durable
        self.mark_delete = mark_delete
        self.acked: set[Position] = set()
        # Batched entries after the mark-delete position with some (not all) messages acked:
        # position -> (messages in the entry, acknowledged batch indexes).
        self.partial: dict[Position, tuple[int, set[int]]] = {}
        self.read_position = ml.next_position(mark_delete)
        # A non-durable cursor whose reads before the first stored entry are served elsewhere
        # (a reader of a topic's compacted view) answers True here, and trimming leaves it where
        # it is instead of moving it up (``skip_to``): it would skip what it has still to read.
        self.keeps_position_on_trim: Callable[[], bool] | None = None
        self._dirty = False
        self._waiters: list[asyncio.Future[None]] = []
        self._flush_task: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def load(cls, ml: CursorLedger, name: str) -> ManagedCursor:
        found = await ml.store.get(ml.cursor_path(name))
        doc: dict[str, Any] = json.loads(found.value) if found else {}
        md = Position(*doc.get("md", list(ml.first_position)))
        cursor = cls(ml, name, md)
        cursor.acked = {p for p in from_ranges(doc.get("acked", [])) if p > md}
        for lid, eid, count, indexes in doc.get("batch", []):
            pos = Position(int(lid), int(eid))
            done = {int(i) for i in indexes if 0 <= int(i) < int(count)}
            if pos > md and pos not in cursor.acked and len(done) < int(count):
                cursor.partial[pos] = (int(count), done)
        cursor._advance()  # also moves the read position past what the ranges acknowledged
        return cursor

    # ------------------------------------------------------------------ queries
    def is_acked(self, pos: Position) -> bool:
        return pos <= self.mark_delete or pos in self.acked

    def acked_indexes(self, pos: Position) -> frozenset[int] | None:
        """The batch indexes of entry ``pos`` acknowledged so far, or None when none are (or the
        whole entry is acknowledged)."""
        record = self.partial.get(pos)
        return frozenset(record[1]) if record is not None else None

    @property
    def backlog(self) -> int:
        """Messages not yet acknowledged (Pulsar's msgBacklog): the messages of the entries
        after the mark-delete position, less those of individually acknowledged entries and
        the acknowledged batch indexes of partially acknowledged ones."""
        ml = self.ml
        n = ml.messages_after(self.mark_delete)
        n -= sum(ml.messages_of(p) for p in self.acked)
        n -= sum(len(indexes) for _, indexes in self.partial.values())
        return max(0, n)

    def has_more(self) -> bool:
        return self.ml.first_readable(self.read_position) is not None

    # ------------------------------------------------------------------ updates
    def ack(self, positions: list[Position]) -> asyncio.Future[None]:
        for pos in positions:
            if pos > self.mark_delete:
                self.acked.add(pos)
                self.partial.pop(pos, None)
        self._advance()
        self._drop_partials_upto(self.mark_delete)
        return self._schedule_flush()

    def ack_batch_indexes(self, pos: Position, count: int, indexes: Sequence[int]) -> bool:
        """Record acknowledged batch indexes of entry ``pos`` (which holds ``count`` messages).

        Returns True when every message of the entry is now acknowledged: the entry is then
        acknowledged like ``ack([pos])`` and its partial record dropped. The write is scheduled
        but no future is returned: follow with ``ack(...)`` (``ack([])`` if nothing else) for a
        future that resolves once this state is durable."""
        if self.is_acked(pos):
            self.partial.pop(pos, None)
            return True
        record = self.partial.get(pos)
        total = record[0] if record is not None else max(1, int(count))
        done = record[1] if record is not None else set()
        done.update(int(i) for i in indexes if 0 <= int(i) < total)
        if len(done) >= total:
            self.partial.pop(pos, None)
            self.acked.add(pos)
            self._advance()
            self._drop_partials_upto(self.mark_delete)
        elif done:
            self.partial[pos] = (total, done)
        self._mark_dirty()
        return pos in self.acked or pos <= self.mark_delete

    def ack_cumulative(self, pos: Position) -> asyncio.Future[None]:
        if pos > self.mark_delete:
            self.mark_delete = pos
            self.acked = {p for p in self.acked if p > pos}
            self._advance()
            self._drop_partials_upto(self.mark_delete)
        return self._schedule_flush()

    def reset(self, mark_delete: Position) -> asyncio.Future[None]:
        """Seek: everything after ``mark_delete`` becomes unacknowledged again, partially
        acknowledged batches included."""
        self.mark_delete = mark_delete
        self.acked.clear()
        self.partial.clear()
        self.read_position = self.ml.next_position(mark_delete)
        return self._schedule_flush()

    def skip_to(self, pos: Position) -> None:
        """Move a cursor left behind trimmed ledgers up to ``pos`` (the position before the first
        stored entry), as Pulsar does for non-durable cursors when their ledgers are deleted."""
        if pos <= self.mark_delete:
            return
        self.mark_delete = pos
        self.acked = {p for p in self.acked if p > pos}
        self._drop_partials_upto(pos)
        self._advance()
        if self.read_position <= pos:
            self.read_position = self.ml.next_position(pos)

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

    def _drop_partials_upto(self, pos: Position) -> None:
        if self.partial:
            for stale in [p for p in self.partial if p <= pos]:
                del self.partial[stale]

    # ------------------------------------------------------------------ persistence
    def _mark_dirty(self) -> None:
        """Schedule a write without a waiter (the next ``ack`` future will cover it)."""
        if not self.durable:
            return
        self._dirty = True
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush_loop())

    def _schedule_flush(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if not self.durable:
            fut.set_result(None)
            return fut
        self._waiters.append(fut)
        self._mark_dirty()
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

    def document(self) -> dict[str, Any]:
        """The stored form of this cursor (module docstring)."""
        doc: dict[str, Any] = {"md": list(self.mark_delete), "acked": to_ranges(self.acked)}
        if self.partial:
            doc["batch"] = [
                [pos.ledger_id, pos.entry_id, count, sorted(indexes)]
                for pos, (count, indexes) in sorted(self.partial.items())
            ]
        return doc

    async def _write(self) -> None:
        if not self.durable:
            return
        await self.ml.store.put(self.ml.cursor_path(self.name), json.dumps(self.document()).encode())

    async def flush_now(self) -> None:
        await self._write()

    async def close(self) -> None:
        if self._flush_task is not None and not self._flush_task.done():
            await self._flush_task
        if not self._closed and self._dirty:
            await self._write()
        self._closed = True
