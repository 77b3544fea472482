"""How many messages each entry of a ledger holds, so that backlogs count messages, not entries.

With batching one entry holds many messages, and Pulsar's ``msgBacklog`` counts messages. A
cursor needs "messages after the mark-delete position" and "messages in these acknowledged
entries", so each ledger keeps the running total of messages per entry (``cum[i]`` = messages in
entries ``0..i``) and any range costs two lookups.

Memory: a ledger in which every entry holds one message (no batching: the common case for a
topic of ten million small entries) keeps no array at all, only its entry count. The array is
made the first time an entry of another size arrives, as ``array('I')`` (4 bytes an entry),
widened to ``array('Q')`` only if a ledger ever holds more than 2**32 - 1 messages.

Persistence (``ManagedLedger``): a closed ledger's counts are stored once, at roll-over or close,
under their own key (``encode``/``decode``: the per-entry counts as little-endian ``uint32``,
zlib-compressed, base64), never inside the managed ledger's list of ledgers, which is rewritten
at every roll-over and must stay small. Uniform ledgers store nothing.
"""

from __future__ import annotations

import base64
import sys
import zlib
from array import array
from collections.abc import Iterable

_MAX_U32 = 0xFFFFFFFF


class LedgerCounts:
    """Message counts of the entries of one ledger (entry ids ``0..entries-1``)."""

    __slots__ = ("_cum", "entries")

    def __init__(self) -> None:
        self.entries = 0
        # None while every entry holds exactly one message.
        self._cum: array[int] | None = None

    @classmethod
    def uniform(cls, entries: int) -> LedgerCounts:
        """A ledger of ``entries`` single-message entries (also the fallback for data written
        before message counts were recorded)."""
        counts = cls()
        counts.entries = max(0, entries)
        return counts

    @classmethod
    def of(cls, per_entry: Iterable[int]) -> LedgerCounts:
        counts = cls()
        for n in per_entry:
            counts.append(n)
        return counts

    @property
    def is_uniform(self) -> bool:
        return self._cum is None

    @property
    def nbytes(self) -> int:
        """Memory held by the per-entry array (0 for a uniform ledger)."""
        return 0 if self._cum is None else self._cum.itemsize * len(self._cum)

    def append(self, messages: int) -> None:
        messages = max(0, int(messages))
        if self._cum is None:
            if messages == 1:
                self.entries += 1
                return
            self._cum = array("I", range(1, self.entries + 1))
        total = (self._cum[-1] if self._cum else 0) + messages
        if total > _MAX_U32 and self._cum.typecode == "I":
            self._cum = array("Q", self._cum)
        self._cum.append(total)
        self.entries += 1

    def truncate(self, entries: int) -> None:
        """Forget entries from ``entries`` on (issued to the ledger but never confirmed)."""
        if entries >= self.entries:
            return
        self.entries = max(0, entries)
        if self._cum is not None:
            del self._cum[self.entries :]

    def upto(self, entry_id: int) -> int:
        """Messages in entries ``0..entry_id`` (inclusive); 0 for ``entry_id < 0``."""
        if entry_id < 0:
            return 0
        last = min(entry_id, self.entries - 1)
        if last < 0:
            return 0
        if self._cum is None:
            return last + 1
        return self._cum[last]

    @property
    def total(self) -> int:
        return self.upto(self.entries - 1)

    def of_entry(self, entry_id: int) -> int:
        """Messages in one entry (0 when the ledger has no such entry)."""
        if not 0 <= entry_id < self.entries:
            return 0
        return self.upto(entry_id) - self.upto(entry_id - 1)

    def per_entry(self) -> list[int]:
        return [self.of_entry(i) for i in range(self.entries)]

    # ------------------------------------------------------------------ storage form
    def encode(self) -> str:
        """The per-entry counts, compact: base64(zlib(little-endian uint32 per entry))."""
        raw = array("I", (min(n, _MAX_U32) for n in self.per_entry()))
        if sys.byteorder != "little":
            raw.byteswap()
        return base64.b64encode(zlib.compress(raw.tobytes())).decode()

    @classmethod
    def decode(cls, text: str) -> LedgerCounts:
        raw = array("I")
        raw.frombytes(zlib.decompress(base64.b64decode(text)))
        if sys.byteorder != "little":
            raw.byteswap()
        return cls.of(raw)
