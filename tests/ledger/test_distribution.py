"""R6, R17, R18: striping and quorum arithmetic, checked against brute force."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.ledger.distribution import contains_slot, covers_ack_quorums, missing_threshold, write_set


@st.composite
def quorums(draw: st.DrawFn) -> tuple[int, int, int]:
    e = draw(st.integers(1, 9))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    return e, qw, qa


@given(quorums(), st.integers(0, 10**12))
def test_r6_write_set_is_qw_distinct_slots_starting_at_e_mod_E(q: tuple[int, int, int], entry: int) -> None:
    e, qw, _ = q
    slots = write_set(entry, e, qw)
    assert len(slots) == qw
    assert len(set(slots)) == qw
    assert slots == [(entry + i) % e for i in range(qw)]
    for slot in range(e):
        assert contains_slot(entry, slot, e, qw) == (slot in slots)


@given(quorums(), st.integers(0, 10**6))
def test_r6_striping_spreads_e_consecutive_entries_evenly(q: tuple[int, int, int], start: int) -> None:
    e, qw, _ = q
    load = [0] * e
    for entry in range(start, start + e):
        for slot in write_set(entry, e, qw):
            load[slot] += 1
    assert load == [qw] * e


def _ack_quorum_still_possible(fenced: set[int], e: int, qw: int, qa: int) -> bool:
    """Brute force: some entry's write set keeps at least Qa unfenced bookies."""
    return any(sum(1 for s in write_set(entry, e, qw) if s not in fenced) >= qa for entry in range(e))


@given(quorums(), st.data())
def test_r17_coverage_means_no_write_set_keeps_an_ack_quorum(q: tuple[int, int, int], data: st.DataObject) -> None:
    e, qw, qa = q
    fenced = data.draw(st.sets(st.integers(0, e - 1)))
    assert covers_ack_quorums(fenced, e, qw, qa) == (not _ack_quorum_still_possible(fenced, e, qw, qa))


@given(quorums())
def test_r17_any_e_minus_qa_plus_one_fenced_bookies_suffice(q: tuple[int, int, int]) -> None:
    e, qw, qa = q
    for fenced in combinations(range(e), e - qa + 1):
        assert covers_ack_quorums(fenced, e, qw, qa)
    if e - qa >= 0 and qw == e:  # with full striping fewer never suffice
        for fenced in combinations(range(e), e - qa):
            assert not covers_ack_quorums(fenced, e, qw, qa)


@given(quorums())
def test_r18_missing_threshold_leaves_fewer_than_qa_possible_holders(q: tuple[int, int, int]) -> None:
    _, qw, qa = q
    threshold = missing_threshold(qw, qa)
    assert 1 <= threshold <= qw
    assert qw - threshold < qa  # bookies that might still hold the entry
    assert qw - (threshold - 1) >= qa  # one answer fewer would not prove anything
