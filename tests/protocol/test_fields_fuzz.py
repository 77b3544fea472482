"""Fuzz ``protocol/fields.py`` in process: every decoded value a peer can send, through every parser.

Why: the broker and the bookie read every typed field of a command through these functions before
the value reaches a subscription or the storage. A server turns ``InvalidCommand`` into an answer
to that request (or, in the bookie, an ``error`` frame); any other exception would escape a
handler as an unexpected failure, and a value returned out of range would reach state that no
frame can carry back. Properties checked on every input:

- each parser returns, or raises ``InvalidCommand``, and nothing else;
- what it returns is what its caller relies on: ints that are not bools, ids within -1..2**63-1,
  Key_Shared ranges within the hash range and not overlapping, batch indexes within their count;
- a field a constructor of ``commands`` built parses back to the values given to it.

Values go through the real frame codec first (``encode_frame``, then ``FrameDecoder``), so the
parsers see exactly what a server sees: lists where the sender had tuples, maps with keys of any
msgpack type. ``FUZZ_EXAMPLES`` sets the number of examples (as in ``tests/fuzz``; see ``HOSTILE``).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from tests.fuzz.conftest import fuzz_examples, fuzz_timeout
from tests.fuzz.values import EDGE_INTS

from magnetar.protocol import commands as c
from magnetar.protocol import fields
from magnetar.protocol.errors import InvalidCommand
from magnetar.protocol.framing import FrameDecoder, encode_frame

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]

# A Hypothesis example costs milliseconds (a bulk input of tests/fuzz, microseconds): hostile values
# get a quarter of FUZZ_EXAMPLES (500 by default, 250,000 in a long run), well-formed round trips a tenth.
HOSTILE = settings(max_examples=max(50, fuzz_examples() // 4), deadline=None, suppress_health_check=list(HealthCheck))
WELL_FORMED = settings(
    max_examples=max(50, fuzz_examples() // 10), deadline=None, suppress_health_check=list(HealthCheck)
)

# Integers at every edge a check has (ids, int64, the hash range, counts), and anywhere msgpack goes.
edge_ints = (
    st.sampled_from([*EDGE_INTS, -2, c.KEY_HASH_RANGE - 1, c.KEY_HASH_RANGE])
    | st.integers(min_value=-3, max_value=c.KEY_HASH_RANGE + 3)
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
)
scalars = st.none() | st.booleans() | edge_ints | st.floats() | st.text(max_size=12) | st.binary(max_size=12)
map_keys = (
    st.none() | st.booleans() | edge_ints | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8)
)
# Any value msgpack can carry: the wrong type for most fields.
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(map_keys, kids, max_size=3),
    max_leaves=8,
)
# Shapes close to the valid ones, so that the checks deep inside each parser are reached too.
near_ints = edge_ints | values
pairs = st.lists(st.lists(near_ints, min_size=2, max_size=2) | values, max_size=5)
key_ranges = st.lists(
    st.lists(st.integers(min_value=-1, max_value=c.KEY_HASH_RANGE), min_size=2, max_size=2), max_size=4
)
counts = st.integers(min_value=-1, max_value=6) | near_ints  # a batch's count, and its indexes
batch_ack = st.tuples(near_ints, near_ints, counts, st.lists(counts, max_size=5) | values).map(list)
batch_acks = st.lists(batch_ack | values, max_size=4)
message_ids = st.lists(near_ints, min_size=2, max_size=3)
raw_fields = edge_ints | values | pairs | key_ranges | batch_acks | message_ids


def decoded(value: Any) -> Any:
    """``value`` as a server receives it: encoded in a frame and decoded by the frame codec."""
    frames = FrameDecoder(1 << 20).feed(encode_frame(value))
    assert len(frames) == 1
    return frames[0]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    return _is_int(value) and -1 <= value <= fields.MAX_ID


def _check_integer(raw: Any, got: int) -> None:
    assert _is_int(got) and got == raw


def _check_id_part(raw: Any, got: int) -> None:
    assert _is_id(got) and got == raw


def _check_key_ranges(raw: Any, got: list[tuple[int, int]] | None) -> None:
    if raw is None:
        assert got is None
        return
    assert got is not None and len(got) == len(raw)
    assert all(_is_int(s) and _is_int(e) and 0 <= s <= e < c.KEY_HASH_RANGE for s, e in got)
    for (_, end), (start, _) in itertools.pairwise(sorted(got)):
        assert end < start, f"overlapping ranges accepted: {got}"


def _check_batch_acks(raw: Any, got: list[tuple[tuple[int, int], int, list[int]]]) -> None:
    assert len(got) == (0 if raw is None else len(raw))
    for (ledger, entry), count, indexes in got:
        assert _is_id(ledger) and _is_id(entry) and _is_int(count) and count >= 1
        assert all(_is_int(i) and 0 <= i < count for i in indexes)


def _check_positions(raw: Any, got: list[tuple[int, int]]) -> None:
    assert len(got) == len(raw)
    assert all(_is_id(ledger) and _is_id(entry) for ledger, entry in got)


def _check_seek_position(raw: Any, got: tuple[int, int]) -> None:
    assert got == tuple(raw) and all(_is_id(x) for x in got)


def _check_message_id(raw: Any, got: tuple[int, int, int] | None) -> None:
    if raw is None:
        assert got is None
        return
    assert got is not None and _is_id(got[0]) and _is_id(got[1]) and _is_int(got[2])
    assert got == (raw[0], raw[1], raw[2] if len(raw) == 3 else -1)


# Every parser of a broker field, with the property of what it returns.
BROKER_PARSERS: list[tuple[str, Any, Any]] = [
    ("integer", lambda raw: fields.integer(raw, "a field"), _check_integer),
    ("id_part", lambda raw: fields.id_part(raw, "ledger"), _check_id_part),
    ("key_ranges_of", fields.key_ranges_of, _check_key_ranges),
    ("batch_acks_of", fields.batch_acks_of, _check_batch_acks),
    ("positions_of", fields.positions_of, _check_positions),
    ("seek_position_of", fields.seek_position_of, _check_seek_position),
    ("message_id_of", fields.message_id_of, _check_message_id),
]


@HOSTILE
@given(value=raw_fields)
def test_broker_fields_parse_or_raise_invalid_command(value: Any) -> None:
    """Any decoded value, as any broker field: a typed result within its ranges, or InvalidCommand."""
    raw = decoded(value)
    for name, parse, check in BROKER_PARSERS:
        note(f"parser: {name}")
        try:
            got = parse(raw)
        except InvalidCommand:
            continue
        check(raw, got)


bookie_fields = ("rid", "ledger", "entry", "crc", "lac", "data", "t")
bookie_commands = st.dictionaries(
    st.sampled_from(bookie_fields) | map_keys,
    st.sampled_from([c.BK_ADD, c.BK_READ]) | edge_ints | st.booleans() | st.binary(max_size=8) | values,
    max_size=8,
)


@HOSTILE
@given(cmd=bookie_commands, default=st.none() | edge_ints)
def test_bookie_fields_parse_or_raise_invalid_command(cmd: dict[Any, Any], default: int | None) -> None:
    """Any decoded map as a ``bk_*`` command: every field read as the bookie reads it gives a
    typed value or InvalidCommand (and the add's lac is refused outside -1..2**63-1)."""
    frame = decoded(cmd)
    for field in bookie_fields:
        try:
            number = fields.int_field(frame, field, default)
        except InvalidCommand:
            pass
        else:
            assert _is_int(number) and number == frame.get(field, default)
            try:
                assert fields.add_lac(number) == number and -1 <= number <= fields.MAX_ID
            except InvalidCommand:
                assert not -1 <= number <= fields.MAX_ID
        try:
            blob = fields.bytes_field(frame, field)
        except InvalidCommand:
            pass
        else:
            assert isinstance(blob, bytes) and blob == frame[field]


ids = st.integers(min_value=-1, max_value=fields.MAX_ID)
positions = st.tuples(ids, ids)


@st.composite
def disjoint_key_ranges(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Non-overlapping [start, end] ranges within the hash range, in any order."""
    bounds = sorted(draw(st.sets(st.integers(min_value=0, max_value=c.KEY_HASH_RANGE - 1), max_size=8)))
    ranges = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds) - 1, 2)]
    return draw(st.permutations(ranges))


@st.composite
def batch_ack_lists(draw: st.DrawFn) -> list[tuple[int, int, int, list[int]]]:
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        count = draw(st.integers(min_value=1, max_value=2**31 - 1))
        indexes = draw(st.lists(st.integers(min_value=0, max_value=min(count - 1, 10_000)), max_size=6))
        out.append((draw(ids), draw(ids), count, indexes))
    return out


@WELL_FORMED
@given(
    ranges=disjoint_key_ranges(),
    start=st.tuples(ids, ids) | st.tuples(ids, ids, st.integers(min_value=-1, max_value=2**31)),
    priority=st.integers(min_value=-(2**63), max_value=2**64 - 1),
    acked=st.lists(positions, max_size=6),
    partial=batch_ack_lists(),
    seek_to=positions,
)
def test_constructed_fields_parse_back(
    ranges: list[tuple[int, int]],
    start: tuple[int, ...],
    priority: int,
    acked: list[tuple[int, int]],
    partial: list[tuple[int, int, int, list[int]]],
    seek_to: tuple[int, int],
) -> None:
    """What a well-behaved client builds with the constructors parses back to what it was given."""
    sub = decoded(
        c.subscribe("t", "s", 1, c.SUB_KEY_SHARED, key_ranges=ranges, start_message_id=start, priority_level=priority)
    )
    assert fields.key_ranges_of(sub["key_ranges"]) == ranges
    assert fields.message_id_of(sub["start_message_id"]) == (start if len(start) == 3 else (*start, -1))
    assert fields.integer(sub.get("priority_level", 0), "priority_level") == priority
    ack = decoded(c.ack(1, c.ACK_INDIVIDUAL, acked, rid=1, batch_acks=partial))
    assert fields.positions_of(ack["positions"]) == acked
    assert fields.batch_acks_of(ack.get("batch_acks")) == [((lg, en), n, ix) for lg, en, n, ix in partial]
    assert fields.positions_of(decoded(c.redeliver(1, acked))["positions"]) == acked
    assert fields.seek_position_of(decoded(c.seek(1, seek_to))["position"]) == seek_to


@WELL_FORMED
@given(ledger=ids, entry=ids, data=st.binary(max_size=64), crc=st.integers(0, 2**32 - 1), lac=ids)
def test_constructed_bookie_fields_parse_back(ledger: int, entry: int, data: bytes, crc: int, lac: int) -> None:
    add = decoded(c.bk_add(ledger, entry, data, crc, lac, rid=7))
    got = [fields.int_field(add, f) for f in ("rid", "ledger", "entry", "crc")]
    assert got == [7, ledger, entry, crc]
    assert fields.bytes_field(add, "data") == data
    assert fields.add_lac(fields.int_field(add, "lac", -1)) == lac


@pytest.mark.parametrize(
    ("call", "text"),
    [
        (lambda: fields.integer(True, "priority_level"), "priority_level must be an integer, got True"),
        (lambda: fields.id_part(2**63, "ledger"), f"ledger must be within -1..{2**63 - 1}, got {2**63}"),
        (lambda: fields.key_ranges_of([[0, 10], [5, 20]]), "key ranges overlap: [(0, 10), (5, 20)]"),
        (
            lambda: fields.key_ranges_of([[3, 70000]]),
            "key range [3, 70000] is not within 0..65535 with start <= end",
        ),
        (lambda: fields.batch_acks_of([[1, 2, 0, []]]), "a batch ack's count must be at least 1, got 0"),
        (lambda: fields.positions_of([[1]]), "positions must be [[ledger, entry], ...], got [[1]]"),
        (lambda: fields.seek_position_of("x"), "a seek position is [ledger, entry], got 'x'"),
        (lambda: fields.message_id_of([1]), "a message id is [ledger, entry, batch], got [1]"),
        (
            lambda: fields.int_field({"t": "bk_add", "ledger": "7"}, "ledger"),
            "field 'ledger' of 'bk_add' must be an integer",
        ),
        (lambda: fields.bytes_field({"t": "bk_add", "data": "x"}, "data"), "field 'data' of 'bk_add' must be binary"),
        (lambda: fields.add_lac(-2), "lac must be -1 or an entry id, got -2"),
    ],
)
def test_refusals_keep_the_texts_peers_see(call: Any, text: str) -> None:
    """The texts are part of what a client or bookie client shows its user: pinned here."""
    with pytest.raises(InvalidCommand) as refused:
        call()
    assert str(refused.value) == text
