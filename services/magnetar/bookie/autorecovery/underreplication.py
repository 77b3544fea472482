"""Under-replication records shared by the auditor, the replication workers and decommission.

Auto-recovery (in the manner of BookKeeper's auditor and replication workers) talks
only through the metadata store, so that any bookie process can take any role and a crash of one
loses nothing but the work in flight:

- ``/underreplicated/{ledger}``: a marker, JSON ``{"missing": [bookie ids], "since": ms}``. The
  auditor (a lost bookie) and ``decommission`` (a bookie being drained) write it; a replication
  worker deletes it once no fragment of the ledger references a missing bookie. Updates are
  compare-and-set merges, so a marker written by the auditor and one written by decommission for
  the same ledger end up as the union, and a worker's delete loses to a concurrent addition (the
  worker then sees the new bookie and goes on).
- The same marker also carries damaged copies: ``"damaged": {bookie id: [entry ids]}``, written by
  a live bookie's scrubber (``bookie/scrub.py``) when its copy of an entry fails its checksum or
  its index lost the entry. The bookie is not missing, so nothing moves: a worker copies each such
  entry from another replica back onto that bookie (overwriting the bad copy). A marker with
  damaged entries is never cleared by the auditor, only by a worker that repaired them.
- ``/underreplicated-locks/{ledger}``: an ephemeral key (``MUST_NOT_EXIST``) held by the one worker
  repairing the ledger; it vanishes with that worker's session if the worker dies.
- ``/bookies/decommissioning/{id}``: a persistent flag. A flagged bookie counts as missing even
  while it is registered (so the auditor never clears its markers and workers never pick it as a
  replacement) but stays usable as a copy source. It stays until ``cancel_decommission``.

A missing bookie is one that is referenced by a ledger and is either not registered under
``/bookies/available`` or flagged for decommission. A bookie that registers again is not
missing: its cookie guarantees it came back with the disk it had, so its replicas are intact.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from magnetar.ledger.distribution import contains_slot
from magnetar.ledger.metadata_format import Fragment, InvalidLedgerMetadata, LedgerMetadata, decode
from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore, Versioned
from magnetar.protocol.errors import BadVersion, NotFound

UNDERREPLICATED = paths.UNDERREPLICATED
UNDERREPLICATED_LOCKS = "/underreplicated-locks"
DECOMMISSIONING = f"{paths.BOOKIES}/decommissioning"


def lock_path(ledger_id: int) -> str:
    return f"{UNDERREPLICATED_LOCKS}/{int(ledger_id)}"


def decommissioning_path(bookie_id: str) -> str:
    return paths.join("bookies", "decommissioning", bookie_id)


@dataclass(frozen=True, slots=True)
class UnderReplicated:
    """The marker of one ledger: which bookies it lost, and since when (ms since the epoch)."""

    missing: frozenset[str]
    since: int
    damaged: Mapping[str, frozenset[int]] = field(default_factory=dict)  # bookie -> entries with bad copies

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {"missing": sorted(self.missing), "since": self.since}
        if self.damaged:  # absent when there is none: markers read as before
            doc["damaged"] = {b: sorted(e) for b, e in sorted(self.damaged.items()) if e}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> UnderReplicated:
        """Unknown keys are ignored (the format may grow); a malformed marker is a ``ValueError``."""
        try:
            doc = json.loads(raw)
            damaged = {str(b): frozenset(int(e) for e in es) for b, es in dict(doc.get("damaged") or {}).items()}
            missing = frozenset(str(b) for b in doc["missing"])
            return cls(missing, int(doc.get("since", 0)), {b: e for b, e in damaged.items() if e})
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed under-replication marker {raw[:80]!r}: {exc}") from exc


def now_ms() -> int:
    return int(time.time() * 1000)


# --- pure rules -------------------------------------------------------------------------------


def missing_bookies(
    candidates: Iterable[str], available: Collection[str], decommissioning: Collection[str]
) -> set[str]:
    """The bookies among ``candidates`` that must be replaced (see the module docstring)."""
    return {b for b in candidates if b not in available or b in decommissioning}


def fragment_ranges(md: LedgerMetadata) -> Iterator[tuple[Fragment, int, int]]:
    """``(fragment, first, last)`` for each fragment of a CLOSED ledger that holds entries.

    A fragment ends where the next begins; the last one ends at ``last_entry_id``. Fragments with no
    entries (an ensemble change after the last add) are skipped: they have nothing to copy."""
    for index, fragment in enumerate(md.fragments):
        end = md.fragments[index + 1].first_entry - 1 if index + 1 < len(md.fragments) else md.last_entry_id
        end = min(end, md.last_entry_id)
        if end >= fragment.first_entry:
            yield fragment, fragment.first_entry, end


def entries_on_slots(first: int, last: int, slots: Collection[int], ensemble_size: int, write_quorum: int) -> list[int]:
    """Entries of ``first..last`` that any of ``slots`` stores under the striping rule (R6)."""
    return [e for e in range(first, last + 1) if any(contains_slot(e, s, ensemble_size, write_quorum) for s in slots)]


# --- store helpers ----------------------------------------------------------------------------


async def _merge_marker(
    store: MetadataStore,
    ledger_id: int,
    fresh: Callable[[], UnderReplicated],
    merge: Callable[[UnderReplicated], UnderReplicated | None],
) -> bool:
    """Create the ledger's marker (``fresh``) or merge into it (``merge``: None when it already
    says all of it). A compare-and-set loop, so concurrent markers (auditor, decommission,
    scrubber) merge instead of overwriting each other. Returns True if the marker changed."""
    path = paths.underreplicated(ledger_id)
    while True:
        current = await store.get(path)
        if current is None:
            try:
                await store.put(path, fresh().to_bytes(), MUST_NOT_EXIST)
            except BadVersion:
                continue
            return True
        merged = merge(_decode_marker(current))
        if merged is None:
            return False
        try:
            await store.put(path, merged.to_bytes(), current.version)
        except BadVersion:
            continue
        return True


async def mark_underreplicated(store: MetadataStore, ledger_id: int, bookies: Iterable[str]) -> bool:
    """Add ``bookies`` to the ledger's marker (creating it). Returns True if the marker changed;
    ``since`` keeps the first marking time."""
    wanted = frozenset(bookies)

    def merge(marker: UnderReplicated) -> UnderReplicated | None:
        if wanted <= marker.missing:
            return None
        return UnderReplicated(marker.missing | wanted, marker.since or now_ms(), marker.damaged)

    return await _merge_marker(store, ledger_id, lambda: UnderReplicated(wanted, now_ms()), merge)


async def mark_damaged(store: MetadataStore, ledger_id: int, bookie_id: str, entries: Iterable[int]) -> bool:
    """Add ``bookie_id``'s damaged ``entries`` to the ledger's marker (creating it). Returns True if
    the marker changed."""
    wanted = frozenset(entries)

    def merge(marker: UnderReplicated) -> UnderReplicated | None:
        have = marker.damaged.get(bookie_id, frozenset())
        if wanted <= have:
            return None
        damaged = {**marker.damaged, bookie_id: have | wanted}
        return UnderReplicated(marker.missing, marker.since or now_ms(), damaged)

    return await _merge_marker(
        store, ledger_id, lambda: UnderReplicated(frozenset(), now_ms(), {bookie_id: wanted}), merge
    )


async def drop_damaged(store: MetadataStore, ledger_id: int, marker: UnderReplicated, version: int) -> bool:
    """After the damaged copies were repaired: remove them from the marker at ``version`` (deleting
    it if nothing else is in it). False if the marker changed meanwhile (look again)."""
    if not marker.missing:
        return await delete_marker(store, ledger_id, version)
    try:
        await store.put(
            paths.underreplicated(ledger_id), UnderReplicated(marker.missing, marker.since).to_bytes(), version
        )
    except (BadVersion, NotFound):
        return False
    return True


async def read_marker(store: MetadataStore, ledger_id: int) -> tuple[UnderReplicated, int] | None:
    """The marker and its version, or None."""
    current = await store.get(paths.underreplicated(ledger_id))
    return None if current is None else (_decode_marker(current), current.version)


async def delete_marker(store: MetadataStore, ledger_id: int, version: int) -> bool:
    """Delete the marker if it is still at ``version``; False when it changed (someone added a
    bookie: the caller must look again) or was already gone."""
    try:
        await store.delete(paths.underreplicated(ledger_id), version)
    except (BadVersion, NotFound):
        return False
    return True


def _decode_marker(current: Versioned) -> UnderReplicated:
    try:
        return UnderReplicated.from_bytes(current.value)
    except ValueError:
        # An unreadable marker still says "look at this ledger": treat it as naming no bookie, so
        # the next audit or worker rewrites or clears it from the ledger's actual metadata.
        return UnderReplicated(frozenset(), 0)


async def underreplicated_ledgers(store: MetadataStore) -> list[int]:
    return sorted(int(name) for name in await store.children(UNDERREPLICATED) if name.isdigit())


async def underreplicated_count(store: MetadataStore) -> int:
    """How many ledgers are marked under-replicated right now (the figure operators gate on)."""
    return len(await underreplicated_ledgers(store))


async def available_bookies(store: MetadataStore) -> set[str]:
    return set(await store.children(paths.BOOKIES_AVAILABLE))


async def decommissioning_bookies(store: MetadataStore) -> set[str]:
    return set(await store.children(DECOMMISSIONING))


async def scan_ledgers(store: MetadataStore) -> list[tuple[int, LedgerMetadata]]:
    """Every ledger's metadata, skipping records that vanish or cannot be decoded meanwhile.

    It reads each record once per scan: fine for thousands of ledgers; a cluster with millions
    would want an index from bookie to ledgers, as BookKeeper keeps."""
    found: list[tuple[int, LedgerMetadata]] = []
    for name in await store.children(paths.LEDGERS):
        if not name.isdigit():
            continue
        current = await store.get(paths.ledger(int(name)))
        if current is None:
            continue
        try:
            found.append((int(name), decode(current.value)))
        except InvalidLedgerMetadata:
            continue  # not ours to judge; the ledger layer refuses it too
    return found


async def ledgers_referencing(store: MetadataStore, bookies: Collection[str]) -> dict[int, set[str]]:
    """For each ledger with a fragment containing any of ``bookies``: which of them it references."""
    out: dict[int, set[str]] = {}
    for ledger_id, md in await scan_ledgers(store):
        hit = md.all_bookies() & set(bookies)
        if hit:
            out[ledger_id] = hit
    return out
