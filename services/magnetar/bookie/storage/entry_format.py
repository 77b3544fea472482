"""The bookie's on-disk format in the key-value store: key layout, value encodings, their checks.

Kept apart from the code that reads and writes, because these bytes outlive it: every environment
a bookie ever wrote must still read the same way, whatever engine or writer sits on top. Nothing
here touches a disk; everything is a pure function of bytes (the scrub walk, the writer thread,
the reads on the loop and the tests share it).

Tables (``STORAGE.md`` has the full story):

- ``entries``: key ``struct '>QQ' (ledger_id, entry_id)`` (big-endian, so one ledger's entries
  are contiguous and in entry order), value ``CRC32C(data) + CRC32C(key + that CRC) + data``
  (format 2; format 1, kept for environments created before, has no key check).
- ``ledgers``: key ``struct '>Q' ledger_id``, value ``struct '>?qI' (fenced, lac, CRC32C of key +
  the first 9 bytes)`` (format 1: ``'>?q'``, no CRC).
- ``meta``: ``format`` -> the format number above; ``journal`` -> the journal position
  everything before which is in the store.

The CRC is checked on the loop before an add is queued, so a corrupt add never reaches the disk,
and again on every read, so that rot on disk (LMDB does not checksum its pages) surfaces as
``ChecksumError`` instead of as bad data. The key check binds each value to its key, so a damaged
index that finds the value of another entry (a flipped bit in a key) is caught as well; the ledger
state carries its own CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import ChecksumError, InvalidCommand

ENTRY_KEY = struct.Struct(">QQ")
LEDGER_KEY = struct.Struct(">Q")
LEDGER_STATE = struct.Struct(">?q")
LEDGER_STATE_V2 = struct.Struct(">?qI")
CRC = struct.Struct(">I")
ENTRY_HEAD = struct.Struct(">II")  # format 2: CRC32C(data), CRC32C(key + packed CRC)
FORMAT = 2
FORMAT_KEY = b"format"
JOURNAL_KEY = b"journal"  # meta: the journal position everything before which is in LMDB (journal.py)
ENTRIES_TABLE = b"entries"
LEDGERS_TABLE = b"ledgers"
META_TABLE = b"meta"
U64_MAX = (1 << 64) - 1


@dataclass(slots=True)
class LedgerState:
    """A ledger's state as stored in ``ledgers`` (mutable: a write transaction updates it in place)."""

    fenced: bool
    lac: int
    corrupt: bool = False  # the stored record failed its CRC: read as fenced with an unknown LAC


def check_ids(ledger: int, entry: int = 0) -> None:
    """Ids that do not fit the keys are refused before anything is queued."""
    if not (0 <= ledger <= U64_MAX and 0 <= entry <= U64_MAX):
        raise InvalidCommand(f"ledger and entry ids must be unsigned 64-bit, got ({ledger}, {entry})")


def key_check(key: bytes, crc: int) -> int:
    return crc32c(key + CRC.pack(crc))


def encode_entry(fmt: int, key: bytes, crc: int, data: bytes) -> bytes:
    """The stored value of an entry whose data has CRC32C ``crc``."""
    if fmt >= 2:
        return ENTRY_HEAD.pack(crc, key_check(key, crc)) + data
    return CRC.pack(crc) + data


def decode_entry(fmt: int, key: bytes, raw: bytes | memoryview, ledger: int, entry: int) -> tuple[int, bytes]:
    """``(crc, data)`` of a stored value, or ``ChecksumError`` if it is damaged in any way."""
    head = ENTRY_HEAD.size if fmt >= 2 else CRC.size
    if len(raw) < head:
        raise ChecksumError(f"entry {ledger}:{entry} is truncated ({len(raw)} bytes)")
    (crc,) = CRC.unpack_from(raw)
    if fmt >= 2 and ENTRY_HEAD.unpack_from(raw)[1] != key_check(key, crc):
        raise ChecksumError(f"entry {ledger}:{entry} is corrupt on disk (key check mismatch)")
    data = bytes(raw[head:])
    if crc32c(data) != crc:
        raise ChecksumError(f"entry {ledger}:{entry} is corrupt on disk (CRC32C mismatch)")
    return crc, data


def encode_state(fmt: int, key: bytes, st: LedgerState) -> bytes:
    packed = LEDGER_STATE.pack(st.fenced, st.lac)
    if fmt >= 2:
        return packed + CRC.pack(crc32c(key + packed))
    return packed


def decode_state(fmt: int, key: bytes, raw: bytes | memoryview) -> LedgerState:
    """The state, or one marked ``corrupt`` (fenced, LAC unknown) if it fails its check."""
    raw = bytes(raw)
    if fmt >= 2:
        if len(raw) != LEDGER_STATE_V2.size:
            return LedgerState(True, NO_ENTRY, corrupt=True)
        if crc32c(key + raw[: LEDGER_STATE.size]) != CRC.unpack_from(raw, LEDGER_STATE.size)[0]:
            return LedgerState(True, NO_ENTRY, corrupt=True)
    elif len(raw) != LEDGER_STATE.size:
        return LedgerState(True, NO_ENTRY, corrupt=True)
    fenced, lac = LEDGER_STATE.unpack_from(raw)
    if raw[0] not in (0, 1):
        return LedgerState(True, NO_ENTRY, corrupt=True)
    return LedgerState(bool(fenced), int(lac))
