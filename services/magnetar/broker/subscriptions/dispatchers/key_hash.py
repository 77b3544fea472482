"""Key hashing for Key_Shared: Murmur3 x86 32-bit, as Pulsar's ``Murmur3_32Hash``.

A Key_Shared subscription routes an entry by the hash of its key (``meta.k``) modulo
``KEY_HASH_RANGE`` (65536 slots). The hash must be Pulsar's exactly, so that a consumer that
declares STICKY ranges computed with Pulsar's tooling (or a client that reports which slot a key
falls in) agrees with the broker. Pulsar hashes the key's UTF-8 bytes with seed 0 and masks the
sign bit; since 65536 divides 2**31 that mask does not change the slot, so the slot is simply the
unsigned 32-bit hash modulo 65536.

The hash itself is ``protocol.hashing.murmur3_32``, shared with the client's partition routing;
keys repeat a lot, so slots are memoised.
"""

from __future__ import annotations

from functools import lru_cache

from magnetar.protocol import commands as c
from magnetar.protocol.hashing import murmur3_32

__all__ = ["key_hash", "murmur3_32"]


@lru_cache(maxsize=65536)
def key_hash(key: str) -> int:
    """The Key_Shared slot of ``key``: 0 .. KEY_HASH_RANGE - 1."""
    return (murmur3_32(key.encode("utf-8")) & 0x7FFFFFFF) % c.KEY_HASH_RANGE
