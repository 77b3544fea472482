"""ManagedLedger: one topic's log as a sequence of ledgers, with roll-over and a tail cache.

Only the last ledger is ever written. Its entry count is known only to the writer, so after a
crash ``open`` recovers it (fence, read forward, close — ledger/PROTOCOL.md) before anything is
read or written; every earlier ledger was closed at roll-over and its entry count recorded in the
managed ledger's metadata in the same compare-and-set that added its successor.

Appends are pipelined: the broker calls ``add_entry`` for each entry without waiting for the
previous one, and the ledger handle acknowledges them in entry order. Roll-over stops new appends,
waits for the in-flight ones to drain, closes the old ledger and opens the next, so that
acknowledgements stay in order across ledgers too.

Each entry's message count (``add_entry(..., messages=n)``; a producer batch is one entry of n
messages) is kept per ledger (``counts.LedgerCounts``) so that cursors count their backlog in
messages. A ledger's counts are stored when it is closed (roll-over or close), under
``{managed ledger}/ledger-counts/{ledger id}`` and only when some entry holds other than one
message; the ledger list records each closed ledger's message total (``msgs``), which says
whether to look for that key. The ledger a crashed writer left open has no stored counts: its
entries are read back once when it is recovered (``entry_messages`` decodes the count of one
entry; without it, or for data written before counts existed, an entry counts as one message).

Non-durable cursors (readers) live in ``non_durable_cursors``, apart from the durable ones in
``cursors``: they are never stored or loaded, and they do not hold back trimming (when their
ledgers are trimmed they move up to the first remaining entry, as Pulsar's NonDurableCursor).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.read_handle import ReadHandle
from magnetar.ledger.write_handle import WriteHandle
from magnetar.managed_ledger.clock import policy_time
from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.counts import LedgerCounts
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.position import EARLIEST, Position
from magnetar.managed_ledger.retention_rule import removable_ledgers, slowest_position
from magnetar.metadata import paths
from magnetar.metadata.store import ANY_VERSION, MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import AlreadyClosed, BadVersion, NoSuchLedger, NotFound, PersistenceError

# Entries read per request when counting the messages of a recovered ledger.
_COUNT_READ_CHUNK = 500

log = logging.getLogger(__name__)

#: ``listener(position, None)`` once an add is durable, ``listener(None, error)`` if it failed.
AddedListener = Callable[[Position | None, BaseException | None], None]


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    # When the ledger was closed (epoch seconds); 0 while it is the one being written.
    closed_at: float = 0.0


class ManagedLedger:
    """The log of one topic. Create with ``await ManagedLedger.open(...)``."""

    def __init__(
        self,
        name: str,
        store: MetadataStore,
        ledgers: LedgerManager,
        config: ManagedLedgerConfig,
        entry_messages: Callable[[bytes], int] | None = None,
    ) -> None:
        self.name = name
        self._entry_messages = entry_messages
        self._counts: dict[int, LedgerCounts] = {}
        self._store = store
        self._ledgers = ledgers
        self.config = config
        self._infos: dict[int, LedgerInfo] = {}
        self._ids: list[int] = []
        self._meta_version = MUST_NOT_EXIST
        self._current: WriteHandle | None = None
        self._current_created = 0.0
        self._issued = 0
        self._issued_bytes = 0
        self._inflight = 0
        self._drained: asyncio.Event = asyncio.Event()
        self._drained.set()
        self._rollover_task: asyncio.Task[None] | None = None
        self._ledger_failed = False
        self._roll_error: Exception | None = None
        self._roll_failures = 0
        self._retry_roll_at = 0.0
        # Adds waiting for a roll-over: (data, precondition, messages, listener), issued in order.
        self._queue: deque[tuple[bytes, Callable[[], BaseException | None] | None, int, AddedListener]] = deque()
        self._read_handles: dict[int, ReadHandle] = {}
        self._cache: OrderedDict[Position, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._closed = False
        self.cursors: dict[str, ManagedCursor] = {}
        self.non_durable_cursors: dict[str, ManagedCursor] = {}
        self._listeners: list[Callable[[], None]] = []
        self._trim_task: asyncio.Task[list[int]] | None = None
        # Set by a feature that must re-read the entries after a position it stored (the broker's
        # deduplication snapshot): trimming keeps every ledger holding an entry after it.
        self.retain_from: Callable[[], Position | None] | None = None

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

    async def _create_ledger(self) -> None:
        c = self.config
        handle = await self._ledgers.create(
            c.ensemble_size, c.write_quorum, c.ack_quorum, custom={"managed-ledger": self.name}
        )
        self._current = handle
        self._current_created = time.monotonic()
        self._issued = 0
        self._issued_bytes = 0
        info = LedgerInfo(handle.ledger_id, 0, 0)
        self._infos[handle.ledger_id] = info
        self._counts[handle.ledger_id] = LedgerCounts()
        self._ids.append(handle.ledger_id)
        await self._write_meta()

    # ------------------------------------------------------------------ message counts
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

    # ------------------------------------------------------------------ writing
    def add_listener(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after every confirmed add (dispatchers wake up on it)."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    async def add_entry(
        self,
        data: bytes,
        *,
        precondition: Callable[[], BaseException | None] | None = None,
        messages: int = 1,
    ) -> Position:
        """Append one entry holding ``messages`` messages; returns its position once it is
        durable on Qa bookies (``add_entry_with``, awaited). A caller that stops waiting while the
        add is queued behind a roll-over keeps it from being issued."""
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()

        def still_wanted() -> BaseException | None:
            if fut.cancelled():
                return asyncio.CancelledError()
            return precondition() if precondition is not None else None

        self.add_entry_with(data, partial(settle, fut), precondition=still_wanted, messages=messages)
        return await fut

    def add_entry_with(
        self,
        data: bytes,
        listener: AddedListener,
        *,
        precondition: Callable[[], BaseException | None] | None = None,
        messages: int = 1,
    ) -> None:
        """Append one entry holding ``messages`` messages; ``listener(position, None)`` once it is
        durable on Qa bookies, or ``listener(None, error)``. The listener runs directly from the
        ledger's delivery, so a broker writes the producer's receipt in the same turn of the
        event loop as the bookie's answer; listeners are called in entry order.

        Entries are issued to the ledger strictly in call order. An add that arrives while a
        roll-over is under way joins a FIFO queue that the roll-over drains synchronously, so
        a later add can never overtake one that was waiting. ``precondition`` is checked at the
        moment of issue (the broker passes its producer fence, so a send that waited behind a
        roll-over is not stored once an earlier send of the same producer has failed). A refusal
        at the moment of the call (closed, a failed roll-over backing off, the precondition)
        raises here instead.
        """
        if self._closed:
            raise AlreadyClosed(f"managed ledger {self.name} is closed")
        if self._queue or self._rolling or self._should_roll():
            if not self._rolling:
                if self._roll_error is not None and time.monotonic() < self._retry_roll_at:
                    # Back off between attempts to open a new ledger instead of one per send.
                    raise self._roll_error
                self._start_rollover()
            self._queue.append((data, precondition, messages, listener))
            return
        self._issue(data, precondition, messages, listener)

    def _issue(
        self,
        data: bytes,
        precondition: Callable[[], BaseException | None] | None,
        messages: int,
        listener: AddedListener,
    ) -> None:
        """Hand one entry to the current ledger, synchronously (this fixes its entry id)."""
        if precondition is not None:
            refused = precondition()
            if refused is not None:
                raise refused
        if self._closed or self._current is None:
            raise AlreadyClosed(f"managed ledger {self.name} is closed")
        handle = self._current
        try:
            handle.append_with(data, partial(self._added, handle, data, listener))
        except Exception:
            if not self._closed:
                self._ledger_failed = True  # the handle's failure is sticky: the next add moves on
            raise
        # Entry ids are fixed here, in call order: the counts follow the same order.
        self._counts[handle.ledger_id].append(messages)
        self._issued += 1
        self._issued_bytes += len(data)
        self._inflight += 1
        self._drained.clear()

    def _added(
        self, handle: WriteHandle, data: bytes, listener: AddedListener, entry_id: int, exc: BaseException | None
    ) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._drained.set()
        if exc is not None:
            if handle is self._current and not self._closed:
                # The handle's failure is sticky: the next add moves to a new ledger.
                self._ledger_failed = True
            listener(None, exc)
            return
        pos = Position(handle.ledger_id, entry_id)
        info = self._infos.get(handle.ledger_id)
        if info is not None:
            if entry_id + 1 > info.entries:
                info.entries = entry_id + 1
            info.size += len(data)
        self._cache_put(pos, data)
        # The producer's receipt first, then the dispatchers: they may deliver the entry at once
        # (Subscription.on_added), and its receipt should not wait behind that.
        try:
            listener(pos, None)
        finally:
            for callback in list(self._listeners):
                try:
                    callback()
                except Exception:  # a dispatcher's bug must not cost the others the entry
                    log.exception("add listener of %s failed", self.name)

    def _drain_queue(self) -> None:
        """Issue queued adds in order after a roll-over (or fail them all if it failed)."""
        while self._queue:
            if self._roll_error is not None:
                error = self._roll_error
                waiting = list(self._queue)
                self._queue.clear()
                for _, _, _, listener in waiting:
                    listener(None, error)
                return
            if self._should_roll():
                self._start_rollover()  # the rest wait for the next ledger, still in order
                return
            data, precondition, messages, listener = self._queue.popleft()
            try:
                self._issue(data, precondition, messages, listener)
            except BaseException as exc:  # the precondition may say CancelledError: the caller left
                listener(None, exc)

    def _should_roll(self) -> bool:
        """Roll before an add would overfill the current ledger (counted at issue, not at ack,
        so that a burst of pipelined adds cannot overshoot the limit), once the ledger is at least
        ``min_ledger_seconds`` old; until then it grows past the limit, as Pulsar's does."""
        c = self.config
        if self._ledger_failed:
            return True
        age = time.monotonic() - self._current_created
        full = self._issued >= c.max_entries_per_ledger or self._issued_bytes >= c.max_bytes_per_ledger
        return (full and age >= c.min_ledger_seconds) or (self._issued > 0 and age >= c.max_ledger_seconds)

    @property
    def _rolling(self) -> bool:
        """A roll-over is under way (adds queue behind it)."""
        return self._rollover_task is not None and not self._rollover_task.done()

    def _start_rollover(self) -> None:
        self._rollover_task = asyncio.get_running_loop().create_task(self._rollover())

    async def _rollover(self) -> None:
        self._roll_error = None
        try:
            await self._drained.wait()
            old = self._current
            if old is not None and old.ledger_id in self._infos:
                try:
                    await old.close()
                except Exception as exc:
                    # A failed ledger may not close (fenced, bookies gone); what was acknowledged
                    # is known, and the next owner's recovery settles the rest.
                    log.warning("closing ledger %s of %s failed: %s", old.ledger_id, self.name, exc)
                self._infos[old.ledger_id].entries = old.last_add_confirmed + 1
                self._infos[old.ledger_id].closed_at = policy_time()
                await self._store_counts(old.ledger_id)
            await self._create_ledger()
            self._ledger_failed = False
            self._roll_failures = 0
            log.info("managed ledger %s rolled over to ledger %s", self.name, self._ids[-1])
            self.schedule_trim()
        except Exception as exc:
            # The old ledger is closed or broken either way: no add may go to it any more.
            self._ledger_failed = True
            self._roll_error = exc
            self._roll_failures += 1
            delay = min(5.0, 0.1 * 2 ** min(self._roll_failures, 6))
            self._retry_roll_at = time.monotonic() + delay
            log.warning("roll-over of %s failed (retry in %.1fs): %s", self.name, delay, exc)
        finally:
            # May start the next roll-over (a new task) for adds that still do not fit.
            self._drain_queue()

    def _cache_put(self, pos: Position, data: bytes) -> None:
        self._cache[pos] = data
        self._cache_bytes += len(data)
        while self._cache_bytes > self.config.cache_bytes and self._cache:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= len(old)

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

    async def _read_from_bookies(self, lid: int, first: int, last: int) -> list[bytes]:
        if self._current is not None and lid == self._current.ledger_id:
            return await self._current.read(first, last)
        handle = self._read_handles.get(lid)
        if handle is None:
            handle = await self._ledgers.open(lid, recovery=False)
            self._read_handles[lid] = handle
        return await handle.read(first, last)

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

    # ------------------------------------------------------------------ trimming
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

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """Flush cursors and close the current ledger, so the next owner need not recover it."""
        if self._closed:
            return
        self._closed = True
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


def settle(fut: asyncio.Future[Position], pos: Position | None, exc: BaseException | None) -> None:
    """An ``AddedListener`` that resolves ``fut`` (unless it is done already: its caller left)."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        assert pos is not None
        fut.set_result(pos)
