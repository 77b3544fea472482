"""Key_Shared consumer selectors: which consumer owns each of the 65536 key-hash slots.

``AutoSplitSelector`` is Pulsar's ``HashRangeAutoSplitStickyKeyConsumerSelector``. Ranges are kept
as their inclusive upper bounds, each owned by one consumer; a slot belongs to the range with the
smallest upper bound at or above it. The first consumer owns everything (upper bound 65536). A
consumer that joins splits the largest range (the lowest one among equals) and takes its LOWER
half: ``split = upper - (upper - lower) // 2`` becomes its upper bound, as Pulsar does. A consumer
that leaves gives its slots to the range above it, except the one owning the top range, whose
slots go to the range below it (that range's owner takes over the top bound).

``StickySelector`` is Pulsar's ``HashRangeExclusiveStickyKeyConsumerSelector``: each consumer
declares inclusive ranges; a range overlapping another consumer's is refused with ConsumerBusy;
slots no consumer declared belong to nobody, and their entries wait.

Ranges are reported as Pulsar's stats do: ``"[start, end]"`` strings.
"""

from __future__ import annotations

import bisect

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.protocol import commands as c
from magnetar.protocol.errors import ConsumerBusy, InvalidCommand

RANGE = c.KEY_HASH_RANGE


class AutoSplitSelector:
    def __init__(self) -> None:
        self._bounds: list[int] = []  # sorted inclusive upper bounds
        self._owner: dict[int, ServerConsumer] = {}
        self._bound_of: dict[int, int] = {}  # id(consumer) -> its upper bound

    def add(self, consumer: ServerConsumer) -> None:
        if not self._bounds:
            self._put(RANGE, consumer)
            return
        lower, upper, size = 0, RANGE, -1
        prev = 0
        for bound in self._bounds:
            if bound - prev > size:
                lower, upper, size = prev, bound, bound - prev
            prev = bound
        if upper - lower <= 1:
            raise ConsumerBusy(f"no key-hash range left to assign: {len(self._bounds)} consumers already")
        self._put(upper - ((upper - lower) >> 1), consumer)

    def _put(self, bound: int, consumer: ServerConsumer) -> None:
        bisect.insort(self._bounds, bound)
        self._owner[bound] = consumer
        self._bound_of[id(consumer)] = bound

    def remove(self, consumer: ServerConsumer) -> None:
        bound = self._bound_of.pop(id(consumer), None)
        if bound is None:
            return
        i = bisect.bisect_left(self._bounds, bound)
        if bound == RANGE and len(self._bounds) > 1:
            below = self._bounds[i - 1]
            heir = self._owner.pop(below)
            del self._bounds[i - 1]
            self._owner[RANGE] = heir
            self._bound_of[id(heir)] = RANGE
        else:
            del self._bounds[i]
            del self._owner[bound]

    def select(self, key_hash: int) -> ServerConsumer | None:
        if not self._bounds:
            return None
        i = bisect.bisect_left(self._bounds, key_hash % RANGE)
        return self._owner[self._bounds[i]]

    def ranges(self, consumer: ServerConsumer) -> list[tuple[int, int]]:
        bound = self._bound_of.get(id(consumer))
        if bound is None:
            return []
        i = bisect.bisect_left(self._bounds, bound)
        start = self._bounds[i - 1] + 1 if i > 0 else 0
        return [(start, bound)]


class StickySelector:
    def __init__(self) -> None:
        # Sorted by start: (start, end, consumer), disjoint.
        self._ranges: list[tuple[int, int, ServerConsumer]] = []

    def add(self, consumer: ServerConsumer) -> None:
        wanted = sorted(consumer.key_ranges or [])
        if not wanted:
            raise InvalidCommand("a STICKY Key_Shared consumer must declare key_ranges")
        for i, (start, end) in enumerate(wanted):
            if not 0 <= start <= end < RANGE:
                raise InvalidCommand(f"key range [{start}, {end}] is not within [0, {RANGE - 1}] with start <= end")
            if i and start <= wanted[i - 1][1]:
                raise InvalidCommand(f"key ranges {wanted[i - 1]} and {(start, end)} overlap")
        for start, end in wanted:
            for other_start, other_end, other in self._ranges:
                if start <= other_end and other_start <= end:
                    raise ConsumerBusy(
                        f"key range [{start}, {end}] conflicts with [{other_start}, {other_end}] "
                        f"of consumer {other.name}"
                    )
        self._ranges.extend((start, end, consumer) for start, end in wanted)
        self._ranges.sort(key=lambda r: (r[0], r[1]))

    def remove(self, consumer: ServerConsumer) -> None:
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def select(self, key_hash: int) -> ServerConsumer | None:
        slot = key_hash % RANGE
        i = bisect.bisect_right(self._ranges, slot, key=lambda r: r[0]) - 1
        if i >= 0 and self._ranges[i][1] >= slot:
            return self._ranges[i][2]
        return None

    def ranges(self, consumer: ServerConsumer) -> list[tuple[int, int]]:
        return [(start, end) for start, end, cons in self._ranges if cons is consumer]
