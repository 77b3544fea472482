"""Ledger metadata (PROTOCOL.md R1-R4): the record at ``/ledgers/{id}`` and its JSON form.

The record is JSON rather than msgpack so an operator can read it with ``etcdctl get`` and so the
format can grow: unknown keys are ignored on decode. Decoding validates the quorum rules (R2) so a
corrupt or hand-edited record is refused before any handle relies on it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.metadata import paths
from magnetar.protocol.errors import InvalidCommand

LEDGER_ID_COUNTER = paths.LEDGER_ID_COUNTER  # R3
ledger_path = paths.ledger  # R1: /ledgers/{id}


class InvalidLedgerMetadata(InvalidCommand, ValueError):
    """Metadata breaking R2; a ``ValueError`` too, so plain Python callers can catch it naturally."""


class LedgerState(StrEnum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Fragment:
    """Entries from ``first_entry`` up to the next fragment's start live on ``bookies`` (by slot)."""

    first_entry: int
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    fragments: tuple[Fragment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = NO_ENTRY
    length: int = 0
    custom: dict[str, str] = field(default_factory=dict)
    ctime: int = 0

    def __post_init__(self) -> None:
        validate(self)

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.fragments[-1].bookies

    def fragment_for(self, entry_id: int) -> Fragment:
        """The fragment holding ``entry_id``: the last one starting at or before it."""
        for fragment in reversed(self.fragments):
            if fragment.first_entry <= entry_id:
                return fragment
        raise ValueError(f"entry {entry_id} precedes the first fragment")

    def all_bookies(self) -> set[str]:
        return {b for fragment in self.fragments for b in fragment.bookies}

    def with_ensemble(self, first_entry: int, bookies: tuple[str, ...]) -> LedgerMetadata:
        """A copy with ``bookies`` as the ensemble from ``first_entry`` on (R12 step 2): a new
        fragment, or a replacement of the last one when it already starts there."""
        kept = tuple(f for f in self.fragments if f.first_entry < first_entry)
        return replace(self, fragments=(*kept, Fragment(first_entry, bookies)))

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def in_state(self, state: LedgerState) -> LedgerMetadata:
        return replace(self, state=state)


def new_metadata(
    ensemble: list[str],
    write_quorum: int,
    ack_quorum: int,
    custom: dict[str, str] | None = None,
) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=len(ensemble),
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        fragments=(Fragment(0, tuple(ensemble)),),
        custom=dict(custom or {}),
        ctime=int(time.time() * 1000),
    )


def validate_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    if not ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise InvalidLedgerMetadata(
            f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
            f"E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
        )


def validate(md: LedgerMetadata) -> None:
    """R2, plus the sanity of the closing fields."""
    validate_quorums(md.ensemble_size, md.write_quorum, md.ack_quorum)
    if not md.fragments or md.fragments[0].first_entry != 0:
        raise InvalidLedgerMetadata("the first fragment must start at entry 0")
    previous = -1
    for fragment in md.fragments:
        if fragment.first_entry <= previous:
            raise InvalidLedgerMetadata("fragments must start at strictly increasing entries")
        previous = fragment.first_entry
        if len(fragment.bookies) != md.ensemble_size or len(set(fragment.bookies)) != md.ensemble_size:
            raise InvalidLedgerMetadata(
                f"fragment at {fragment.first_entry} needs {md.ensemble_size} distinct bookies, "
                f"has {list(fragment.bookies)}"
            )
    if md.last_entry_id < NO_ENTRY or md.length < 0:
        raise InvalidLedgerMetadata("last_entry_id must be >= -1 and length >= 0")


def encode(md: LedgerMetadata) -> bytes:
    doc: dict[str, Any] = {
        "state": md.state.value,
        "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum,
        "ack_quorum": md.ack_quorum,
        "fragments": [{"first_entry": f.first_entry, "bookies": list(f.bookies)} for f in md.fragments],
        "last_entry_id": md.last_entry_id,
        "length": md.length,
        "custom": md.custom,
        "ctime": md.ctime,
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def decode(raw: bytes) -> LedgerMetadata:
    try:
        doc = json.loads(raw)
        return LedgerMetadata(
            state=LedgerState(doc["state"]),
            ensemble_size=int(doc["ensemble_size"]),
            write_quorum=int(doc["write_quorum"]),
            ack_quorum=int(doc["ack_quorum"]),
            fragments=tuple(
                Fragment(int(f["first_entry"]), tuple(str(b) for b in f["bookies"])) for f in doc["fragments"]
            ),
            last_entry_id=int(doc.get("last_entry_id", NO_ENTRY)),
            length=int(doc.get("length", 0)),
            custom={str(k): str(v) for k, v in doc.get("custom", {}).items()},
            ctime=int(doc.get("ctime", 0)),
        )
    except InvalidLedgerMetadata:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidLedgerMetadata(f"malformed ledger metadata: {exc}") from exc
