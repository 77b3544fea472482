"""Decommission: drain a live bookie's ledgers onto others before it is removed.

The drain reuses auto-recovery instead of copying by itself: it flags the bookie
(``/bookies/decommissioning/{id}``), marks every ledger that references it under-replicated, and
waits for the replication workers to move each fragment away. The bookie stays up meanwhile and
serves as a copy source of last resort, so the drain works even where the bookie holds the only
good copy of an entry. Because the flag is persistent, the auditor's periodic audit keeps marking
ledgers that land on the bookie later (it should be made read-only or kept out of new ensembles
by the operator, which is what the Kubernetes scale-down does by stopping writes first).

Open ledgers cannot be drained until they are closed (see ``replication.py``): a drain that
times out names the ledgers still referencing the bookie, typically a topic's current ledger,
which closes at its next roll-over or when its topic is unloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from magnetar.bookie.autorecovery.underreplication import (
    DECOMMISSIONING,
    decommissioning_bookies,
    decommissioning_path,
    ledgers_referencing,
    mark_underreplicated,
    read_marker,
    scan_ledgers,
    underreplicated_count,
)
from magnetar.ledger.bookie_api import BookieResolver
from magnetar.metadata import paths
from magnetar.metadata.store import ANY_VERSION, MetadataStore, Notification
from magnetar.protocol.errors import NotEnoughBookies, NotFound, Timeout

__all__ = [
    "DecommissionReport",
    "DecommissionTimeout",
    "cancel_decommission",
    "decommission",
    "decommissioning",
    "underreplicated_count",  # re-exported: what an operator checks before and after a drain
]

DEFAULT_POLL_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class DecommissionReport:
    bookie_id: str
    ledgers_marked: int  # ledgers that referenced the bookie at some point of the drain
    remaining: tuple[int, ...]  # ledgers still referencing it (empty when the drain finished)
    elapsed_seconds: float

    @property
    def complete(self) -> bool:
        return not self.remaining


class DecommissionTimeout(Timeout):
    """The drain did not finish in time; ``report.remaining`` says which ledgers are left. The
    bookie stays flagged, so the workers go on and a later call can wait for the rest."""

    def __init__(self, report: DecommissionReport) -> None:
        super().__init__(
            f"bookie {report.bookie_id} still referenced by {len(report.remaining)} ledger(s) after "
            f"{report.elapsed_seconds:.1f}s: {list(report.remaining[:20])}"
        )
        self.report = report


async def decommission(
    store: MetadataStore,
    resolver: BookieResolver,
    bookie_id: str,
    *,
    timeout: float,  # noqa: ASYNC109 - the drain's deadline is part of its API (the CLI passes it)
    poll_interval: float = DEFAULT_POLL_INTERVAL,
) -> DecommissionReport:
    """Drain ``bookie_id``; returns when no ledger references it (then it may be removed).

    Refuses with ``NotEnoughBookies`` before changing anything if the remaining writable bookies
    could not hold the widest ensemble that uses it (a fragment needs E distinct bookies), since
    the drain could then never finish. Raises ``DecommissionTimeout`` after ``timeout`` seconds."""
    started = time.monotonic()
    widths = [md.ensemble_size for _, md in await scan_ledgers(store) if bookie_id in md.all_bookies()]
    if widths:
        widest = max(widths)
        others = set(await resolver.writable_bookies()) - {bookie_id} - await decommissioning_bookies(store)
        if len(others) < widest:
            raise NotEnoughBookies(
                f"cannot drain {bookie_id}: its ledgers need ensembles of {widest}, but only "
                f"{len(others)} other writable bookie(s) remain: {sorted(others)}"
            )
    await store.put(decommissioning_path(bookie_id), b"{}", ANY_VERSION)
    changed = asyncio.Event()

    def on_change(_note: Notification) -> None:
        changed.set()

    unsubscribe = [store.watch(paths.LEDGERS, on_change), store.watch(paths.UNDERREPLICATED, on_change)]
    marked: set[int] = set()
    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + timeout) as deadline:
            while True:
                changed.clear()
                referencing = await ledgers_referencing(store, {bookie_id})
                if not referencing and not await _still_marked(store, marked, bookie_id):
                    # Also wait for the workers to drop their markers, so that a caller who
                    # removes the bookie next finds the under-replicated count back where it was.
                    return DecommissionReport(bookie_id, len(marked), (), time.monotonic() - started)
                for ledger_id in referencing:
                    # Re-marking is a no-op unless a marker was cleared or a new ledger appeared.
                    await mark_underreplicated(store, ledger_id, {bookie_id})
                    marked.add(ledger_id)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_interval):
                        await changed.wait()
    except TimeoutError:
        if not deadline.expired():
            raise
        remaining = tuple(sorted(await ledgers_referencing(store, {bookie_id})))
        report = DecommissionReport(bookie_id, len(marked), remaining, time.monotonic() - started)
        raise DecommissionTimeout(report) from None
    finally:
        for unsub in unsubscribe:
            unsub()


async def _still_marked(store: MetadataStore, ledgers: set[int], bookie_id: str) -> bool:
    for ledger_id in ledgers:
        found = await read_marker(store, ledger_id)
        if found is not None and bookie_id in found[0].missing:
            return True
    return False


async def cancel_decommission(store: MetadataStore, bookie_id: str) -> None:
    """Take the flag off (the bookie may hold new ledgers again). Ledgers already moved stay moved."""
    with contextlib.suppress(NotFound):
        await store.delete(decommissioning_path(bookie_id))


async def decommissioning(store: MetadataStore) -> list[str]:
    return sorted(await store.children(DECOMMISSIONING))
