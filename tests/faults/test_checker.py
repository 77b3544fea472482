"""The queue checker on hand-made histories (fast: no processes)."""

from __future__ import annotations

from tests.faults.checker import FAIL, OK, PENDING, UNKNOWN, Op, Read, check, make_value, parse_value, position


def op(producer: int, seq: int, status: str = OK, pos: tuple[int, int, int] | None = None) -> Op:
    return Op(producer, seq, make_value(producer, seq), t_invoke=float(seq), status=status, pos=pos)


def rd(producer: int, seq: int, ledger: int = 1, entry: int | None = None, index: int = 0) -> Read:
    return Read(make_value(producer, seq), position(ledger, seq if entry is None else entry, index))


def test_values_round_trip_and_foreign_values_do_not_parse() -> None:
    assert parse_value(make_value(3, 17)) == (3, 17)
    for bad in ("", "x3-1", "p-1", "p3-", "p3_1", "p3-1a"):
        assert parse_value(bad) is None


def test_a_clean_history_is_valid() -> None:
    ops = [op(0, i, pos=position(1, i)) for i in range(5)] + [op(1, i, pos=position(2, i)) for i in range(3)]
    reads = [rd(0, i) for i in range(5)] + [rd(1, i, ledger=2) for i in range(3)]
    res = check(ops, reads)
    assert res.valid, res.summary()
    assert (res.attempted, res.ok, res.read, res.lost, res.duplicated, res.reordered) == (8, 8, 8, 0, 0, 0)


def test_an_acknowledged_value_never_read_is_lost() -> None:
    ops = [op(0, 0), op(0, 1), op(0, 2)]
    res = check(ops, [rd(0, 0), rd(0, 2)])
    assert res.lost == 1 and not res.valid
    assert "p0-1" in res.examples["lost"][0]


def test_unknown_and_failed_values_may_be_missing() -> None:
    ops = [op(0, 0), op(0, 1, UNKNOWN), op(0, 2, FAIL), op(0, 3, PENDING), op(0, 4)]
    res = check(ops, [rd(0, 0), rd(0, 4)])
    assert res.valid, res.summary()
    assert (res.ok, res.unknown, res.failed, res.lost) == (2, 2, 1, 0)


def test_an_unknown_value_that_was_stored_is_recovered_not_an_error() -> None:
    res = check([op(0, 0), op(0, 1, UNKNOWN), op(0, 2)], [rd(0, 0), rd(0, 1), rd(0, 2)])
    assert res.valid and res.recovered == 1


def test_a_definitely_failed_value_that_was_stored_is_an_error() -> None:
    res = check([op(0, 0, FAIL)], [rd(0, 0)])
    assert res.failed_read == 1 and not res.valid


def test_a_value_at_two_positions_is_a_duplicate_not_a_reorder() -> None:
    # A resend after reconnect: 1 and 2 were stored, the receipts lost, and both were sent again.
    ops = [op(0, i) for i in range(4)]
    sequence = [0, 1, 2, 1, 2, 3]
    reads = [rd(0, seq, entry=entry) for entry, seq in enumerate(sequence)]
    res = check(ops, reads)
    assert res.valid, res.summary()
    assert (res.duplicated, res.reordered, res.redelivered) == (2, 0, 0)


def test_the_same_position_read_twice_is_a_redelivery() -> None:
    res = check([op(0, 0), op(0, 1)], [rd(0, 0), rd(0, 1), rd(0, 1)])
    assert res.valid and (res.duplicated, res.redelivered) == (0, 1)


def test_reorders_are_judged_per_producer_on_first_occurrences() -> None:
    ops = [op(p, i) for p in (0, 1) for i in range(4)]
    # Producers interleave freely; producer 1 has 2 read before 1: one reorder.
    reads = [rd(0, 0, entry=0), rd(1, 0, entry=1), rd(1, 2, entry=2), rd(0, 1, entry=3), rd(1, 1, entry=4)]
    reads += [rd(0, 2, entry=5), rd(0, 3, entry=6), rd(1, 3, entry=7)]
    res = check(ops, reads)
    assert res.reordered == 1 and not res.valid
    assert res.examples["reordered"] == ["p1-1 read after p1-2"]


def test_reorders_among_acknowledged_values_are_counted_apart() -> None:
    # p0-1 was reported unknown and turned up after p0-2: a reorder, but not among acked values.
    ops = [op(0, 0), op(0, 1, UNKNOWN), op(0, 2), op(0, 3)]
    res = check(ops, [rd(0, 0, entry=0), rd(0, 2, entry=1), rd(0, 1, entry=2), rd(0, 3, entry=3)])
    assert (res.reordered, res.reordered_acked) == (1, 0)
    res = check([op(0, 0), op(0, 1), op(0, 2)], [rd(0, 1, entry=0), rd(0, 0, entry=1), rd(0, 2, entry=2)])
    assert (res.reordered, res.reordered_acked) == (1, 1)


