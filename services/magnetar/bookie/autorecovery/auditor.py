"""The auditor: notices lost bookies and marks their ledgers under-replicated.

Election. Every bookie runs a candidate; the one that creates the ephemeral key
``/bookies/auditor`` (``MUST_NOT_EXIST``) audits, the others watch the key and try again when it
is deleted — by the leader's ``stop``, or by the store when the leader's session ends (process
death, lease expiry). One auditor, so one scan per lost bookie instead of one per survivor, and
markers are written by one party (they are compare-and-set merges anyway, so a brief overlap
while an expired leader has not yet noticed is harmless). A leader that sees its key deleted
steps down at once and stands again.

Lost bookies. The leader watches ``/bookies/available``. A registration that disappears starts a
grace period (``grace_period``): a bookie restarting or briefly partitioned from the store comes
back with its disk intact (its cookie says so), and copying its ledgers would be wasted work. If
it is still absent when the grace period ends, every ledger with a fragment containing it is
marked ``/underreplicated/{ledger}`` (see ``underreplication.py``). A bookie flagged for
decommission counts as missing at once, without grace.

Re-checks. Every ``recheck_interval`` (and when it becomes leader) the auditor scans every ledger:
referenced bookies that are absent are marked (after their grace period), markers of deleted
ledgers are removed, and markers whose missing bookies have all come back are cleared — the
replicas are there again, so the copy the workers would make is not needed. Watches can be lost
(an etcd watch that reconnects after compaction), so the scan is also the safety net that makes
the auditor level-triggered rather than edge-triggered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass

from magnetar.bookie.autorecovery.underreplication import (
    UNDERREPLICATED,
    available_bookies,
    decommissioning_bookies,
    delete_marker,
    ledgers_referencing,
    mark_underreplicated,
    missing_bookies,
    read_marker,
    scan_ledgers,
    underreplicated_count,
    underreplicated_ledgers,
)
from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore, Notification
from magnetar.protocol.errors import BadVersion, MagnetarError

log = logging.getLogger(__name__)

AUDITOR_PATH = f"{paths.BOOKIES}/auditor"
DEFAULT_GRACE_PERIOD = 5.0
DEFAULT_RECHECK_INTERVAL = 60.0
_STORE_RETRY_DELAY = 1.0  # after a metadata error, before the loop tries again


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What one full audit found and did."""

    lost: frozenset[str]  # referenced, absent past their grace period (or decommissioning)
    waiting: frozenset[str]  # referenced, absent, still inside their grace period
    marked: int  # markers created or extended
    cleared: int  # markers removed (bookies back, or ledger deleted)


async def current_auditor(store: MetadataStore) -> str | None:
    """The bookie id of the elected auditor, or None while there is none."""
    current = await store.get(AUDITOR_PATH)
    if current is None:
        return None
    try:
        return str(json.loads(current.value)["auditor"])
    except (ValueError, KeyError, TypeError):
        return None


