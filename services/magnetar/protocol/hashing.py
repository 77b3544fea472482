"""Pulsar's key hashes, bit for bit: Murmur3 x86 32-bit and Java's ``String.hashCode``.

Both sides use them. The broker routes a Key_Shared entry by ``murmur3_32`` of its key
(``broker.key_hash``), and a producer on a partitioned topic puts a keyed message on
``hash(key) % partitions`` with the hash its ``hashing_scheme`` names (``client.routing``). They
live in the protocol layer because the client may import nothing else.

The partition a key lands on must be the one a Pulsar producer picks, or per-key ordering
breaks when Magnetar and Pulsar producers write the same topic. Pulsar's Java client defines the
hashes (``JavaStringHash``, ``Murmur3Hash32``): ``String.hashCode()`` over the key's UTF-16 code
units, or Murmur3 x86_32 with seed 0 over its UTF-8 bytes, each masked with
``Integer.MAX_VALUE``, then ``signSafeMod(hash, n)``. The mask leaves the hash non-negative, so
that is a plain ``%``.

Written here rather than taken from the ``mmh3`` package, which is not a dependency. Keys repeat
a lot, so the callers memoise.
"""

from __future__ import annotations

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF
INT_MAX = 0x7FFFFFFF  # Java's Integer.MAX_VALUE: the mask Pulsar puts on both hashes


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data`` as an unsigned 32-bit integer."""
    h = seed & _MASK
    n = len(data)
    tail_start = n - (n % 4)
    for i in range(0, tail_start, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
        h = _rotl(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK
    k = 0
    rest = n & 3
    if rest == 3:
        k ^= data[tail_start + 2] << 16
    if rest >= 2:
        k ^= data[tail_start + 1] << 8
    if rest >= 1:
        k ^= data[tail_start]
        k = (k * _C1) & _MASK
        k = _rotl(k, 15)
        k = (k * _C2) & _MASK
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def java_string_hash(s: str) -> int:
    """Java's ``s.hashCode()`` as a signed 32-bit integer.

    Java strings are UTF-16, so a character outside the Basic Multilingual Plane counts as its two
    surrogates; ``surrogatepass`` lets a lone surrogate through as Java would keep it.
    """
    units = s.encode("utf-16-le", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] | units[i + 1] << 8)) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h
