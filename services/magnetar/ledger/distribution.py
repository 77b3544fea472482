"""Striping and quorum arithmetic (PROTOCOL.md R6, R8, R17, R18), pure so it can be property-tested.

Slots are positions in a fragment's ensemble; callers map them to bookie ids.
"""

from __future__ import annotations

from collections.abc import Collection


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Slots that store ``entry_id`` (R6): ``(e + i) mod E`` for ``i < Qw``, in that order.

    Striping spreads consecutive entries over the ensemble, so with Qw < E each bookie takes only
    Qw/E of the write load."""
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum)]


def contains_slot(entry_id: int, slot: int, ensemble_size: int, write_quorum: int) -> bool:
    """Whether ``slot`` is in the write set of ``entry_id``, without building the list."""
    return (slot - entry_id) % ensemble_size < write_quorum


def covers_ack_quorums(fenced_slots: Collection[int], ensemble_size: int, write_quorum: int, ack_quorum: int) -> bool:
    """R17: True when every possible write set has at least ``Qw - Qa + 1`` fenced slots, so no
    write set keeps Qa unfenced bookies and no new entry can reach its ack quorum."""
    needed = write_quorum - ack_quorum + 1
    fenced = set(fenced_slots)
    for start in range(ensemble_size):
        hits = sum(1 for i in range(write_quorum) if (start + i) % ensemble_size in fenced)
        if hits < needed:
            return False
    return True


def missing_threshold(write_quorum: int, ack_quorum: int) -> int:
    """R18: how many 'no such entry' answers prove an entry was never acknowledged: if that many
    of its Qw bookies lack it, at most ``Qa - 1`` can hold it."""
    return write_quorum - ack_quorum + 1
