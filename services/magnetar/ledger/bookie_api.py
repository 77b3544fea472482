"""The seam between ledgers and bookies: what a ledger needs from one bookie.

The ``ledger`` layer sits below ``bookie`` (DESIGN.md §2), so it cannot import the bookie
package. It states what it needs here; the bookie package provides two implementations (an
in-process one for standalone, a TCP one for clusters) and the broker wires them in through a
``BookieResolver``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

NO_ENTRY = -1  # LAC of a ledger with no confirmed entry


@dataclass(frozen=True, slots=True)
class ReadResult:
    data: bytes
    crc: int
    lac: int


class BookieClient(Protocol):
    """One bookie, as a ledger handle sees it. All errors are ``magnetar.protocol.errors``:
    ``LedgerFenced`` (add to a fenced ledger), ``NoSuchEntry``, ``NoSuchLedger``,
    ``ChecksumError``, ``BookieReadOnly``, and ``NotConnected``/``Timeout`` for an unreachable
    bookie."""

    @property
    def bookie_id(self) -> str: ...

    async def add_entry(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> None:
        """Durably store an entry (returns after the bookie's group commit). ``recovery`` adds are
        allowed on a fenced ledger (they come from the recovering reader)."""
        ...

    def add_entry_nowait(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> asyncio.Future[None]:
        """``add_entry`` as a future, without a coroutine: a write handle sends every entry to Qw
        bookies, and a task per copy was most of a broker's work per message. Never raises: every
        error comes through the future.

        A client may also offer ``add_entry_callback(ledger_id, entry_id, data, crc, lac,
        callback)``, which calls ``callback(error or None)`` on the loop, never synchronously and
        never raising; the write handle uses it where present (``local_client.py``), saving the
        turn of the loop that a future's callback costs."""
        ...

    async def read_entry(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> ReadResult: ...

    async def read_lac(self, ledger_id: int) -> int: ...

    async def fence(self, ledger_id: int) -> int:
        """Fence the ledger on this bookie (no more non-recovery adds); return its LAC."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None: ...


class BookieResolver(Protocol):
    """Gives a client for a bookie id, and lists the bookies that can take new ledgers."""

    def client(self, bookie_id: str) -> BookieClient: ...

    async def writable_bookies(self) -> list[str]: ...
