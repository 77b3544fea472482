"""A namespace's bundles: hash ranges of the 32-bit topic-name hash, as Pulsar divides them.

A namespace's bundles are given by sorted boundaries ``b0 = 0x00000000 < b1 < ... < bn = 0xffffffff``;
bundle ``i`` holds the hashes ``[b_i, b_(i+1))``, except the last, which holds ``0xffffffff`` too
(so every 32-bit hash has exactly one bundle). A bundle is named ``0x{lo:08x}_0x{hi:08x}`` and the
boundaries are stored as Pulsar's ``BundlesData`` JSON (``{"boundaries": [...], "numBundles": n}``)
under ``bundles`` in the namespace policies, so a namespace keeps the ranges it was split into
whichever broker reads it.

Splitting replaces one bundle by two at a boundary an algorithm chooses (Pulsar's
``NamespaceBundleSplitAlgorithm``): ``range_equally_divide`` halves the hash range;
``topic_count_equally_divide`` puts half of the bundle's topics on each side, and cannot split a
bundle with fewer than two topics. Everything here is pure: the broker, the leader and the
simulator all divide the same way.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF  # the last bundle's upper end, included in it
HASH_SPACE = 1 << 32

RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE)


class InvalidBundle(ValueError):
    """A bundle name that is malformed, or not one of the namespace's bundles."""


def format_bundle(lo: int, hi: int) -> str:
    """``0x40000000_0x80000000``: Pulsar's name for the range ``[lo, hi)`` (``[lo, hi]`` at the top)."""
    return f"0x{lo:08x}_0x{hi:08x}"


def parse_bundle(name: str) -> tuple[int, int]:
    """(lo, hi) of a bundle name; ``InvalidBundle`` (Pulsar's "Invalid bundle range") when malformed."""
    parts = name.split("_")
    if len(parts) != 2:
        raise InvalidBundle(f"Invalid bundle range: {name}")
    try:
        lo, hi = (int(p, 16) for p in parts)
    except ValueError:
        raise InvalidBundle(f"Invalid bundle range: {name}") from None
    if not parts[0].lower().startswith("0x") or not parts[1].lower().startswith("0x"):
        raise InvalidBundle(f"Invalid bundle range: {name}")
    if not FULL_LOWER <= lo < hi <= FULL_UPPER:
        raise InvalidBundle(f"Invalid bundle range: {name}")
    return lo, hi


@dataclass(frozen=True, slots=True)
class BundleRanges:
    """The sorted boundaries of one namespace's bundles (first 0, last ``0xffffffff``)."""

    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != FULL_LOWER or b[-1] != FULL_UPPER:
            raise InvalidBundle("bundle boundaries must run from 0x00000000 to 0xffffffff")
        if any(x >= y for x, y in itertools.pairwise(b)):
            raise InvalidBundle("bundle boundaries must be strictly increasing")

    @property
    def count(self) -> int:
        return len(self.boundaries) - 1

    def names(self) -> list[str]:
        b = self.boundaries
        return [format_bundle(b[i], b[i + 1]) for i in range(self.count)]

    def find(self, hash_: int) -> str:
        """The bundle holding the 32-bit hash ``hash_``."""
        if not FULL_LOWER <= hash_ <= FULL_UPPER:
            raise ValueError(f"hash {hash_} is outside the 32-bit range")
        i = min(bisect.bisect_right(self.boundaries, hash_) - 1, self.count - 1)
        return format_bundle(self.boundaries[i], self.boundaries[i + 1])

    def contains(self, name: str) -> bool:
        return name in self.names()

    def check(self, name: str) -> tuple[int, int]:
        """(lo, hi) of ``name`` when it is one of these bundles, else ``InvalidBundle``."""
        lo, hi = parse_bundle(name)
        if format_bundle(lo, hi) not in self.names():
            raise InvalidBundle(f"Invalid bundle range: {name} is not a bundle of this namespace")
        return lo, hi

    def with_split(self, name: str, boundary: int) -> BundleRanges:
        """These ranges with bundle ``name`` divided at ``boundary`` (strictly inside it)."""
        lo, hi = self.check(name)
        if not lo < boundary < hi:
            raise InvalidBundle(f"split boundary 0x{boundary:08x} is not inside bundle {name}")
        return BundleRanges(tuple(sorted({*self.boundaries, boundary})))

    def to_json(self) -> dict[str, Any]:
        """Pulsar's BundlesData."""
        return {"boundaries": [f"0x{b:08x}" for b in self.boundaries], "numBundles": self.count}

    @classmethod
    def from_json(cls, doc: Any) -> BundleRanges:
        """From BundlesData; with ``boundaries`` absent, ``numBundles`` equal ranges (as Pulsar's
        create with only ``numBundles``). ``InvalidBundle`` for anything else."""
        if not isinstance(doc, dict):
            raise InvalidBundle("bundles must be a BundlesData object: {boundaries, numBundles}")
        raw = doc.get("boundaries")
        num = doc.get("numBundles")
        if raw is None:
            if not isinstance(num, int) or isinstance(num, bool):
                raise InvalidBundle("bundles needs boundaries or numBundles")
            return equal(num)
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise InvalidBundle("bundles.boundaries must be a list of hex strings such as 0x40000000")
        try:
            ranges = cls(tuple(int(x, 16) for x in raw))
        except ValueError as exc:
            raise InvalidBundle(f"bundles.boundaries: {exc}") from None
        if num is not None and num != ranges.count:
            raise InvalidBundle(f"bundles.numBundles is {num} but the boundaries make {ranges.count} bundles")
        return ranges


def equal(n: int) -> BundleRanges:
    """``n`` equal ranges (Pulsar's ``defaultNumberOfNamespaceBundles`` division): boundaries at
    multiples of ``2**32 // n``, the last ``0xffffffff``."""
    if not 1 <= n <= HASH_SPACE // 2:
        raise InvalidBundle(f"the number of bundles must be at least 1, not {n}")
    size = HASH_SPACE // n
    return BundleRanges((*(i * size for i in range(n)), FULL_UPPER))


def split_boundary(lo: int, hi: int, algorithm: str, topic_hashes: Iterable[int] = ()) -> int | None:
    """Where ``algorithm`` divides the bundle ``[lo, hi)``; None when it cannot (Pulsar leaves the
    bundle as it is then). ``topic_hashes`` are the hashes of the bundle's topics."""
    if algorithm == RANGE_EQUALLY_DIVIDE:
        return lo + (hi - lo) // 2
    if algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        hashes: Sequence[int] = sorted(h for h in topic_hashes if lo <= h <= hi)
        if len(hashes) <= 1:
            return None
        start = hashes[max(len(hashes) // 2 - 1, 0)]
        end = hashes[len(hashes) // 2]
        return start + (end - start) // 2
    raise InvalidBundle(f"Unsupported namespace bundle split algorithm, supported algorithms are {list(ALGORITHMS)}")


def split(lo: int, hi: int, algorithm: str, topic_hashes: Iterable[int] = ()) -> tuple[str, str] | None:
    """The two bundles ``[lo, hi)`` divides into, or None when the algorithm finds no boundary
    strictly inside it (fewer than two topics, or all of them on one hash)."""
    at = split_boundary(lo, hi, algorithm, topic_hashes)
    if at is None or not lo < at < hi:
        return None
    return format_bundle(lo, at), format_bundle(at, hi)
