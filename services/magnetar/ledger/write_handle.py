"""The single writer of a ledger (PROTOCOL.md R6-R13).

The hot path is ``append_with`` (``append_nowait`` is its form with a future): it numbers the
entry, sends it to its write set and returns, without waiting for earlier entries — the managed
ledger above pipelines thousands of entries per second through it. Per entry it costs one CRC, one
small object and one callback per replica; there are no metadata writes except on an ensemble
change or close. A bookie client with ``add_entry_callback`` (the in-process one) answers through
it directly; others through a future's callback.

Acks are counted per entry (a set of slots that confirmed it); ``_deliver`` calls listeners and
resolves futures strictly from the head of the pending queue, which is what makes results arrive
in entry order (R9) however the bookies interleave their answers.

Each replica's confirmation time is recorded per bookie (``bookie_latency``), so that a bookie
slower than the others is reported even though Qa < Qw hides it from publish latency.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from magnetar.ledger.bookie_api import NO_ENTRY, BookieClient, BookieResolver
from magnetar.ledger.bookie_latency import BOOKIE_LATENCY
from magnetar.ledger.distribution import contains_slot, write_set
from magnetar.ledger.metadata_format import LedgerMetadata, LedgerState, decode, encode, ledger_path
from magnetar.ledger.replica_reads import check_range, read_entries
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import (
    BadVersion,
    LedgerClosed,
    LedgerFenced,
    MagnetarError,
    NoSuchLedger,
    NotEnoughBookies,
)

log = logging.getLogger(__name__)

#: ``listener(entry_id, None)`` once an entry is delivered, ``listener(entry_id, error)`` if it fails.
AddListener = Callable[[int, BaseException | None], None]
#: ``callback(error)`` from a bookie client that can answer an add without a future (bookie_api.py).
_AddCallbackFn = Callable[[int, int, bytes, int, int, Callable[[BaseException | None], None]], None]


class _PendingAdd:
    """One entry between ``append_nowait`` and its delivery."""

    __slots__ = ("acked", "crc", "data", "entry_id", "finished", "future", "listener", "sent")

    def __init__(
        self, entry_id: int, data: bytes, future: asyncio.Future[int] | None, listener: AddListener | None = None
    ) -> None:
        self.entry_id = entry_id
        self.data = data
        self.crc = crc32c(data)
        self.future = future
        self.listener = listener
        self.acked: set[int] = set()  # slots of the current ensemble that confirmed it
        self.sent = False  # False while an ensemble change holds new entries back
        # Delivered or failed. Not ``future.done()``: a caller cancelling its wait must not stop
        # the entry from being counted, or it would block every later entry (R9).
        self.finished = False


class WriteHandle:
    """Appends to one OPEN ledger. Obtain it from ``LedgerManager.create``."""

    def __init__(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        store: MetadataStore,
        bookies: BookieResolver,
    ) -> None:
        self._ledger_id = ledger_id
        self._path = ledger_path(ledger_id)
        self._md = metadata
        self._version = version
        self._store = store
        self._resolver = bookies
        self._e = metadata.ensemble_size
        self._qw = metadata.write_quorum
        self._qa = metadata.ack_quorum
        self._ensemble: list[str] = list(metadata.last_ensemble)
        self._clients: dict[str, BookieClient] = {}
        # Each client's ``add_entry_callback`` where it has one (the in-process bookie's): the
        # answer then reaches ``_added`` without a future callback's turn of the loop.
        self._callbacks: dict[str, _AddCallbackFn | None] = {}
        self._next_entry = 0
        self._lac = NO_ENTRY
        self._length = 0
        self._pending: deque[_PendingAdd] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._error: MagnetarError | None = None
        self._closing = False
        self._closed = False
        # Ensemble change (R12): failures waiting to be handled, bookies ever seen failing, and the
        # task handling them (acks are not delivered while it runs).
        self._failures: dict[int, str] = {}
        self._failed_bookies: set[str] = set()
        self._changer: asyncio.Task[None] | None = None

    # -- public API -------------------------------------------------------------------------------

    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        """Bytes of the confirmed entries 0..LAC."""
        return self._length

    @property
    def metadata(self) -> LedgerMetadata:
        """The writer's view of the metadata (includes its ensemble changes)."""
        return self._md

    @property
    def is_closed(self) -> bool:
        return self._closed

    def append_nowait(self, data: bytes) -> asyncio.Future[int]:
        """Start appending ``data``; the future gives its entry id once it is durable on Qa
        bookies and every earlier entry is too (R7-R9), or the error that ended this ledger (R10).

        The entry id is fixed now, so callers can pipeline without awaiting each result."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        refused = self._refusal()
        if refused is not None:
            future.set_exception(refused)
            return future
        self._start(_PendingAdd(self._next_entry, data, future))
        return future

    def append_with(self, data: bytes, listener: AddListener) -> int:
        """``append_nowait`` with a listener instead of a future: ``listener`` is called directly
        from the delivery, in entry order, so the caller's next step runs in the same turn of the
        event loop (each future callback costs one turn, and at low load each turn was about 0.1 ms
        of a message's publish latency). Returns the entry id; a closed or failed ledger raises here,
        and the listener is never called synchronously."""
        refused = self._refusal()
        if refused is not None:
            raise refused
        pending = _PendingAdd(self._next_entry, data, None, listener)
        self._start(pending)
        return pending.entry_id

    def _refusal(self) -> MagnetarError | None:
        if self._closing:
            return LedgerClosed(f"ledger {self._ledger_id} is closed")
        return self._error

    def _start(self, pending: _PendingAdd) -> None:
        self._next_entry += 1
        self._pending.append(pending)
        self._idle.clear()
        if self._changer is None:
            self._send_all(pending)

    async def append(self, data: bytes) -> int:
        """``append_nowait`` and wait: returns the entry id."""
        return await self.append_nowait(data)

    async def read(self, first: int, last: int) -> list[bytes]:
        """Confirmed entries ``first..last`` (R14); entries past the LAC raise ``NoSuchEntry``."""
        check_range(self._ledger_id, first, last, self._lac)
        return await read_entries(self._resolver, self._ledger_id, self._md, first, last)

    async def close(self) -> None:
        """R13: wait for outstanding adds, then record the ledger CLOSED at the LAC."""
        if self._closed:
            return
        self._closing = True
        await self._idle.wait()
        closed = self._md.closed(self._lac, self._length)
        try:
            await self._store.put(self._path, encode(closed), self._version)
        except BadVersion:
            current = await self._store.get(self._path)
            if current is None:
                raise NoSuchLedger(f"ledger {self._ledger_id} was deleted") from None
            md = decode(current.value)
            if not (md.is_closed and md.last_entry_id == self._lac):
                raise LedgerFenced(
                    f"ledger {self._ledger_id} was recovered by another party "
                    f"(state {md.state}, last entry {md.last_entry_id}, writer LAC {self._lac})"
                ) from None
            closed = md
        self._md = closed
        self._closed = True

    # -- sending ----------------------------------------------------------------------------------

    def _client(self, bookie_id: str) -> BookieClient:
        client = self._clients.get(bookie_id)
        if client is None:
            client = self._clients[bookie_id] = self._resolver.client(bookie_id)
            self._callbacks[bookie_id] = getattr(client, "add_entry_callback", None)
        return client

    def _send_all(self, pending: _PendingAdd) -> None:
        pending.sent = True
        for slot in write_set(pending.entry_id, self._e, self._qw):
            self._send(pending, slot)

    def _send(self, pending: _PendingAdd, slot: int) -> None:
        """Send one copy; ``_added`` runs when the bookie answers (a future and a callback, not a
        task: this runs Qw times per entry, and a task per copy was most of the broker's work)."""
        bookie_id = self._ensemble[slot]
        client = self._client(bookie_id)
        answered = partial(self._added, pending, slot, bookie_id, time.monotonic())
        direct = self._callbacks[bookie_id]
        if direct is not None:
            direct(self._ledger_id, pending.entry_id, pending.data, pending.crc, self._lac, answered)
            return
        fut = client.add_entry_nowait(self._ledger_id, pending.entry_id, pending.data, pending.crc, self._lac)
        fut.add_done_callback(partial(_answer_of, answered))

    def _added(self, pending: _PendingAdd, slot: int, bookie_id: str, sent: float, exc: BaseException | None) -> None:
        if isinstance(exc, LedgerFenced):
            self._fail(exc)  # R11: a recovery has started; this writer is finished
            return
        if exc is not None:  # anything else: treat the bookie as dead (R12)
            # Even when the entry already reached Qa through the others (Qa < Qw): a bookie that
            # times out or fails must leave the ensemble, as in BookKeeper, or a silent bookie would
            # stay in it for good and every later entry would have one copy fewer, unreported
            # (tests/faults/test_partitions.py, scenario d). The finished entry keeps its Qa copies.
            # Not while closing: the close is writing the ledger's metadata.
            if self._error is None and not self._closing and not self._closed:
                if bookie_id not in self._failed_bookies:
                    log.info("ledger %d: add of %d to %s failed: %r", self._ledger_id, pending.entry_id, bookie_id, exc)
                self._bookie_failed(slot, bookie_id)
            return
        # Every confirmation counts, late ones too: a bookie whose confirmations always come after
        # the Qa fastest is invisible in publish latency, and that is what bookie_latency reports.
        BOOKIE_LATENCY.record(bookie_id, time.monotonic() - sent)
        # A confirmation from a bookie that has since been replaced at this slot does not count:
        # the entry was re-sent to the replacement, which is where readers will look (R12 step 4).
        if self._ensemble[slot] == bookie_id and not pending.finished:
            pending.acked.add(slot)
            if len(pending.acked) >= self._qa and pending is self._pending[0]:
                self._deliver()

    def _deliver(self) -> None:
        """Resolve acked entries from the head of the queue (R9); none during an ensemble change,
        whose new fragment starts at the LAC it saw."""
        if self._changer is not None:
            return
        pending = self._pending
        while pending and len(pending[0].acked) >= self._qa:
            head = pending.popleft()
            head.finished = True
            self._lac = head.entry_id
            self._length += len(head.data)
            if head.future is not None and not head.future.done():  # the caller may have cancelled its wait
                head.future.set_result(head.entry_id)
            if head.listener is not None:
                _notify(head.listener, head.entry_id, None)
        if not pending:
            self._idle.set()

    def _fail(self, error: MagnetarError) -> None:
        """R10: end this handle; every undelivered entry gets ``error``."""
        if self._error is None:
            self._error = error
            log.info("ledger %d: writer failed at LAC %d: %r", self._ledger_id, self._lac, error)
        while self._pending:
            head = self._pending.popleft()
            head.finished = True
            if head.future is not None and not head.future.done():
                head.future.set_exception(error)
            if head.listener is not None:
                _notify(head.listener, head.entry_id, error)
        self._idle.set()

    # -- ensemble change (R12) --------------------------------------------------------------------

    def _bookie_failed(self, slot: int, bookie_id: str) -> None:
        if bookie_id in self._failed_bookies or self._ensemble[slot] != bookie_id:
            return  # already being replaced, or replaced already
        self._failed_bookies.add(bookie_id)
        self._failures[slot] = bookie_id
        if self._changer is None:
            self._changer = asyncio.get_running_loop().create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failures and self._error is None:
                failures = dict(self._failures)
                self._failures.clear()
                error = await self._replace(set(failures))
                if error is not None:
                    self._fail(error)
        except Exception as exc:  # metadata store trouble: fail the writes rather than hang them
            self._fail(exc if isinstance(exc, MagnetarError) else NotEnoughBookies(repr(exc)))
        finally:
            self._changer = None
        if self._error is None:
            for pending in list(self._pending):
                if not pending.sent:
                    self._send_all(pending)
            self._deliver()

    async def _replace(self, slots: set[int]) -> MagnetarError | None:
        """Swap the bookies at ``slots``, record the new fragment by CAS, re-send what they lost."""
        in_use = set(self._ensemble) | self._failed_bookies
        candidates = [b for b in await self._resolver.writable_bookies() if b not in in_use]
        if len(candidates) < len(slots):
            return NotEnoughBookies(
                f"ledger {self._ledger_id}: {len(slots)} bookie(s) failed and "
                f"{len(candidates)} replacement(s) are available"
            )
        random.shuffle(candidates)
        ensemble = list(self._ensemble)
        for slot in slots:
            ensemble[slot] = candidates.pop()
        md = self._md.with_ensemble(self._lac + 1, tuple(ensemble))
        try:
            stat = await self._store.put(self._path, encode(md), self._version)
        except BadVersion:
            current = await self._store.get(self._path)
            if current is None:
                return NoSuchLedger(f"ledger {self._ledger_id} was deleted")
            if decode(current.value).state is not LedgerState.OPEN:
                return LedgerFenced(f"ledger {self._ledger_id} is being recovered")
            return BadVersion(f"ledger {self._ledger_id}: metadata changed under its writer")
        log.info("ledger %d: ensemble from entry %d is %s", self._ledger_id, self._lac + 1, ensemble)
        self._md, self._version, self._ensemble = md, stat.version, ensemble
        for pending in self._pending:
            if not pending.sent:
                continue
            for slot in slots:
                if contains_slot(pending.entry_id, slot, self._e, self._qw):
                    pending.acked.discard(slot)
                    self._send(pending, slot)
        return None


def _answer_of(answered: Callable[[BaseException | None], None], fut: asyncio.Future[None]) -> None:
    """A bookie client's future, turned into ``_added``'s outcome (a cancelled one is ignored)."""
    if not fut.cancelled():
        answered(fut.exception())


def _notify(listener: AddListener, entry_id: int, error: BaseException | None) -> None:
    """Call a delivery listener; one that raises is logged, never allowed to stop later deliveries."""
    try:
        listener(entry_id, error)
    except Exception:
        log.exception("add listener for entry %d failed", entry_id)
