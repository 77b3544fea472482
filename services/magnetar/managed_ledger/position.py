"""Positions in a managed ledger: (ledger id, entry id), ordered lexicographically."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


# Before every real position: a cursor whose mark-delete is here has acknowledged nothing.
EARLIEST = Position(-1, -1)
