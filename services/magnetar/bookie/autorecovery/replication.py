"""Replication workers: repair the ledgers the auditor (or decommission) marked under-replicated.

Every bookie process runs one worker (``BookieService(autorecovery=True)``); any worker may
repair any ledger, the lock ``/underreplicated-locks/{ledger}`` (ephemeral, ``MUST_NOT_EXIST``)
makes sure one does at a time, and it vanishes with its holder's session, so a worker that dies
mid-copy leaves the ledger to the next one. Work is picked up from a watch on
``/underreplicated`` and retried on a timer, so a lost notification delays work but never loses it.

Repairing one ledger, fragment by fragment (BookKeeper's ``ReplicationWorker``):

1. For each fragment whose ensemble contains a missing bookie, choose a replacement per missing
   slot among the writable bookies that are not in that fragment's ensemble, not missing and not
   being decommissioned (a fragment's bookies must stay distinct, R2).
2. Copy every entry that the missing slot held — the entries whose write set contains the slot
   (R6) — from a surviving replica to the replacement. Each copy is checked against its CRC32C
   and sent with the same CRC and ``recovery=True``, which a bookie accepts even for a fenced
   ledger. A decommissioned bookie is still alive and serves as a source of last resort; a dead
   one simply fails and the next replica is tried.
3. Replace the bookie in that fragment's ensemble by compare-and-set on ``/ledgers/{id}``,
   re-reading and re-applying on ``BadVersion``. The metadata changes only after the copy is
   durable on the replacement, so a reader following the new metadata always finds the entries.
4. When no fragment references a missing bookie, delete the marker — by compare-and-set on its
   version, so a bookie added to the marker meanwhile is not dropped.

Damaged copies (the marker's ``damaged``, written by a live bookie's scrubber) are repaired first,
whatever the ledger's state, because nothing in the metadata changes: each such entry is read from
another replica of its write set (checked against its CRC32C) and added to the damaged bookie with
``recovery=True``, which overwrites the bad copy. An entry that no other replica has either (never
acknowledged: below Qa, or beyond a closed ledger's end) and an entry the bookie no longer holds
under the metadata have nothing to repair and are dropped from the marker, as are the damaged
copies of a bookie that is itself missing (all of its copies are replaced then).

Only CLOSED ledgers are repaired for missing bookies. An OPEN ledger's metadata belongs to its writer: R12 treats any
metadata change it did not make as a fatal conflict, and its last fragment is still being
written. Such a ledger keeps its marker and is deferred: the writer's own ensemble change
replaces a failed bookie in the fragment it writes, and once the ledger is closed — by its writer,
or by the recovery a broker runs when it opens the ledger of a writer that is gone — the worker
(woken by the change of ``/ledgers/{id}``) copies the older fragments. Unlike BookKeeper, the
worker never fences an open ledger itself after a grace period: that would close ledgers under
live, merely idle writers; recovery-on-open in the broker is the one place that decides a writer
is gone. An ``IN_RECOVERY`` ledger is deferred likewise until its recovery closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from magnetar.bookie.autorecovery.underreplication import (
    DECOMMISSIONING,
    UNDERREPLICATED,
    UNDERREPLICATED_LOCKS,
    UnderReplicated,
    available_bookies,
    decommissioning_bookies,
    delete_marker,
    drop_damaged,
    entries_on_slots,
    fragment_ranges,
    lock_path,
    missing_bookies,
    read_marker,
    underreplicated_ledgers,
)
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.ledger.bookie_api import NO_ENTRY, BookieResolver, ReadResult
from magnetar.ledger.distribution import write_set
from magnetar.ledger.metadata_format import Fragment, LedgerMetadata, decode, encode
from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore, Notification
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import (
    BadVersion,
    ChecksumError,
    MagnetarError,
    NoSuchEntry,
    NoSuchLedger,
    NotEnoughBookies,
    NotFound,
)

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 30.0
DEFAULT_RETRY_DELAY = 5.0
DEFAULT_COPY_CONCURRENCY = 64


class Outcome(StrEnum):
    REPAIRED = "repaired"  # the marker is gone: nothing references a missing bookie any more
    DEFERRED = "deferred"  # the ledger is not CLOSED yet; its marker stays
    CHANGED = "changed"  # the marker changed while we worked: look at it again


@dataclass(frozen=True, slots=True)
class Replacement:
    """One slot of one fragment moving from a missing bookie to a new one."""

    first_entry: int
    slot: int
    old: str
    new: str


async def copy_entry(
    resolver: BookieResolver,
    ledger_id: int,
    entry_id: int,
    sources: list[str],
    targets: list[str],
    lac: int,
) -> int:
    """Copy one entry from the first source with a good copy to every target; returns its size.

    The CRC travels with the data: the target recomputes it on add (a bookie refuses a mismatch),
    so a copy can never silently turn a good entry into a bad one."""
    last_error: Exception = NoSuchEntry(f"ledger {ledger_id} entry {entry_id}: no source")
    found: ReadResult | None = None
    for source in sources:
        try:
            result = await resolver.client(source).read_entry(ledger_id, entry_id)
        except Exception as exc:  # a dead or lagging replica: try the next one
            last_error = exc
            continue
        if crc32c(result.data) != result.crc:
            last_error = ChecksumError(f"ledger {ledger_id} entry {entry_id} on {source}: crc mismatch")
            continue
        found = result
        break
    if found is None:
        raise last_error
    await asyncio.gather(
        *(resolver.client(t).add_entry(ledger_id, entry_id, found.data, found.crc, lac, recovery=True) for t in targets)
    )
    return len(found.data)


class ReplicationWorker:
    def __init__(
        self,
        store: MetadataStore,
        resolver: BookieResolver,
        worker_id: str,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        retry_delay: float = DEFAULT_RETRY_DELAY,
        copy_concurrency: int = DEFAULT_COPY_CONCURRENCY,
        metrics: BoundBookieMetrics | None = None,
    ) -> None:
        self._store = store
        self._resolver = resolver
        self.worker_id = worker_id
        self.poll_interval = poll_interval
        self.retry_delay = retry_delay
        self.copy_concurrency = copy_concurrency
        self._metrics = metrics
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._not_before: dict[int, float] = {}  # ledger -> monotonic time before which we skip it
        self.repaired: list[int] = []  # ledgers whose marker this worker removed, in order
        self.deferred: set[int] = set()  # marked ledgers left alone because they are not CLOSED
        self.entries_copied = 0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replication-{self.worker_id}")

    async def stop(self) -> None:
        """Stop; a ledger being repaired is abandoned (its lock released), to be finished by
        another worker. Its fragments already switched stay switched: each was complete."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        unsubscribe = [
            self._store.watch(UNDERREPLICATED, self._on_change),
            self._store.watch(UNDERREPLICATED_LOCKS, self._on_lock),
            self._store.watch(paths.BOOKIES_AVAILABLE, self._on_bookie),
            self._store.watch(DECOMMISSIONING, self._on_change),
            self._store.watch(paths.LEDGERS, self._on_ledger),
        ]
        try:
            while True:
                self._wake.clear()  # before the pass: a change during it triggers another pass
                try:
                    await self.run_once()
                except MagnetarError as exc:  # metadata unavailable or session lost: expected, retry later
                    log.warning("replication worker %s: pass failed: %r", self.worker_id, exc)
                    self._wake.clear()
                except Exception:
                    log.exception("replication worker %s: pass failed", self.worker_id)
                    self._wake.clear()
                now = time.monotonic()
                # Sleep until the next backed-off ledger is due (only future ones: a past entry
                # would turn this wait into a spin), or the poll interval, or a watch event.
                deadline = min([now + self.poll_interval, *(t for t in self._not_before.values() if t > now)])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline - now):
                        await self._wake.wait()
        finally:
            for unsub in unsubscribe:
                unsub()

    def _on_change(self, _note: Notification) -> None:
        self._wake.set()

    def _on_lock(self, note: Notification) -> None:
        if note.kind == "delete":  # a ledger another worker held may still need work
            self._wake.set()

    def _on_bookie(self, note: Notification) -> None:
        if note.kind == "put":  # a new bookie may be the replacement a deferred ledger lacked
            self._not_before.clear()
            self._wake.set()

    def _on_ledger(self, note: Notification) -> None:
        name = note.path.rpartition("/")[2]
        if name.isdigit() and self._not_before.pop(int(name), None) is not None:
            self._wake.set()  # a deferred ledger changed (closed, most likely): try it now

    async def run_once(self) -> int:
        """One pass over the marked ledgers; returns how many this worker repaired."""
        ledgers = await underreplicated_ledgers(self._store)
        marked = set(ledgers)
        self._not_before = {k: t for k, t in self._not_before.items() if k in marked}  # forget finished ones
        self.deferred &= marked
        random.shuffle(ledgers)  # workers starting together spread over different ledgers
        done = 0
        for ledger_id in ledgers:
            if self._not_before.get(ledger_id, 0.0) > time.monotonic():
                continue
            version = await self._lock(ledger_id)
            if version is None:
                continue
            try:
                outcome = await self._repair_until_stable(ledger_id)
            except Exception as exc:
                log.warning("replication worker %s: ledger %d not repaired yet: %r", self.worker_id, ledger_id, exc)
                self._not_before[ledger_id] = time.monotonic() + self.retry_delay
            else:
                if outcome is Outcome.DEFERRED:
                    self.deferred.add(ledger_id)
                    self._not_before[ledger_id] = time.monotonic() + self.poll_interval
                else:
                    self.deferred.discard(ledger_id)
                    self._not_before.pop(ledger_id, None)
                    done += 1
            finally:
                await self._unlock(ledger_id, version)
        return done

    async def _lock(self, ledger_id: int) -> int | None:
        try:
            stat = await self._store.put(lock_path(ledger_id), self.worker_id.encode(), MUST_NOT_EXIST, ephemeral=True)
        except BadVersion:
            return None  # another worker has it
        return stat.version

    async def _unlock(self, ledger_id: int, version: int) -> None:
        try:
            await self._store.delete(lock_path(ledger_id), version)  # only our own lock, if still ours
        except (BadVersion, NotFound):
            pass
        except Exception as exc:  # session gone: the lock is ephemeral and went with it
            log.warning("replication worker %s: lock of ledger %d not released: %r", self.worker_id, ledger_id, exc)

    async def _repair_until_stable(self, ledger_id: int) -> Outcome:
        while True:
            outcome = await self.repair(ledger_id)
            if outcome is not Outcome.CHANGED:
                return outcome

    # --- repairing one ledger ---------------------------------------------------------------

    async def repair(self, ledger_id: int) -> Outcome:
        """Repair one marked ledger (the caller holds its lock; see the module docstring)."""
        found = await read_marker(self._store, ledger_id)
        if found is None:
            return Outcome.REPAIRED  # another worker, or the auditor, finished it
        marker, marker_version = found
        current = await self._store.get(paths.ledger(ledger_id))
        if current is None:  # deleted: nothing left to protect
            await delete_marker(self._store, ledger_id, marker_version)
            return Outcome.REPAIRED
        md = decode(current.value)
        if marker.damaged:
            await self._repair_damaged(ledger_id, md, marker)
            if not await drop_damaged(self._store, ledger_id, marker, marker_version):
                return Outcome.CHANGED
            found = await read_marker(self._store, ledger_id)
            if found is None:
                self.repaired.append(ledger_id)
                log.info("replication worker %s: ledger %d: damaged copies repaired", self.worker_id, ledger_id)
                return Outcome.REPAIRED
            marker, marker_version = found
        available = await available_bookies(self._store)
        decommissioning = await decommissioning_bookies(self._store)
        missing = missing_bookies(marker.missing, available, decommissioning)
        if md.all_bookies() & missing:
            if not md.is_closed:
                return Outcome.DEFERRED
            for fragment, first, last in fragment_ranges(md):
                slots = [s for s, b in enumerate(fragment.bookies) if b in missing]
                if slots:
                    await self._repair_fragment(ledger_id, md, fragment, first, last, slots, missing | decommissioning)
            # Fragments without entries need no copy, only the new bookie in their ensemble.
            after = await self._replace_empty_fragments(ledger_id, missing, decommissioning)
            if after is not None and after.all_bookies() & missing:
                raise NotEnoughBookies(f"ledger {ledger_id} still references {sorted(after.all_bookies() & missing)}")
        if not await delete_marker(self._store, ledger_id, marker_version):
            return Outcome.REPAIRED if await read_marker(self._store, ledger_id) is None else Outcome.CHANGED
        self.repaired.append(ledger_id)
        if self._metrics is not None:
            self._metrics.rereplicated_ledgers.inc()
        log.info("replication worker %s: ledger %d repaired (off %s)", self.worker_id, ledger_id, sorted(missing))
        return Outcome.REPAIRED

    async def _repair_damaged(self, ledger_id: int, md: LedgerMetadata, marker: UnderReplicated) -> None:
        """Copy each damaged entry from another replica back onto the bookie whose copy is bad."""
        lac = md.last_entry_id if md.is_closed else NO_ENTRY
        gone = missing_bookies(
            marker.damaged, await available_bookies(self._store), await decommissioning_bookies(self._store)
        )
        jobs: list[tuple[str, int, list[str]]] = []
        for bookie_id, entries in marker.damaged.items():
            if bookie_id in gone:
                continue  # lost or draining: all its copies are being replaced, the damaged ones too
            for entry_id in sorted(entries):
                if entry_id < 0 or (md.is_closed and entry_id > md.last_entry_id):
                    continue  # not part of the ledger: nobody reads it
                fragment = md.fragment_for(entry_id)
                holders = [fragment.bookies[s] for s in write_set(entry_id, md.ensemble_size, md.write_quorum)]
                if bookie_id not in holders:
                    continue  # a stale copy: the metadata sends readers elsewhere
                jobs.append((bookie_id, entry_id, [h for h in holders if h != bookie_id]))
        pending = iter(jobs)

        async def pump() -> None:
            for bookie_id, entry_id, sources in pending:
                try:
                    await copy_entry(self._resolver, ledger_id, entry_id, sources, [bookie_id], lac)
                except (NoSuchEntry, NoSuchLedger):
                    # No other copy: never acknowledged (fewer than Qa copies), so nothing to restore.
                    log.warning(
                        "replication worker %s: ledger %d entry %d damaged on %s has no other copy",
                        self.worker_id,
                        ledger_id,
                        entry_id,
                        bookie_id,
                    )
                    continue
                self.entries_copied += 1
                if self._metrics is not None:
                    self._metrics.rereplicated_entries.inc()

        await _run_pumps(pump, min(self.copy_concurrency, max(len(jobs), 1)))
        log.info("replication worker %s: ledger %d: %d damaged copies rewritten", self.worker_id, ledger_id, len(jobs))

    async def _choose(self, fragment: Fragment, slots: list[int], excluded: set[str]) -> dict[int, str]:
        writable = await self._resolver.writable_bookies()
        candidates = [b for b in writable if b not in fragment.bookies and b not in excluded]
        if len(candidates) < len(slots):
            raise NotEnoughBookies(
                f"fragment at {fragment.first_entry} ({list(fragment.bookies)}) needs {len(slots)} replacement(s), "
                f"writable candidates: {candidates}"
            )
        return dict(zip(slots, random.sample(candidates, len(slots)), strict=True))

    async def _repair_fragment(
        self,
        ledger_id: int,
        md: LedgerMetadata,
        fragment: Fragment,
        first: int,
        last: int,
        slots: list[int],
        excluded: set[str],
    ) -> None:
        chosen = await self._choose(fragment, slots, excluded)
        entries = entries_on_slots(first, last, slots, md.ensemble_size, md.write_quorum)
        pending = iter(entries)

        async def pump() -> None:
            for entry_id in pending:  # shared iterator: each entry is taken by exactly one pump
                ws = write_set(entry_id, md.ensemble_size, md.write_quorum)
                targets = [chosen[s] for s in ws if s in chosen]
                survivors = [fragment.bookies[s] for s in ws if s not in chosen]
                last_resort = [fragment.bookies[s] for s in ws if s in chosen]  # e.g. a draining bookie
                sources = survivors + last_resort
                await copy_entry(self._resolver, ledger_id, entry_id, sources, targets, md.last_entry_id)
                self.entries_copied += 1
                if self._metrics is not None:
                    self._metrics.rereplicated_entries.inc()

        await _run_pumps(pump, min(self.copy_concurrency, max(len(entries), 1)))
        changes = [Replacement(fragment.first_entry, s, fragment.bookies[s], new) for s, new in chosen.items()]
        await self._switch(ledger_id, changes)
        log.info(
            "replication worker %s: ledger %d fragment %d: %d entries copied, %s",
            self.worker_id,
            ledger_id,
            fragment.first_entry,
            len(entries),
            ", ".join(f"{c.old} -> {c.new}" for c in changes),
        )

    async def _switch(self, ledger_id: int, changes: list[Replacement]) -> LedgerMetadata:
        """Put the replacements into the metadata by compare-and-set, re-applying on conflict.

        A change whose slot no longer holds the old bookie is dropped: someone else replaced it
        already, and overwriting their choice would point readers at a bookie without the data."""
        path = paths.ledger(ledger_id)
        while True:
            current = await self._store.get(path)
            if current is None:
                raise NoSuchLedger(f"ledger {ledger_id} was deleted during its repair")
            md = decode(current.value)
            fragments = list(md.fragments)
            for change in changes:
                for i, fragment in enumerate(fragments):
                    if fragment.first_entry == change.first_entry and fragment.bookies[change.slot] == change.old:
                        bookies = list(fragment.bookies)
                        bookies[change.slot] = change.new
                        fragments[i] = Fragment(fragment.first_entry, tuple(bookies))
            updated = replace(md, fragments=tuple(fragments))
            if updated == md:
                return md
            try:
                await self._store.put(path, encode(updated), current.version)
            except BadVersion:
                continue
            return updated

    async def _replace_empty_fragments(
        self, ledger_id: int, missing: set[str], decommissioning: set[str]
    ) -> LedgerMetadata | None:
        """Replace missing bookies in fragments that hold no entry (nothing to copy), and return
        the resulting metadata (None if the ledger is gone)."""
        current = await self._store.get(paths.ledger(ledger_id))
        if current is None:
            return None
        md = decode(current.value)
        with_entries = {f.first_entry for f, _, _ in fragment_ranges(md)}
        changes: list[Replacement] = []
        for fragment in md.fragments:
            if fragment.first_entry in with_entries:
                continue
            slots = [s for s, b in enumerate(fragment.bookies) if b in missing]
            if slots:
                chosen = await self._choose(fragment, slots, missing | decommissioning)
                changes += [Replacement(fragment.first_entry, s, fragment.bookies[s], n) for s, n in chosen.items()]
        return await self._switch(ledger_id, changes) if changes else md


async def _run_pumps(pump: Callable[[], Coroutine[Any, Any, None]], how_many: int) -> None:
    """Run ``how_many`` copies of ``pump`` at once (they share one iterator of work) and raise the
    first failure itself, not the group that wraps it."""
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(how_many):
                group.create_task(pump())
    except BaseExceptionGroup as failed:
        raise _first_leaf(failed) from None


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real error of a task group, so callers see ``NotConnected``, not a group."""
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