def test_a_gap_from_a_failed_send_is_not_a_reorder() -> None:
    res = check([op(0, 0), op(0, 1, FAIL), op(0, 2)], [rd(0, 0), rd(0, 2)])
    assert res.valid and res.reordered == 0


def test_two_values_at_one_read_position_are_inconsistent() -> None:
    res = check([op(0, 0), op(0, 1)], [rd(0, 0, entry=7), rd(0, 1, entry=7)])
    assert res.inconsistent == 1 and not res.valid


def test_an_ack_naming_a_position_that_holds_another_value_is_inconsistent() -> None:
    ops = [op(0, 0, pos=position(1, 0)), op(0, 1, pos=position(1, 0))]  # both "acked" at 1:0
    res = check(ops, [rd(0, 0, entry=0), rd(0, 1, entry=1)])
    assert res.inconsistent == 1


def test_batch_index_distinguishes_positions_and_minus_one_means_zero() -> None:
    assert position(3, 4, -1) == position(3, 4, 0)
    ops = [op(0, 0, pos=position(1, 0, 0)), op(0, 1, pos=position(1, 0, 1))]
    res = check(ops, [rd(0, 0, entry=0, index=0), rd(0, 1, entry=0, index=1)])
    assert res.valid and res.inconsistent == 0


def test_a_value_no_producer_sent_is_unexpected() -> None:
    res = check([op(0, 0)], [rd(0, 0), Read("garbage", position(1, 9)), rd(5, 0, entry=3)])
    assert res.unexpected == 2 and not res.valid


def test_counts_are_reported() -> None:
    res = check([op(0, 0), op(0, 1, UNKNOWN)], [rd(0, 0)])
    counts = res.counts()
    assert counts["attempted"] == 2 and counts["unknown"] == 1 and "examples" not in counts
    assert "lost=0" in res.summary()


def test_delivery_counts_early_reads_and_lateness() -> None:
    from tests.faults.checker import delivery, percentile

    ops = [op(0, i, pos=position(1, i)) for i in range(4)]
    for i, o in enumerate(ops):
        o.deliver_at = 1000 + i
    reads = [
        Read("p0-0", position(1, 0), wall_ms=1010),  # 10 ms late
        Read("p0-1", position(1, 1), wall_ms=1000),  # 1 ms early
        Read("p0-2", position(1, 2), wall_ms=1052),  # 50 ms late
        Read("p0-2", position(1, 2), wall_ms=1500, redelivery_count=1),  # redelivery: lateness of the first read only
    ]
    res = delivery(ops, reads, {"p0-0", "p0-1", "p0-2"})
    assert (res.early, res.lost_live, res.delayed, res.redelivered_reads) == (1, 1, 3, 1)
    assert not res.valid
    assert res.lateness_ms == {"p50": 10.0, "p99": 50.0, "max": 50.0}
    assert "p0-3" in res.examples["lost_live"][0] and "p0-1" in res.examples["early"][0]
    assert percentile([5, 1, 3], 50) == 3.0 and percentile([1], 99) == 1.0


def test_delivery_of_a_complete_live_run_is_valid() -> None:
    from tests.faults.checker import delivery

    ops = [op(0, i, pos=position(1, i)) for i in range(3)]
    reads = [Read(o.value, o.pos, wall_ms=5) for o in ops]
    res = delivery(ops, reads, {o.value for o in ops})
    assert res.valid, res.summary()
    assert res.lateness_ms == {} and res.acked_live == 3


def test_a_deduplicated_resend_acknowledged_minus_one_is_valid_when_read_once() -> None:
    # The broker stored p0-1 at 1:1, the receipt was lost, the resend was acknowledged -1:-1.
    ops = [op(0, 0, pos=position(1, 0)), op(0, 1, pos=position(-1, -1)), op(0, 2, pos=position(-1, -1, 3))]
    reads = [rd(0, 0), rd(0, 1), rd(0, 2)]
    res = check(ops, reads)
    assert res.valid, res.summary()
    assert (res.deduplicated, res.duplicated, res.inconsistent, res.lost) == (2, 0, 0, 0)


def test_a_deduplicated_value_must_still_be_read_exactly_once() -> None:
    ops = [op(0, 0, pos=position(-1, -1)), op(0, 1, pos=position(-1, -1))]
    res = check(ops, [rd(0, 0), rd(0, 0, entry=7)])  # p0-0 stored twice, p0-1 never
    assert (res.duplicated, res.lost) == (1, 1) and not res.valid
