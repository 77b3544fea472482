"""Key hashing for Key_Shared: Murmur3 x86 32-bit, as Pulsar's ``Murmur3_32Hash``.

A Key_Shared subscription routes an entry by the hash of its key (``meta.k``) modulo
``KEY_HASH_RANGE`` (65536 slots). The hash must be Pulsar's exactly, so that a consumer that
declares STICKY ranges computed with Pulsar's tooling (or a client that reports which slot a key
falls in) agrees with the broker. Pulsar hashes the key's UTF-8 bytes with seed 0 and masks the
sign bit; since 65536 divides 2**31 that mask does not change the slot, so the slot is simply the
unsigned 32-bit hash modulo 65536.

Written here rather than taken from the ``mmh3`` package, which is not a dependency; keys repeat a
lot, so hashes are memoised.
"""

from __future__ import annotations

from functools import lru_cache

from magnetar.protocol import commands as c

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF


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


@lru_cache(maxsize=65536)
def key_hash(key: str) -> int:
    """The Key_Shared slot of ``key``: 0 .. KEY_HASH_RANGE - 1."""
    return (murmur3_32(key.encode("utf-8")) & 0x7FFFFFFF) % c.KEY_HASH_RANGE
