"""Typed values out of a decoded command: what a server checks before a field reaches its state.

The ``TypedDict``s of ``commands`` say what a well-behaved peer sends; msgpack decodes whatever
arrived, so a field declared ``int`` may be a bool, a float, a string, a map or an integer no
frame can carry back. Every function here takes such a decoded value and either returns it typed
or raises ``InvalidCommand``, the protocol's error for a bad field, with the text the peer sees;
nothing else escapes. They are pure (no I/O, no state), so both servers share one copy and the
property is fuzzed directly, without a socket (tests/protocol/test_fields_fuzz.py).

Positions come back as plain ``(ledger, entry)`` tuples, or built by the ``make`` the caller
passes: the protocol knows no managed ledger, and the broker passes its own ``Position``, so an
acknowledged position is built once, not as a tuple first.

Two families, because the two servers report a bad field differently, and a peer sees that text:

- the broker's (``integer``, ``id_part``, ``positions_of``, ...) name what was wrong and show the
  value received; an ``InvalidCommand`` answers that one request;
- the bookie's (``int_field``, ``bytes_field``) name the field and its command; the bookie answers
  a mistyped field with an ``error`` frame and closes the connection, so nothing it sent is stored.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from magnetar.protocol.commands import KEY_HASH_RANGE
from magnetar.protocol.errors import InvalidCommand

# The largest ledger or entry id: an int64, as Pulsar's (ids are stored and sent back as one).
MAX_ID = 2**63 - 1

LedgerEntry = tuple[int, int]
P = TypeVar("P")


def _pair(ledger: int, entry: int) -> LedgerEntry:
    return ledger, entry


# ---------------------------------------------------------------- client -> broker


def integer(value: Any, what: str) -> int:
    """An integer field (msgpack gives ints; a bool or anything else is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidCommand(f"{what} must be an integer, got {value!r}")
    return value


def id_part(value: Any, what: str) -> int:
    """A ledger or entry id of a position: an int64 like Pulsar's, -1 allowed (before the first).
    Out of that range a cursor would keep a position no frame can carry (its mark-delete in
    ``last_message_id_response``), found by tests/fuzz/test_broker.py."""
    number = integer(value, what)
    if not -1 <= number <= MAX_ID:
        raise InvalidCommand(f"{what} must be within -1..{MAX_ID}, got {number}")
    return number


def key_ranges_of(raw: Any) -> list[tuple[int, int]] | None:
    """Validate Key_Shared ``key_ranges``: [start, end] pairs, 0 <= start <= end < KEY_HASH_RANGE,
    not overlapping one another (Pulsar's KeySharedPolicy.validate)."""
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)):
        raise InvalidCommand(f"key_ranges must be a list of [start, end] pairs, got {raw!r}")
    ranges: list[tuple[int, int]] = []
    for item in raw:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise InvalidCommand(f"a key range is a [start, end] pair, got {item!r}")
        start, end = integer(item[0], "a key range start"), integer(item[1], "a key range end")
        if not 0 <= start <= end < KEY_HASH_RANGE:
            raise InvalidCommand(f"key range [{start}, {end}] is not within 0..{KEY_HASH_RANGE - 1} with start <= end")
        ranges.append((start, end))
    ordered = sorted(ranges)
    for (_, end), (start, _) in itertools.pairwise(ordered):
        if start <= end:
            raise InvalidCommand(f"key ranges overlap: {ordered}")
    return ranges


@overload
def batch_acks_of(raw: Any) -> list[tuple[LedgerEntry, int, list[int]]]: ...
@overload
def batch_acks_of(raw: Any, make: Callable[[int, int], P]) -> list[tuple[P, int, list[int]]]: ...
def batch_acks_of(raw: Any, make: Callable[[int, int], Any] = _pair) -> list[tuple[Any, int, list[int]]]:
    """Validate ``batch_acks``: [[ledger, entry, count, [index, ...]], ...] with count >= 1 and
    every index in 0..count-1; each position built by ``make`` (module docstring)."""
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise InvalidCommand(f"batch_acks must be a list, got {raw!r}")
    out: list[tuple[Any, int, list[int]]] = []
    for item in raw:
        if not isinstance(item, (list, tuple)) or len(item) != 4 or not isinstance(item[3], (list, tuple)):
            raise InvalidCommand(f"a batch ack is [ledger, entry, count, [index, ...]], got {item!r}")
        ledger, entry, count = id_part(item[0], "ledger"), id_part(item[1], "entry"), integer(item[2], "count")
        if count < 1:
            raise InvalidCommand(f"a batch ack's count must be at least 1, got {count}")
        indexes = [integer(i, "batch index") for i in item[3]]
        if any(not 0 <= i < count for i in indexes):
            raise InvalidCommand(f"batch indexes {indexes} are not all within 0..{count - 1}")
        out.append((make(ledger, entry), count, indexes))
    return out


@overload
def positions_of(raw: Any) -> list[LedgerEntry]: ...
@overload
def positions_of(raw: Any, make: Callable[[int, int], P]) -> list[P]: ...
def positions_of(raw: Any, make: Callable[[int, int], Any] = _pair) -> list[Any]:
    """Validate the positions of an ``ack`` or ``redeliver``: [[ledger, entry], ...], each built by
    ``make`` (module docstring)."""
    if not isinstance(raw, (list, tuple)) or any(not isinstance(p, (list, tuple)) or len(p) != 2 for p in raw):
        raise InvalidCommand(f"positions must be [[ledger, entry], ...], got {raw!r:.100}")
    return [make(id_part(p[0], "ledger"), id_part(p[1], "entry")) for p in raw]


def seek_position_of(raw: Any) -> LedgerEntry:
    """The ``position`` of a ``seek``: [ledger, entry]."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        raise InvalidCommand(f"a seek position is [ledger, entry], got {raw!r:.100}")
    return id_part(raw[0], "ledger"), id_part(raw[1], "entry")


def message_id_of(raw: Any) -> tuple[int, int, int] | None:
    """A wire message id [ledger, entry, batch] (batch may be left out: -1)."""
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)) or len(raw) not in (2, 3):
        raise InvalidCommand(f"a message id is [ledger, entry, batch], got {raw!r}")
    ledger, entry = id_part(raw[0], "ledger"), id_part(raw[1], "entry")
    batch = integer(raw[2], "batch index") if len(raw) == 3 else -1
    return ledger, entry, batch


# ---------------------------------------------------------------- broker -> bookie


def int_field(cmd: Mapping[str, object], field: str, default: int | None = None) -> int:
    """Field ``field`` of a ``bk_*`` command as an integer (``default`` when absent, if given)."""
    value = cmd.get(field, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidCommand(f"field {field!r} of {cmd.get('t')!r} must be an integer")
    return value


def bytes_field(cmd: Mapping[str, object], field: str) -> bytes:
    """Field ``field`` of a ``bk_*`` command as msgpack bin (a str is refused, not encoded)."""
    value = cmd.get(field)
    if not isinstance(value, bytes):
        raise InvalidCommand(f"field {field!r} of {cmd.get('t')!r} must be binary")
    return value


def add_lac(lac: int) -> int:
    """The ``lac`` of a ``bk_add``: -1 or an entry id. It is stored as a signed 64-bit value, and
    out of that range it would fail the whole group commit the add joins, not just this add."""
    if not -1 <= lac <= MAX_ID:
        raise InvalidCommand(f"lac must be -1 or an entry id, got {lac}")
    return lac
