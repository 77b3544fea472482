"""The scrubber: finds rotten copies on this bookie before a reader does, and has them repaired.

LMDB does not checksum its pages, and a bookie's copy of an entry is read only when a reader
asks for it — perhaps never, until the other replicas are gone too. So, like BookKeeper's
``localScrubPeriod``, every ``interval`` seconds the scrubber walks the whole storage
(``BookieStorage.verify_all``, in a thread: a read transaction does not block the writer):

- every entry value is checked (CRC32C of the data and the key check binding it to its key);
- every ledger state is checked (its own CRC32C);
- damaged copies the metadata no longer sends readers to (the ledger is gone, or its fragment
  was re-replicated elsewhere while this bookie was away) are stale: counted, not repaired;
- for every CLOSED ledger in the metadata, the entries this bookie should hold (its slots of each
  fragment, under the striping rule) are compared with the keys it has: a damaged index can lose
  keys without any value failing a check.

What it finds, and what reads found meanwhile (``storage.damage_listener``), is repaired through
auto-recovery: damaged or missing entries are added to the ledger's under-replication marker as
``damaged: {this bookie: [entries]}`` (``autorecovery/underreplication.py``), and a replication
worker — on any bookie — copies each from a good replica back onto this one, overwriting the bad
copy. A damaged ledger state needs no other bookie: it is rewritten here from the ledger's
metadata (fenced unless the ledger is still OPEN — recovery marks the metadata before it fences,
so an OPEN ledger was never fenced — and LAC = the closed ledger's last entry, else unknown).

The walk runs in a child process (``python -m magnetar.bookie.scrub DIR``, opening the environment
read-only): LMDB answers some damage to its page headers by aborting the process (an assertion in
``mdb.c``), and that must not take the bookie down with it. A broken B-tree — ``MDB_CORRUPTED`` or
a child killed by a signal — fails the storage for good (see ``storage/ledger_storage.py``): the bookie stops
serving and refuses to restart, and the cluster re-replicates its ledgers from the others as for
a lost bookie. ``verify_before_serving`` runs the same walk before a bookie that did not shut down
cleanly starts serving, so that a bookie crashed by its index refuses to start with a clear error
instead of crashing again on the first read.

Metrics: ``magnetar_bookie_scrub_entries`` (verified), ``magnetar_bookie_scrub_corrupt{kind}``
(found), ``magnetar_bookie_scrub_damaged_entries`` (known bad, not yet repaired),
``magnetar_bookie_scrub_repaired`` (bad copies overwritten), ``magnetar_bookie_scrub_runs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

from magnetar.bookie.autorecovery.underreplication import entries_on_slots, fragment_ranges, mark_damaged
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.bookie.storage import BookieStorage, StorageCorrupt, VerifyReport, verify_directory
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.ledger.distribution import write_set
from magnetar.ledger.metadata_format import InvalidLedgerMetadata, LedgerMetadata, LedgerState, decode
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import MagnetarError

log = logging.getLogger(__name__)

STATE = -1  # the "entry id" under which a damaged ledger state is reported
_CORRUPT_EXIT = 3  # the child's exit code when LMDB reported damage to the B-tree


async def verify_isolated(data_dir: str | os.PathLike[str]) -> VerifyReport:
    """``verify_directory`` in a child process. Raises ``StorageCorrupt`` if LMDB reported a broken
    B-tree or the child died by a signal (LMDB aborts on some damage); ``RuntimeError`` if the
    child failed in another way (not evidence of damage)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "magnetar.bookie.scrub",
        os.fspath(data_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    except BaseException:  # cancelled (the bookie stops): do not leave the walk running
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    code = proc.returncode
    assert code is not None
    tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
    if code < 0:
        raise StorageCorrupt(f"LMDB aborted (signal {-code}) walking the B-tree: {tail[0]}")
    if code == _CORRUPT_EXIT:
        raise StorageCorrupt(json.loads(out)["corrupt"])
    if code != 0:
        raise RuntimeError(f"the scrub walk failed (exit {code}): {tail[0]}")
    doc = json.loads(out)
    return VerifyReport(
        int(doc["entries"]),
        int(doc["ledgers"]),
        [(int(x), int(y)) for x, y in doc["damaged_entries"]],
        [int(x) for x in doc["damaged_states"]],
    )


async def verify_before_serving(storage: BookieStorage) -> None:
    """After an unclean shutdown: walk everything (isolated) before serving. A broken B-tree fails
    the storage (leaving ``CORRUPT``) and raises ``StorageCorrupt``; other damage is only logged
    (the scrubber's first pass, which starts with the service, hands it to repair)."""
    try:
        report = await verify_isolated(storage.data_dir)
    except StorageCorrupt as exc:
        storage.fail(str(exc))
        raise StorageCorrupt(
            f"bookie storage in {storage.data_dir} is corrupt ({exc}); it will not serve from it: wipe the "
            "data directory and start with --reprovision (the other bookies hold the replicas)"
        ) from exc
    if report.damaged_entries or report.damaged_states:
        log.warning(
            "bookie storage in %s: %d damaged entries and %d damaged ledger states before serving; the "
            "scrubber hands them to repair",
            storage.data_dir,
            len(report.damaged_entries),
            len(report.damaged_states),
        )


@dataclass(slots=True)
class ScrubReport:
    """One pass: what was checked, found and handed to repair."""

    entries: int = 0
    ledgers: int = 0
    damaged_entries: list[tuple[int, int]] = field(default_factory=list)
    damaged_states: list[int] = field(default_factory=list)
    missing_entries: list[tuple[int, int]] = field(default_factory=list)
    stale_entries: list[tuple[int, int]] = field(default_factory=list)  # damaged, held by others now
    states_restored: int = 0
    marked_ledgers: int = 0
    seconds: float = 0.0


class Scrubber:
    """``interval`` seconds between passes (the first starts at once, or after ``interval`` with
    ``first_pass=False``); ``store`` None: detect and count only (no metadata to repair through)."""

    def __init__(
        self,
        storage: BookieStorage,
        bookie_id: str,
        *,
        interval: float,
        store: MetadataStore | None = None,
        metrics: BoundBookieMetrics | None = None,
        first_pass: bool = True,
    ) -> None:
        self.storage = storage
        self._first_pass = first_pass
        self.bookie_id = bookie_id
        self.interval = interval
        self.store = store
        self._metrics = metrics
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._reported: set[tuple[int, int]] = set()  # found by reads, waiting to be marked
        self.passes = 0
        self.last_report: ScrubReport | None = None
        storage.damage_listener = self._on_damage

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"scrub-{self.bookie_id}")

    async def stop(self) -> None:
        self.storage.damage_listener = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_damage(self, ledger: int, entry: int) -> None:
        """A read found damage: hand it to repair now rather than at the next pass."""
        if (ledger, entry) not in self._reported:
            self._reported.add((ledger, entry))
            self._wake.set()

    async def _run(self) -> None:
        next_pass = time.monotonic() + (0.0 if self._first_pass else self.interval)
        while self.storage.failed is None:
            try:
                if time.monotonic() >= next_pass:
                    await self.scrub_now()
                    next_pass = time.monotonic() + self.interval
                elif self._reported:
                    await self._handle_reported()
            except asyncio.CancelledError:
                raise
            except Exception:  # metadata trouble: the next pass tries again
                log.exception("scrubber %s: pass failed", self.bookie_id)
                next_pass = time.monotonic() + self.interval
            self._wake.clear()
            if self._reported:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_pass - time.monotonic())):
                    await self._wake.wait()

    async def _handle_reported(self) -> None:
        found, self._reported = self._reported, set()
        report = ScrubReport()
        for ledger, entry in sorted(found):
            if entry == STATE:
                report.damaged_states.append(ledger)
            else:
                report.damaged_entries.append((ledger, entry))
        await self._repair(report)

    async def scrub_now(self) -> ScrubReport:
        """One full pass (public so that a test or an operator can force one)."""
        started = time.monotonic()
        try:
            verified = await verify_isolated(self.storage.data_dir)
        except StorageCorrupt as exc:
            log.critical("scrubber %s: the storage's B-tree is broken: %s", self.bookie_id, exc)
            self.storage.fail(str(exc))
            raise
        report = ScrubReport(
            verified.entries, verified.ledgers, list(verified.damaged_entries), list(verified.damaged_states)
        )
        if self.store is not None:
            report.missing_entries = await self._missing_entries()
            report.damaged_entries, report.stale_entries = await self._split_stale(report.damaged_entries)
        self.storage.note_damaged(report.damaged_entries + report.missing_entries)
        m = self._metrics
        if m is not None and m.scrub_entries is not None:
            m.scrub_entries.inc(verified.entries)
            m.scrub_runs.inc()
            for kind, items in (
                ("entry", report.damaged_entries),
                ("state", report.damaged_states),
                ("missing", report.missing_entries),
                ("stale", report.stale_entries),
            ):
                if items:
                    m.scrub_found(kind, len(items))
        await self._repair(report)
        report.seconds = time.monotonic() - started
        self.passes += 1
        self.last_report = report
        if report.damaged_entries or report.damaged_states or report.missing_entries:
            log.warning(
                "scrubber %s: %d entries checked; damaged %s, missing %s, ledger states %s",
                self.bookie_id,
                report.entries,
                report.damaged_entries[:20],
                report.missing_entries[:20],
                report.damaged_states[:20],
            )
        return report

    async def _split_stale(self, damaged: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Damaged copies this bookie still holds under the metadata, and stale ones: the ledger is
        gone, or its fragment was re-replicated elsewhere while the bookie was away. Nobody reads a
        stale copy, so it needs no repair (removing it is garbage collection, not done yet)."""
        assert self.store is not None
        held: list[tuple[int, int]] = []
        stale: list[tuple[int, int]] = []
        cache: dict[int, LedgerMetadata | None] = {}
        for ledger, entry in damaged:
            if ledger not in cache:
                current = await self.store.get(paths.ledger(ledger))
                try:
                    cache[ledger] = decode(current.value) if current is not None else None
                except InvalidLedgerMetadata:
                    cache[ledger] = None
            md = cache[ledger]
            if md is None:
                stale.append((ledger, entry))
                continue
            if md.is_closed and entry > md.last_entry_id:
                stale.append((ledger, entry))
                continue
            fragment = md.fragment_for(entry)
            holders = [fragment.bookies[s] for s in write_set(entry, md.ensemble_size, md.write_quorum)]
            (held if self.bookie_id in holders else stale).append((ledger, entry))
        return held, stale

    async def _missing_entries(self) -> list[tuple[int, int]]:
        """Entries the metadata of closed ledgers says this bookie holds but its index lacks."""
        assert self.store is not None
        missing: list[tuple[int, int]] = []
        for ledger in await self.storage.ledgers():
            current = await self.store.get(paths.ledger(ledger))
            if current is None:
                continue  # deleted (garbage for a future sweep) or not yet recorded
            try:
                md = decode(current.value)
            except InvalidLedgerMetadata:
                continue
            if not md.is_closed:
                continue  # its writer is still adding: absent entries may simply be on their way
            for fragment, first, last in fragment_ranges(md):
                slots = [s for s, b in enumerate(fragment.bookies) if b == self.bookie_id]
                if not slots:
                    continue
                expected = entries_on_slots(first, last, slots, md.ensemble_size, md.write_quorum)
                have = set(await asyncio.to_thread(self.storage.entry_ids, ledger, first, last))
                missing += [(ledger, e) for e in expected if e not in have]
        return missing

    async def _repair(self, report: ScrubReport) -> None:
        if self.store is None:
            return
        for ledger in report.damaged_states:
            if await self._restore_state(ledger):
                report.states_restored += 1
        by_ledger: dict[int, set[int]] = {}
        for ledger, entry in [*report.damaged_entries, *report.missing_entries]:
            by_ledger.setdefault(ledger, set()).add(entry)
        for ledger, entries in sorted(by_ledger.items()):
            try:
                if await mark_damaged(self.store, ledger, self.bookie_id, entries):
                    report.marked_ledgers += 1
            except MagnetarError as exc:  # metadata unavailable: the next pass finds it again
                log.warning("scrubber %s: could not mark ledger %d: %r", self.bookie_id, ledger, exc)

    async def _restore_state(self, ledger: int) -> bool:
        current = await self.store.get(paths.ledger(ledger)) if self.store is not None else None
        if current is None:
            return False  # no metadata: leave it (reads as fenced, which refuses nothing it should take)
        md = decode(current.value)
        fenced = md.state is not LedgerState.OPEN
        lac = md.last_entry_id if md.is_closed else NO_ENTRY
        restored = await self.storage.restore_state(ledger, fenced, lac)
        if restored:
            self.storage.note_repaired_state(ledger)
            log.warning("scrubber %s: ledger %d state restored (%s, %d)", self.bookie_id, ledger, fenced, lac)
        return restored


def _main(argv: list[str]) -> int:
    """The child of ``verify_isolated``: walk one data directory, print the report as JSON. Every
    LMDB error that means damage (``lmdb_engine.CORRUPTION``, the storage's own list) says corrupt."""
    from magnetar.bookie.storage.lmdb_engine import CORRUPTION

    try:
        report = verify_directory(argv[0])
    except CORRUPTION as exc:
        print(json.dumps({"corrupt": f"LMDB reported damage walking the B-tree: {exc!r}"}))
        return _CORRUPT_EXIT
    doc = {
        "entries": report.entries,
        "ledgers": report.ledgers,
        "damaged_entries": report.damaged_entries,
        "damaged_states": report.damaged_states,
    }
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
