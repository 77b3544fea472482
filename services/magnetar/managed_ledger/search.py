"""Finding an entry by a key that grows along the log (Pulsar's ManagedCursor.findNewestMatching).

Seeking by publish time, resetting a cursor to a timestamp and expiring messages by age all look
for the first entry whose key (its publish time) reaches a target. The key is non-decreasing for
one producer but only roughly so across producers (clocks and batching delays differ), so:

1. a binary search over the stored entries as if the key were sorted (log2(n) one-entry reads)
   finds the candidate, the lower bound: the entry just before it is below the target. With
   sorted keys this is exact, and it is all Pulsar does.
2. then a bounded walk back over the entries before the candidate, in log order, looking for
   entries that reach the target too (another producer's message logged before a slightly older
   one): the answer moves back to the earliest of them. The walk stops at the first entry whose
   key is more than ``slack`` below the target (disorder is assumed to stay within ``slack``) or
   after ``walk_back_limit`` entries, so it costs a bounded number of reads, and the answer errs
   towards an earlier entry: a consumer sees a message again rather than never.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.managed_ledger.position import Position

if TYPE_CHECKING:
    from magnetar.managed_ledger.ledger import ManagedLedger

# Entries read per request while walking back.
_WALK_CHUNK = 64


class _Index:
    """Stored entries numbered 0..n-1 across ledgers, to binary-search on a plain index."""

    def __init__(self, ml: ManagedLedger) -> None:
        self.ml = ml
        self.ledgers: list[int] = []
        self.starts: list[int] = []  # global index of each ledger's entry 0
        n = 0
        for lid in ml.ledger_ids:
            entries = ml.entries_in(lid)
            if entries > 0:
                self.ledgers.append(lid)
                self.starts.append(n)
                n += entries
        self.size = n

    def position(self, i: int) -> Position:
        k = bisect.bisect_right(self.starts, i) - 1
        return Position(self.ledgers[k], i - self.starts[k])

    async def read(self, first: int, last: int) -> list[bytes]:
        """The entries with global indexes ``first..last`` (inclusive), in order."""
        out: list[bytes] = []
        i = first
        while i <= last:
            got = await self.ml.read_entries(self.position(i), last - i + 1)
            if not got:
                break
            out.extend(data for _, data in got)
            i += len(got)
        return out


async def first_reaching(
    ml: ManagedLedger,
    key: Callable[[bytes], int],
    target: int,
    *,
    slack: int = 1000,
    walk_back_limit: int = 1000,
) -> Position | None:
    """The first stored entry whose ``key`` is at least ``target`` (module docstring for what
    "first" means when keys are out of order), or None when no entry reaches it."""
    index = _Index(ml)
    lo, hi = 0, index.size
    while lo < hi:
        mid = (lo + hi) // 2
        got = await index.read(mid, mid)
        if got and key(got[0]) >= target:
            hi = mid
        else:
            lo = mid + 1
    best = lo
    i = lo
    floor = max(0, lo - walk_back_limit)
    while i > floor:
        first = max(floor, i - _WALK_CHUNK)
        chunk = await index.read(first, i - 1)
        if len(chunk) != i - first:
            break  # a read fell short: keep what is known
        i = first
        for offset in range(len(chunk) - 1, -1, -1):
            k = key(chunk[offset])
            if k >= target:
                best = first + offset
            elif k < target - slack:
                i = floor  # past the disorder: stop
                break
    return index.position(best) if best < index.size else None
