"""The trimming rule of a managed ledger as a pure function, shared by the broker and the sweep.

``ManagedLedger.trimmable`` (what the broker deletes) and the Spark retention sweep
(``magnetar.jobs.sweep_rules``: what the report says the broker will delete) call the same two
functions here, so the report cannot drift from what the broker does: the sweep feeds them the
ledger list and cursor positions of the topic's internal stats, the broker its live state.

Pulsar's rule (``ManagedLedgerImpl.internalTrimLedgers``): going from the oldest ledger on, a ledger
every durable cursor has passed is deleted when it is older than the retention time (closed more
than ``retention_minutes`` ago) OR when the topic would still hold at least ``retention_mb`` without
it (every stored byte counts, consumed or not); the first ledger that neither rule deletes stops the
walk. -1 switches a limit off (both -1: infinite retention); 0/0 keeps nothing consumed. With no
durable cursor at all nothing is held back by consumers (without subscriptions or retention, data
does not outlive its ledger). A position a broker feature still re-reads (``retain_from``) holds
back trimming as a cursor would. The ledger being written is never trimmed; an empty closed ledger
goes as soon as the walk reaches it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from magnetar.managed_ledger.position import Position

Reason = Literal["retention-time", "retention-size", "consumed-no-retention", "empty-ledger"]


class LedgerFacts(Protocol):
    """What the rule needs of a ledger (``ManagedLedger``'s ``LedgerInfo`` has these)."""

    @property
    def ledger_id(self) -> int: ...
    @property
    def entries(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def closed_at(self) -> float: ...  # epoch seconds; 0 while the ledger is being written


@dataclass(frozen=True, slots=True)
class Removal:
    """One ledger the rule deletes, and the first reason that deletes it (for reports)."""

    ledger_id: int
    reason: Reason


def slowest_position(cursors: Iterable[Position], retain_from: Position | None, last_confirmed: Position) -> Position:
    """The position up to which every reader is done: the oldest durable cursor's mark-delete
    (``last_confirmed`` when there is no durable cursor), or ``retain_from`` when that is older."""
    marks = list(cursors)
    slowest = min(marks) if marks else last_confirmed
    if retain_from is not None and retain_from < slowest:
        slowest = retain_from
    return slowest


def removable_ledgers(
    ledgers: Sequence[LedgerFacts],
    *,
    current: int | None,
    slowest: Position,
    now: float,
    retention_minutes: int,
    retention_mb: int,
) -> list[Removal]:
    """The oldest-first prefix of ``ledgers`` (the topic's whole list, oldest first) that the rule
    deletes at ``now`` (epoch seconds) when every reader is done up to ``slowest``.

    ``current`` is the ledger being written (None when none is open). The reason is
    "consumed-no-retention" under 0/0, else "retention-time" when the time limit deletes it, else
    "retention-size", else "empty-ledger" (a closed ledger without entries, which no limit keeps).
    """
    size_limit = retention_mb * 1024 * 1024
    time_limit = retention_minutes * 60
    total = sum(info.size for info in ledgers)
    no_retention = retention_minutes == 0 and retention_mb == 0
    doomed: list[Removal] = []
    deleted = 0
    for info in ledgers:
        lid = info.ledger_id
        consumed = lid < slowest.ledger_id or (lid == slowest.ledger_id and slowest.entry_id >= info.entries - 1)
        if lid == current or not consumed:
            break
        deleted += info.size
        over_size = retention_mb >= 0 and total - deleted >= size_limit
        expired = retention_minutes >= 0 and now - info.closed_at > time_limit
        if not (over_size or expired or info.entries == 0):
            break
        reason: Reason
        if no_retention:
            reason = "consumed-no-retention"
        elif expired:
            reason = "retention-time"
        elif over_size:
            reason = "retention-size"
        else:
            reason = "empty-ledger"
        doomed.append(Removal(lid, reason))
    return doomed
