"""R1, R2: the metadata record at /ledgers/{id}, its JSON form and its validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.ledger.metadata_format import (
    Fragment,
    InvalidLedgerMetadata,
    LedgerMetadata,
    LedgerState,
    decode,
    encode,
    ledger_path,
    new_metadata,
)
from magnetar.protocol.errors import InvalidCommand


@st.composite
def metadata(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    starts = sorted(draw(st.sets(st.integers(1, 10_000), max_size=4)))
    names = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=8)
    fragments = tuple(
        Fragment(first, tuple(draw(st.lists(names, min_size=e, max_size=e, unique=True)))) for first in [0, *starts]
    )
    state = draw(st.sampled_from(LedgerState))
    return LedgerMetadata(
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        fragments=fragments,
        state=state,
        last_entry_id=draw(st.integers(-1, 10**9)),
        length=draw(st.integers(0, 10**12)),
        custom=draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)),
        ctime=draw(st.integers(0, 2**42)),
    )


@given(metadata())
def test_r1_json_round_trip(md: LedgerMetadata) -> None:
    assert decode(encode(md)) == md


def test_r1_record_is_json_with_the_documented_keys() -> None:
    md = new_metadata(["a", "b", "c"], 2, 2, {"topic": "t"})
    doc = json.loads(encode(md))
    assert doc["state"] == "OPEN"
    assert (doc["ensemble_size"], doc["write_quorum"], doc["ack_quorum"]) == (3, 2, 2)
    assert doc["fragments"] == [{"first_entry": 0, "bookies": ["a", "b", "c"]}]
    assert (doc["last_entry_id"], doc["length"]) == (-1, 0)
    assert doc["custom"] == {"topic": "t"}
    assert doc["ctime"] > 1_600_000_000_000
    assert ledger_path(17) == "/ledgers/17"


def test_r1_unknown_keys_are_ignored() -> None:
    raw = encode(new_metadata(["a"], 1, 1))
    doc = json.loads(raw)
    doc["future_field"] = [1, 2]
    assert decode(json.dumps(doc).encode()) == decode(raw)


@pytest.mark.parametrize(("e", "qw", "qa"), [(2, 3, 1), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
def test_r2_quorums_must_satisfy_e_ge_qw_ge_qa_ge_1(e: int, qw: int, qa: int) -> None:
    with pytest.raises(InvalidLedgerMetadata) as info:
        LedgerMetadata(e, qw, qa, (Fragment(0, tuple(f"b{i}" for i in range(e))),))
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, InvalidCommand)
    assert "ensemble_size >= write_quorum >= ack_quorum >= 1" in str(info.value)


@pytest.mark.parametrize(
    "fragments",
    [
        (),
        (Fragment(1, ("a", "b")),),
        (Fragment(0, ("a", "a")),),
        (Fragment(0, ("a",)),),
        (Fragment(0, ("a", "b")), Fragment(0, ("a", "c"))),
        (Fragment(0, ("a", "b")), Fragment(5, ("a", "c")), Fragment(3, ("a", "d"))),
    ],
)
def test_r2_fragments_need_e_distinct_bookies_in_increasing_order(fragments: tuple[Fragment, ...]) -> None:
    with pytest.raises(InvalidLedgerMetadata):
        LedgerMetadata(2, 2, 1, fragments)


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"{}", b'{"state": "WEIRD"}', json.dumps({"state": "OPEN", "ensemble_size": 2}).encode()],
)
def test_r2_malformed_records_are_refused_on_decode(raw: bytes) -> None:
    with pytest.raises(InvalidLedgerMetadata):
        decode(raw)


def test_r12_ensemble_change_appends_or_replaces_the_last_fragment() -> None:
    md = new_metadata(["a", "b", "c"], 3, 2)
    changed = md.with_ensemble(5, ("a", "d", "c"))
    assert changed.fragments == (Fragment(0, ("a", "b", "c")), Fragment(5, ("a", "d", "c")))
    again = changed.with_ensemble(5, ("a", "d", "e"))
    assert again.fragments == (Fragment(0, ("a", "b", "c")), Fragment(5, ("a", "d", "e")))
    assert again.fragment_for(4).bookies == ("a", "b", "c")
    assert again.fragment_for(5).bookies == ("a", "d", "e")
    assert again.fragment_for(10**6).bookies == ("a", "d", "e")
