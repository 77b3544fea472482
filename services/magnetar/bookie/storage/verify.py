"""The walk over every stored value that the scrubber runs (``scrub.py``).

A module of its own because it runs in two places: inside the storage (``verify_all``, in a
thread) and in a child process over a directory opened read-only (``verify_directory`` in the
engine's module), where an engine that aborts on a damaged page takes only the child down. It
needs nothing but a read transaction and the format's checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from magnetar.bookie.storage.entry_format import ENTRY_KEY, LEDGER_KEY, decode_entry, decode_state
from magnetar.bookie.storage.kv import KvTransaction
from magnetar.protocol.errors import ChecksumError

TableT = TypeVar("TableT")


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What one walk over every stored value found (``BookieStorage.verify_all``)."""

    entries: int  # entry values checked
    ledgers: int  # ledger states checked
    damaged_entries: list[tuple[int, int]] = field(default_factory=list)
    damaged_states: list[int] = field(default_factory=list)


def walk(txn: KvTransaction[TableT], entries_db: TableT, ledgers_db: TableT, fmt: int) -> VerifyReport:
    damaged_entries: list[tuple[int, int]] = []
    damaged_states: list[int] = []
    entries = states = 0
    for key, raw in txn.cursor(db=entries_db).iternext():
        key = bytes(key)
        entries += 1
        if len(key) != ENTRY_KEY.size:
            continue  # not ours to judge; cannot name an entry either
        ledger, entry = ENTRY_KEY.unpack(key)
        try:
            decode_entry(fmt, key, raw, ledger, entry)
        except ChecksumError:
            damaged_entries.append((int(ledger), int(entry)))
    for key, raw in txn.cursor(db=ledgers_db).iternext():
        key = bytes(key)
        states += 1
        if len(key) == LEDGER_KEY.size and decode_state(fmt, key, raw).corrupt:
            damaged_states.append(int(LEDGER_KEY.unpack(key)[0]))
    return VerifyReport(entries, states, damaged_entries, damaged_states)
