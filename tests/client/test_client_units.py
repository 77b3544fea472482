"""Client unit tests that need no broker: batch container, ack tracker, permits, routing, config."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.consumer.acks import BatchAckTracker, FlowPermits
from magnetar.client.net.service_url import normalize_url, parse_service_url
from magnetar.client.options import CompressionType, ConsumerType, Result, result_of
from magnetar.client.producer.batch_builder import RECORD_OVERHEAD, Batch, SendReceipt
from magnetar.client.producer.producer import ProducerConfig
from magnetar.client.producer.routing import RoundRobinRouter, java_string_key_hash, partition_for_key
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
    assert [await r for r in receipts] == [MessageId(2, 5, 9, i) for i in range(3)]
    assert receipts[1].result() == MessageId(2, 5, 9, 1)


async def test_batch_callbacks_get_ok_and_ids_or_the_error():
    ok = await _batch()
    calls: list[tuple[object, object]] = []
    ok.add_callback(0, lambda r, m: calls.append((r, m)))
    ok.add_callback(1, lambda r, m: calls.append((r, m)))
    ok.resolve(1, 2, -1, batched=False)
    assert calls == [(Result.Ok, MessageId(-1, 1, 2, -1)), (Result.Ok, MessageId(-1, 1, 2, -1))]
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
    # Pulsar's default hashing (JavaStringHash): String.hashCode() & Integer.MAX_VALUE, mod n.
    assert partition_for_key("order-17", 7) == java_string_key_hash("order-17") % 7
    r = RoundRobinRouter(7, start=0)
    assert {r.choose("order-17") for _ in range(10)} == {java_string_key_hash("order-17") % 7}


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


# ------------------------------------------------------------------ consumption options and trackers


def test_negative_acks_fall_due_after_the_fixed_delay_in_position_order():
    from magnetar.client.consumer.redelivery import NegativeAckTracker

    nacks = NegativeAckTracker(1000)
    nacks.add((7, 3), 0, now=10.0)
    nacks.add((7, 1), 5, now=10.2)
    assert nacks.next_deadline() == 11.0
    assert nacks.due(10.99) == []
    assert nacks.due(11.0) == [(7, 3)]
    assert nacks.due(11.2) == [(7, 1)]
    assert len(nacks) == 0 and nacks.next_deadline() is None


def test_a_second_nack_of_an_entry_replaces_its_deadline():
    from magnetar.client.consumer.redelivery import NegativeAckTracker

    nacks = NegativeAckTracker(1000)
    nacks.add((1, 1), 0, now=0.0)
    nacks.add((1, 1), 0, now=5.0)
    assert nacks.due(1.0) == []  # the first deadline is stale
    assert nacks.next_deadline() == 6.0
    assert nacks.due(6.0) == [(1, 1)]


def test_negative_ack_backoff_grows_with_the_redelivery_count():
    from magnetar.client.consumer.redelivery import NegativeAckTracker
    from magnetar.client.options import MultiplierRedeliveryBackoff

    nacks = NegativeAckTracker(60000, MultiplierRedeliveryBackoff(100, 1000, 2))
    assert [nacks.add((1, i), i, now=0.0) for i in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert nacks.grouping == pytest.approx(0.01)


def test_multiplier_backoff_is_javas():
    from magnetar.client.options import MultiplierRedeliveryBackoff

    backoff = MultiplierRedeliveryBackoff()
    assert (backoff.min_delay_ms, backoff.max_delay_ms, backoff.multiplier) == (1000, 60000, 2.0)
    assert [backoff.next(n) for n in (0, 1, 2, 5, 6, 10_000)] == [1000, 2000, 4000, 32000, 60000, 60000]
    with pytest.raises(ValueError):
        MultiplierRedeliveryBackoff(2000, 1000)
    with pytest.raises(ValueError):
        MultiplierRedeliveryBackoff(multiplier=0.5)


def test_ack_timeout_counts_from_the_first_hand_out_and_forgets_acked_entries():
    from magnetar.client.consumer.redelivery import AckTimeoutTracker
    from magnetar.client.options import MultiplierRedeliveryBackoff

    timeouts = AckTimeoutTracker(10_000)
    timeouts.add((1, 0), 0, now=0.0)
    timeouts.add((1, 0), 0, now=5.0)  # a second message of the same entry: the clock keeps running
    timeouts.add((1, 1), 0, now=1.0)
    timeouts.add((1, 2), 0, now=2.0)
    timeouts.discard((1, 1))
    assert timeouts.due(9.99) == []
    assert timeouts.due(12.0) == [(1, 0), (1, 2)]
    timeouts.add((2, 0), 0, now=0.0)
    timeouts.add((2, 5), 0, now=0.0)
    timeouts.discard_up_to((2, 3))
    assert timeouts.due(100.0) == [(2, 5)]
    # With a back-off, the back-off's delay for the redelivery count is added to the timeout.
    backed = AckTimeoutTracker(10_000, MultiplierRedeliveryBackoff(1000, 8000, 2))
    backed.add((3, 0), 2, now=0.0)
    assert backed.next_deadline() == 14.0


def test_batch_tracker_knows_batch_sizes_until_the_entry_completes():
    tracker = BatchAckTracker()
    live = tracker.track((7, 0), 3)
    assert tracker.count((7, 0)) == 3 and tracker.get((7, 0)) is live
    assert not tracker.ack((7, 0), 0)
    assert tracker.count((7, 0)) == 3
    assert not tracker.ack((7, 0), 1)
    assert tracker.ack((7, 0), 2)
    assert tracker.count((7, 0)) == 0 and tracker.get((7, 0)) is None


def test_key_shared_policy_checks_as_pulsar_client():
    from magnetar.client.options import ConsumerKeySharedPolicy, KeySharedMode

    policy = ConsumerKeySharedPolicy()
    assert (policy.key_shared_mode, policy.allow_out_of_order_delivery, policy.sticky_ranges) == (
        KeySharedMode.AutoSplit,
        False,
        [],
    )
    with pytest.raises(ValueError, match="sticky_ranges"):
        ConsumerKeySharedPolicy(KeySharedMode.Sticky)
    sticky = ConsumerKeySharedPolicy(KeySharedMode.Sticky, True, [(0, 100), (200, 65535)])
    assert sticky.sticky_ranges == [(0, 100), (200, 65535)]
    assert KeySharedMode.Sticky.value == "STICKY"  # the wire's key_shared_mode
    with pytest.raises(ValueError):
        ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[(0, 65536)])


def test_dead_letter_policy_checks_as_pulsar_client():
    from magnetar.client.options import ConsumerDeadLetterPolicy

    policy = ConsumerDeadLetterPolicy(3)
    assert (policy.max_redeliver_count, policy.dead_letter_topic, policy.initial_subscription_name) == (3, "", "")
    with pytest.raises(ValueError, match="greater than 0"):
        ConsumerDeadLetterPolicy(0)


def test_consumer_config_defaults_are_pulsar_clients_and_checks_raise():
    from magnetar.client.config.consumer import ConsumerConfig
    from magnetar.client.options import ConsumerDeadLetterPolicy, InitialPosition

    config = ConsumerConfig("s")
    assert config.consumer_type is ConsumerType.Exclusive
    assert config.initial_position is InitialPosition.Latest
    assert (config.receiver_queue_size, config.negative_ack_redelivery_delay_ms) == (1000, 60000)
    assert config.unacked_messages_timeout_ms is None and not config.ack_timeout_enabled
    assert (config.ack_timeout_tick_time_ms, config.priority_level, config.retry_enable) == (1000, 0, False)
    assert config.max_redeliver_count is None
    assert ConsumerConfig("s", retry_enable=True).max_redeliver_count == 16  # Java's MAX_RECONSUMETIMES
    assert ConsumerConfig("s", dead_letter_policy=ConsumerDeadLetterPolicy(4)).max_redeliver_count == 4
    assert ConsumerConfig("s", "Key_Shared").consumer_type is ConsumerType.KeyShared
    # pulsar-client refuses a non-zero ack timeout under 10 s with ValueError; 0 means off.
    with pytest.raises(ValueError, match="10 seconds"):
        ConsumerConfig("s", unacked_messages_timeout_ms=5000)
    assert not ConsumerConfig("s", unacked_messages_timeout_ms=0).ack_timeout_enabled
    with pytest.raises(ValueError):
        ConsumerConfig("s", priority_level=-1)
    # Options we do not implement raise rather than being ignored.
    with pytest.raises(Unsupported, match="message_listener"):
        ConsumerConfig("s", message_listener=lambda consumer, msg: None)


def test_letter_topic_names_are_pulsars():
    from magnetar.client.consumer.dead_letter import default_dead_letter_topic, retry_letter_topic

    assert retry_letter_topic("orders", "s") == "persistent://public/default/orders-s-RETRY"
    assert default_dead_letter_topic("t/n/orders-partition-1", "s") == "persistent://t/n/orders-partition-1-s-DLQ"


def test_letter_properties_keep_the_first_origin_through_retries():
    from magnetar.client.consumer.dead_letter import ORIGIN_MESSAGE_ID, REAL_TOPIC, letter_properties, origin_key
    from magnetar.client.message import EntryInfo, Message

    class Owner:
        topic = "persistent://public/default/orders"
        partition = -1

    first = Message([b"x", {"a": "1"}, None, 0, 0], EntryInfo((5, 6), 1, 0, 0, Owner(), False), -1)  # type: ignore[arg-type]
    props = letter_properties(first)
    assert props == {"a": "1", REAL_TOPIC: "persistent://public/default/orders", ORIGIN_MESSAGE_ID: "(5,6,-1,-1)"}

    class RetryOwner:
        topic = "persistent://public/default/orders-s-RETRY"
        partition = -1

    retried = Message([b"x", props, None, 0, 0], EntryInfo((9, 9), 1, 0, 1, RetryOwner(), False), -1)  # type: ignore[arg-type]
    assert letter_properties(retried) == props
    assert origin_key(letter_properties(retried)) == origin_key(props) is not None
    assert origin_key({}) is None


def test_reconsume_delay_takes_timedelta_or_milliseconds():
    from datetime import timedelta

    from magnetar.client.consumer.dead_letter import delay_millis

    assert delay_millis(timedelta(seconds=1.5)) == 1500
    assert delay_millis(250) == 250
    assert delay_millis(-5) == 0
    with pytest.raises(ValueError):
        delay_millis(True)


async def test_subscribe_carries_priority_key_shared_policy_and_reader_start():
    from magnetar.client.config.consumer import ConsumerConfig
    from magnetar.client.consumer.consumer import PartitionConsumer
    from magnetar.client.options import ConsumerKeySharedPolicy, KeySharedMode

    def part(config: ConsumerConfig, **kwargs: object) -> PartitionConsumer:
        return PartitionConsumer(
            None,  # type: ignore[arg-type]  # no resolver: only the command is built
            "persistent://public/default/t",
            -1,
            config,
            deliver=lambda msgs: None,
            on_closed=lambda exc: None,
            discard_queued=lambda p: None,
            **kwargs,  # type: ignore[arg-type]
        )

    policy = ConsumerKeySharedPolicy(KeySharedMode.Sticky, True, [(0, 99), (200, 299)])
    cmd = part(ConsumerConfig("s", ConsumerType.KeyShared, key_shared_policy=policy, priority_level=2))._subscribe_cmd(
        9
    )
    assert (cmd["sub_type"], cmd["priority_level"], cmd["key_shared_mode"]) == ("Key_Shared", 2, "STICKY")
    assert (cmd["key_ranges"], cmd["allow_out_of_order"]) == ([[0, 99], [200, 299]], True)
    assert "durable" not in cmd and "start_message_id" not in cmd
    # A reader starting inside a batch asks for the whole entry and drops the earlier indexes itself.
    reader = part(ConsumerConfig("r"), durable=False, start_message_id=MessageId(-1, 3, 4, 5))
    cmd = reader._subscribe_cmd(10)
    assert (cmd["durable"], cmd["start_message_id"], cmd["start_inclusive"]) == (False, [3, 4, -1], True)
    assert reader._skipped_indexes((3, 4), 10, True) == {0, 1, 2, 3, 4, 5}
    assert reader._skipped_indexes((3, 5), 10, True) == set()
    earliest = part(ConsumerConfig("r"), durable=False, start_message_id=MessageId.earliest)._subscribe_cmd(11)
    assert (earliest["start_message_id"], "start_inclusive" in earliest) == ([-1, -1, -1], False)


def test_top_level_names_are_kept_after_the_first_lookup() -> None:
    """``magnetar.Result`` is resolved once through the package's ``__getattr__`` and then kept as a
    module global, so a callback that reads it per message pays an attribute read, not an import."""
    import magnetar
    import magnetar.client

    magnetar.__dict__.pop("Result", None)
    assert magnetar.Result is magnetar.client.Result
    assert magnetar.__dict__["Result"] is magnetar.client.Result
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        magnetar.NoSuchName  # noqa: B018
    assert "NoSuchName" not in magnetar.__dict__