class Auditor:
    """One auditor candidate. ``start`` stands for election; ``stop`` resigns (deleting the key, so
    another candidate takes over without waiting for a session to expire)."""

    def __init__(
        self,
        store: MetadataStore,
        candidate_id: str,
        *,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
        metrics: BoundBookieMetrics | None = None,
    ) -> None:
        self._store = store
        self.candidate_id = candidate_id
        self.grace_period = grace_period
        self.recheck_interval = recheck_interval
        self._metrics = metrics
        # The instance nonce tells this candidate's key from one left by an earlier process of the
        # same bookie whose session has not expired yet: that one is not ours to audit with.
        self._value = json.dumps({"auditor": candidate_id, "instance": uuid.uuid4().hex}).encode()
        self._version: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._lost_leadership = asyncio.Event()
        self._absent_since: dict[str, float] = {}  # monotonic time each absence was first seen
        self._handled: set[str] = set()  # absent past grace and already marked
        self._count_dirty = True
        self.elected = asyncio.Event()  # set while leading (tests and callers may wait on it)
        self.terms = 0  # how many times this candidate has been elected

    @property
    def is_leader(self) -> bool:
        return self.elected.is_set()

    @property
    def pending_losses(self) -> dict[str, float]:
        """Absent bookies still inside their grace period, with the monotonic time they went."""
        return {b: t for b, t in self._absent_since.items() if b not in self._handled}

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"auditor-{self.candidate_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._resign()

    # --- election ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._elect()
                await self._lead()
            except asyncio.CancelledError:
                raise
            except MagnetarError as exc:  # metadata unavailable or session lost: expected, stand again
                log.warning("auditor %s: %r; standing again shortly", self.candidate_id, exc)
                await self._resign()
                await asyncio.sleep(_STORE_RETRY_DELAY)  # back-off before retrying a failing store
            except Exception:
                log.exception("auditor %s: metadata error, standing again shortly", self.candidate_id)
                await self._resign()
                await asyncio.sleep(_STORE_RETRY_DELAY)  # back-off before retrying a failing store

    async def _elect(self) -> None:
        vacated = asyncio.Event()

        def on_change(note: Notification) -> None:
            if note.kind == "delete" and note.path == AUDITOR_PATH:
                vacated.set()

        unsubscribe = self._store.watch(AUDITOR_PATH, on_change)
        try:
            while True:
                vacated.clear()  # before trying, so a delete right after a failed try is not missed
                try:
                    stat = await self._store.put(AUDITOR_PATH, self._value, MUST_NOT_EXIST, ephemeral=True)
                except BadVersion:
                    # Somebody leads. Wait for the key to go; the timeout only covers a lost watch.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.recheck_interval):
                            await vacated.wait()
                    continue
                self._version = stat.version
                return
        finally:
            unsubscribe()

    async def _resign(self) -> None:
        """Give the key up (only our own version of it) and forget the leader's state."""
        version, self._version = self._version, None
        was_leader = self.elected.is_set()
        self.elected.clear()
        self._absent_since.clear()
        self._handled.clear()
        if was_leader and self._metrics is not None:
            self._metrics.stop_auditing()
        if version is not None:
            with contextlib.suppress(Exception):  # gone, taken over, or the store is down
                await self._store.delete(AUDITOR_PATH, version)

    # --- leading ----------------------------------------------------------------------------

    async def _lead(self) -> None:
        self._lost_leadership.clear()
        unsubscribe = [
            self._store.watch(AUDITOR_PATH, self._on_auditor_key),
            self._store.watch(paths.BOOKIES_AVAILABLE, self._on_registration),
            self._store.watch(UNDERREPLICATED, self._on_marker),
        ]
        self.terms += 1
        self.elected.set()
        log.info("auditor: %s elected (term %d)", self.candidate_id, self.terms)
        try:
            await self.audit_now()
            next_audit = time.monotonic() + self.recheck_interval
            while not self._lost_leadership.is_set():
                now = time.monotonic()
                if now >= next_audit:
                    await self.audit_now()
                    next_audit = time.monotonic() + self.recheck_interval
                    continue
                due = [b for b, t in self.pending_losses.items() if now - t >= self.grace_period]
                if due:
                    await self._handle_losses(due)
                    continue
                if self._count_dirty:
                    await self._publish_count()
                    continue
                deadlines = [next_audit, *(t + self.grace_period for t in self.pending_losses.values())]
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, min(deadlines) - time.monotonic())):
                        await self._wake.wait()
        finally:
            for unsub in unsubscribe:
                unsub()
            self.elected.clear()
            if self._metrics is not None:
                self._metrics.stop_auditing()
        log.warning("auditor: %s lost its key, standing again", self.candidate_id)
        self._version = None  # the key is gone (or another's): never delete it in _resign
        self._absent_since.clear()
        self._handled.clear()

    def _on_auditor_key(self, note: Notification) -> None:
        if note.path == AUDITOR_PATH and note.kind == "delete":
            self._lost_leadership.set()
            self._wake.set()

    def _on_registration(self, note: Notification) -> None:
        bookie_id = note.path.rpartition("/")[2]
        if note.kind == "delete":
            self._absent_since.setdefault(bookie_id, time.monotonic())
        else:  # back (or new): a returning bookie brings its replicas back with it
            self._absent_since.pop(bookie_id, None)
            self._handled.discard(bookie_id)
        self._wake.set()

    def _on_marker(self, _note: Notification) -> None:
        self._count_dirty = True
        self._wake.set()

    async def _publish_count(self) -> None:
        self._count_dirty = False
        count = await underreplicated_count(self._store)
        if self._metrics is not None and self.is_leader:
            self._metrics.lead_audits(count)

    async def _handle_losses(self, due: list[str]) -> None:
        """The grace period of ``due`` ended: mark their ledgers if they are still absent."""
        available = await available_bookies(self._store)
        lost = [b for b in due if b not in available]
        for bookie_id in due:
            if bookie_id in available:  # came back; the watch may not have told us yet
                self._absent_since.pop(bookie_id, None)
        if not lost:
            return
        marked = 0
        for ledger_id, hit in (await ledgers_referencing(self._store, lost)).items():
            marked += await mark_underreplicated(self._store, ledger_id, hit)
        self._handled.update(lost)
        log.warning("auditor: bookies %s lost; %d ledgers marked under-replicated", sorted(lost), marked)

    async def audit_now(self) -> AuditReport:
        """One full pass over every ledger and marker (see the module docstring). Public so that
        an operator tool or a test can force a check instead of waiting for the timer."""
        now = time.monotonic()
        available = await available_bookies(self._store)
        decommissioning = await decommissioning_bookies(self._store)
        ledgers = await scan_ledgers(self._store)
        referenced = {b for _, md in ledgers for b in md.all_bookies()}
        absent = missing_bookies(referenced, available, ())
        for bookie_id in absent:
            self._absent_since.setdefault(bookie_id, now)
        for bookie_id in list(self._absent_since):
            if bookie_id in available:
                self._absent_since.pop(bookie_id)
                self._handled.discard(bookie_id)
        past_grace = {b for b in absent if b in self._handled or now - self._absent_since[b] >= self.grace_period}
        lost = past_grace | (decommissioning & referenced)
        self._handled.update(past_grace)
        marked = 0
        by_id = dict(ledgers)
        for ledger_id, md in ledgers:
            hit = md.all_bookies() & lost
            if hit:
                marked += await mark_underreplicated(self._store, ledger_id, hit)
        cleared = 0
        for ledger_id in await underreplicated_ledgers(self._store):
            found = await read_marker(self._store, ledger_id)
            if found is None:
                continue
            marker, version = found
            marked_md = by_id.get(ledger_id)
            if marked_md is None:
                if await self._store.exists(paths.ledger(ledger_id)):
                    continue  # created after our scan: look again next time
                cleared += await delete_marker(self._store, ledger_id, version)
                continue
            referenced_now = marked_md.all_bookies()
            still = missing_bookies(marker.missing & referenced_now, available, decommissioning)
            # Only bookies still referenced matter: a worker may have replaced some already.
            # A marker naming nothing missing is done (bookies came back, or the worker finished
            # but crashed before deleting it). Absent bookies not yet past grace keep it too.
            # Damaged copies on live bookies are the workers' to repair, never cleared here.
            if not still and not (referenced_now & lost) and not marker.damaged:
                cleared += await delete_marker(self._store, ledger_id, version)
        self._count_dirty = True
        waiting = frozenset(absent - past_grace)
        if marked or cleared:
            log.info("auditor: audit marked %d and cleared %d ledgers (lost %s)", marked, cleared, sorted(lost))
        return AuditReport(frozenset(lost), waiting, marked, cleared)
