"""Client unit tests that need no broker: batch container, ack tracker, permits, routing, config."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.acks import BatchAckTracker, FlowPermits
from magnetar.client.batch_builder import RECORD_OVERHEAD, Batch, SendReceipt
from magnetar.client.connection import normalize_url, parse_service_url
from magnetar.client.options import CompressionType, ConsumerType, Result, result_of
from magnetar.client.producer import ProducerConfig
from magnetar.client.routing import RoundRobinRouter, partition_for_key
from magnetar.protocol.batch import decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import MessageTooLarge, Timeout, Unsupported
from magnetar.protocol.message_id import MessageId

# ------------------------------------------------------------------ batch container


async def _batch(first_seq: int = 0) -> Batch:
    return Batch(first_seq, 0.0, asyncio.get_running_loop().create_future())


async def test_batch_has_room_until_count_or_bytes_limit():
    b = await _batch()
    assert b.has_room(10_000, 3, 100)  # an empty batch always takes the message, even an oversized one
    b.add([b"a", {}, None, 0, 0], 40)
    assert b.has_room(40, 3, 100)
    assert not b.has_room(61, 3, 100)  # would cross max_bytes
    b.add([b"b", {}, None, 0, 1], 40)
    assert not b.is_full(3, 100)
    b.add([b"c", {}, None, 0, 2], 10)
    assert b.is_full(3, 100)  # count reached
    assert not b.has_room(1, 3, 100)


async def test_batch_encode_is_one_checksummed_payload_with_first_sequence_id():
    b = await _batch(first_seq=41)
    for i in range(3):
        b.add([f"m{i}".encode(), {"i": str(i)}, None, 0, 41 + i], 10)
    meta, payload = b.encode(producer_name="p", compression=CompressionType.LZ4, batched=True)
    assert meta["seq"] == 41 and meta["n"] == 3 and meta["b"] is True and meta["pn"] == "p"
    assert meta["crc"] == crc32c(payload)
    records = decode_batch(meta, payload)
    assert [r[0] for r in records] == [b"m0", b"m1", b"m2"]
    assert [r[4] for r in records] == [41, 42, 43]


async def test_receipts_share_the_batch_future_and_carry_batch_index():
    b = await _batch()
    receipts = [SendReceipt(b, i) for i in range(3)]
    assert not receipts[0].done()
    b.resolve(5, 9, 2, batched=True)
    assert [await r for r in receipts] == [MessageId(5, 9, 2, i) for i in range(3)]
    assert receipts[1].result() == MessageId(5, 9, 2, 1)


async def test_batch_callbacks_get_ok_and_ids_or_the_error():
    ok = await _batch()
    calls: list[tuple[object, object]] = []
    ok.add_callback(0, lambda r, m: calls.append((r, m)))
    ok.add_callback(1, lambda r, m: calls.append((r, m)))
    ok.resolve(1, 2, -1, batched=False)
    assert calls == [(Result.Ok, MessageId(1, 2, -1, -1)), (Result.Ok, MessageId(1, 2, -1, -1))]
    failed = await _batch()
    calls.clear()
    failed.add_callback(0, lambda r, m: calls.append((r, m)))
    err = Timeout("late")
    failed.fail(err)
    assert calls == [(err, None)]
    with pytest.raises(Timeout):
        await SendReceipt(failed, 0)


def test_record_overhead_covers_msgpack_framing_of_a_small_record():
    packed = msgpack.packb([[b"x" * 100, {}, None, 1_700_000_000_000, 123_456]], use_bin_type=True)
    assert len(packed) - 1 <= 100 + RECORD_OVERHEAD  # minus the outer list header


# ------------------------------------------------------------------ batch ack tracker


def test_entry_is_acked_only_when_every_message_of_its_batch_is():
    t = BatchAckTracker()
    t.track((1, 5), 3)
    assert t.ack((1, 5), 0) is False
    assert t.ack((1, 5), 0) is False  # a duplicate ack does not count twice
    assert t.ack((1, 5), 2) is False
    assert t.ack((1, 5), 1) is True
    assert not t.is_tracked((1, 5))


def test_untracked_or_single_message_entries_ack_at_once():
    t = BatchAckTracker()
    t.track((1, 1), 1)
    assert t.ack((1, 1), 0) is True
    assert t.ack((9, 9), -1) is True


def test_redelivered_batch_keeps_earlier_acks():
    t = BatchAckTracker()
    t.track((1, 5), 2)
    t.ack((1, 5), 0)
    t.track((1, 5), 2)  # redelivery of the same entry
    assert t.ack((1, 5), 1) is True


def test_cumulative_ack_inside_a_batch_acks_the_previous_entry_until_the_batch_completes():
    t = BatchAckTracker()
    t.track((1, 4), 2)
    t.track((1, 5), 3)
    assert t.ack_cumulative((1, 5), 1) == (1, 4)
    assert not t.is_tracked((1, 4))  # everything before is covered
    assert t.ack((1, 5), 2) is True  # indexes 0..1 were covered by the cumulative ack
    t.track((2, 0), 2)
    assert t.ack_cumulative((2, 0), 0) is None  # nothing before entry 0 of a ledger to ack
    assert t.ack_cumulative((2, 0), 1) == (2, 0)
    assert t.ack_cumulative((3, 3), -1) == (3, 3)


@given(st.permutations(list(range(8))))
def test_batch_completes_exactly_at_the_last_distinct_ack(order):
    t = BatchAckTracker()
    t.track((1, 1), 8)
    results = [t.ack((1, 1), i) for i in order]
    assert results == [False] * 7 + [True]


# ------------------------------------------------------------------ permits


def test_permits_refill_when_half_the_queue_is_consumed():
    p = FlowPermits(1000)
    assert p.initial() == 1000
    assert [p.consumed() for _ in range(499)] == [0] * 499
    assert p.consumed() == 500
    assert p.consumed() == 0


def test_permits_for_tiny_queues_refill_every_message():
    p = FlowPermits(1)
    assert p.initial() == 1
    assert p.consumed() == 1
    p = FlowPermits(3)
    assert (p.consumed(), p.consumed()) == (1, 1)  # threshold 3 // 2 = 1
    p = FlowPermits(5)
    assert (p.consumed(), p.consumed()) == (0, 2)


def test_permits_returned_in_bulk_for_dropped_entries():
    p = FlowPermits(10)
    assert p.consumed(7) == 7


# ------------------------------------------------------------------ routing


def test_keyed_messages_go_to_a_stable_partition():
    assert partition_for_key("order-17", 7) == crc32c(b"order-17") % 7
    r = RoundRobinRouter(7, start=0)
    assert {r.choose("order-17") for _ in range(10)} == {crc32c(b"order-17") % 7}


def test_unkeyed_messages_move_to_the_next_partition_per_batch():
    r = RoundRobinRouter(3, start=2)
    assert r.choose(None) == 2
    r.batch_sent(2)
    assert r.choose(None) == 0
    r.batch_sent(1)  # a keyed batch elsewhere does not move the round robin
    assert r.choose(None) == 0
    r.batch_sent(0)
    r.batch_sent(1)
    assert r.choose(None) == 2


@given(st.text(min_size=1), st.integers(min_value=1, max_value=64))
def test_key_partition_is_in_range(key, n):
    assert 0 <= partition_for_key(key, n) < n


# ------------------------------------------------------------------ config and names


def test_snappy_is_refused_clearly():
    with pytest.raises(Unsupported, match="SNAPPY"):
        ProducerConfig(compression_type=CompressionType.SNAPPY)


def test_batching_disabled_means_one_message_per_batch():
    assert ProducerConfig(batching_enabled=False).batching_max_messages == 1


def test_service_urls_parse_with_defaults():
    assert parse_service_url("magnetar://h:1234") == ("h", 1234)
    assert parse_service_url("pulsar://broker/") == ("broker", 6650)
    assert parse_service_url("127.0.0.1:7000") == ("127.0.0.1", 7000)
    assert normalize_url("pulsar://h:1") == normalize_url("magnetar://h:1/")


def test_consumer_type_accepts_pulsar_and_wire_spellings():
    assert ConsumerType.Key_Shared is ConsumerType.KeyShared
    assert ConsumerType("Key_Shared").value == "Key_Shared"


def test_result_of_maps_errors_to_pulsar_names():
    assert result_of(MessageTooLarge("x")) is Result.MessageTooBig
    assert result_of(Timeout("x")) is Result.Timeout
    assert result_of(ValueError()) is Result.UnknownError
