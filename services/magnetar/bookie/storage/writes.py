"""A bookie's writes (add, fence, delete, restore): how each is decided, and applied to the store.

The rules live here once and serve both ways a write reaches the store. Without the journal the
writer thread decides and applies each write inside its transaction (``KvWrites.apply``); with
it, the loop decides each write before journaling it (``decide``, against a view that includes
writes not yet in the store) and the writer thread later applies the decided writes
(``KvWrites.apply_ops``), as does the replay of a journal at start. Because one thread applies
writes in queue order, a fence queued before an add wins over it, and checks such as "is this
ledger fenced" need no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.bookie.journal import JournalPosition
from magnetar.bookie.storage.entry_format import (
    ENTRY_KEY,
    FORMAT,
    FORMAT_KEY,
    JOURNAL_KEY,
    LEDGER_KEY,
    LedgerState,
    decode_state,
    encode_state,
)
from magnetar.bookie.storage.kv import KeyValueStorage, KvTransaction
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.errors import LedgerFenced


@dataclass(slots=True)
class WriteOp:
    kind: str  # "add" | "fence" | "delete" | "restore" | "stop"
    ledger: int
    entry: int = 0
    value: bytes = b""
    lac: int = NO_ENTRY
    recovery: bool = False
    future: asyncio.Future[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    started: float = 0.0
    #: Instead of ``future``: called on the loop with the error or None (``add_callback``).
    callback: Callable[[BaseException | None], None] | None = None
    # Journal mode: the outcome decided on the loop, the writer's sequence number, the position after the record.
    result: Any = None
    seq: int = 0
    journal_end: JournalPosition | None = None


#: One write's outcome as it is handed back to the loop: the op, its result, its error.
Outcome = tuple[WriteOp, Any, BaseException | None]


def decide(op: WriteOp, state: LedgerState | None) -> tuple[LedgerState | None, Any, bool]:
    """What applying ``op`` would do to ``state`` (left unchanged): (the new state, the op's
    result, whether it changes anything to store). Raises ``LedgerFenced`` for an add to a fenced
    ledger that is not a recovery add."""
    if op.kind == "delete":
        return None, None, True
    if op.kind == "restore":
        if state is None or not state.corrupt:
            return state, False, False
        return LedgerState(op.recovery, op.lac), True, True
    new = LedgerState(False, NO_ENTRY) if state is None else LedgerState(state.fenced, state.lac, state.corrupt)
    if op.kind == "fence":
        new.corrupt, new.fenced = False, True
        return new, new.lac, True
    if new.fenced and not op.recovery:
        raise LedgerFenced(f"ledger {op.ledger} is fenced")
    new.corrupt = False
    new.lac = max(new.lac, op.lac)
    return new, None, True


def open_format(kv: KeyValueStorage[Any], entries: Any, ledgers: Any, meta: Any) -> int:
    """Format 2 for a new store; an existing one keeps the format it was created with."""
    with kv.begin(write=True) as txn:
        found = txn.get(FORMAT_KEY, db=meta)
        if found is not None:
            return int(bytes(found))
        empty = txn.stat(entries)["entries"] == 0 and txn.stat(ledgers)["entries"] == 0
        fmt = FORMAT if empty else 1
        txn.put(FORMAT_KEY, str(fmt).encode(), db=meta)
        return fmt


class KvWrites:
    """Applies writes to the store's tables, in a transaction the caller holds (the writer
    thread's, or the journal replay's). ``states`` caches the ledger states the transaction has
    read or changed; ``dirty`` names those to write back at its end (``write_states``)."""

    def __init__(self, kv: KeyValueStorage[Any], fmt: int, entries: Any, ledgers: Any, meta: Any) -> None:
        self._kv = kv
        self.format = fmt
        self._entries = entries
        self._ledgers = ledgers
        self._meta = meta

    def apply_ops(self, ops: list[WriteOp], end: JournalPosition) -> None:
        """Apply journaled writes in one transaction that also records ``end``, the journal
        position they reach. They were decided when journaled, so nothing is refused here."""
        with self._kv.begin(write=True) as txn:
            states: dict[int, LedgerState | None] = {}
            dirty: set[int] = set()
            for op in ops:
                self.apply_decided(txn, op, states, dirty)
            self.write_states(txn, states, dirty)
            txn.put(JOURNAL_KEY, end.pack(), db=self._meta)

    def apply(
        self, txn: KvTransaction[Any], op: WriteOp, states: dict[int, LedgerState | None], dirty: set[int]
    ) -> Any:
        """One write in the writer's queue order, without the journal: decided on the state the
        store holds (and this transaction changed), then applied. Raises ``LedgerFenced`` for an
        add to a fenced ledger; returns the op's result (a fence's LAC, whether a restore applied)."""
        _, result, apply = decide(op, self.state(txn, op.ledger, states))
        if apply:
            self.apply_decided(txn, op, states, dirty)
        return result

    def apply_decided(
        self, txn: KvTransaction[Any], op: WriteOp, states: dict[int, LedgerState | None], dirty: set[int]
    ) -> None:
        state = self.state(txn, op.ledger, states)
        if op.kind == "delete":
            self.delete_entries(txn, op.ledger)
            states[op.ledger] = None
            dirty.discard(op.ledger)
            return
        if op.kind == "restore":
            states[op.ledger] = LedgerState(op.recovery, op.lac)
            dirty.add(op.ledger)
            return
        if state is None:
            state = states[op.ledger] = LedgerState(False, NO_ENTRY)
        if op.kind == "fence":
            state.corrupt, state.fenced = False, True
        else:
            txn.put(ENTRY_KEY.pack(op.ledger, op.entry), op.value, db=self._entries)
            state.corrupt = False
            state.lac = max(state.lac, op.lac)
        dirty.add(op.ledger)

    def state(self, txn: KvTransaction[Any], ledger: int, states: dict[int, LedgerState | None]) -> LedgerState | None:
        if ledger not in states:
            key = LEDGER_KEY.pack(ledger)
            raw = txn.get(key, db=self._ledgers)
            states[ledger] = decode_state(self.format, key, raw) if raw is not None else None
        return states[ledger]

    def write_states(self, txn: KvTransaction[Any], states: dict[int, LedgerState | None], dirty: set[int]) -> None:
        for ledger in dirty:
            st = states[ledger]
            assert st is not None
            key = LEDGER_KEY.pack(ledger)
            txn.put(key, encode_state(self.format, key, st), db=self._ledgers)

    def delete_entries(self, txn: KvTransaction[Any], ledger: int) -> None:
        cursor = txn.cursor(db=self._entries)
        prefix = LEDGER_KEY.pack(ledger)
        if cursor.set_range(ENTRY_KEY.pack(ledger, 0)):
            while bytes(cursor.key())[:8] == prefix:
                if not cursor.delete():
                    break
        txn.delete(prefix, db=self._ledgers)
