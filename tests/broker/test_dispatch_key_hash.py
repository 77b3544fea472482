"""Key hashing and Key_Shared selectors (no broker needed)."""

from __future__ import annotations

import pytest
from tests.broker.conftest import FakeSink, consumer

from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash, murmur3_32
from magnetar.broker.subscriptions.dispatchers.key_selectors import AutoSplitSelector, StickySelector
from magnetar.broker.subscriptions.dispatchers.key_shared import KeySharedDispatcher
from magnetar.protocol import commands as c
from magnetar.protocol.errors import ConsumerBusy, InvalidCommand


def test_murmur3_matches_the_reference_vectors() -> None:
    # Published MurmurHash3_x86_32 test vectors (seed, input, hash).
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"\xff\xff\xff\xff") == 0x76293B50
    assert murmur3_32(b"\x21\x43\x65") == 0x7E4A8634
    assert murmur3_32(b"\x21\x43\x65\x87", 0x5082EDEE) == 0x2362F9DE
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723


def test_key_hash_is_the_utf8_murmur3_slot() -> None:
    assert key_hash("") == 0
    assert key_hash("hello") == 0x248BFA47 % c.KEY_HASH_RANGE
    assert key_hash("clé") == murmur3_32("clé".encode()) % c.KEY_HASH_RANGE
    assert all(0 <= key_hash(f"k{i}") < c.KEY_HASH_RANGE for i in range(1000))


def test_auto_split_takes_the_lower_half_of_the_largest_range_and_merges_on_leave() -> None:
    sink = FakeSink()
    a, b, d, e = (consumer(sink, i) for i in range(4))
    sel = AutoSplitSelector()
    sel.add(a)
    assert sel.ranges(a) == [(0, 65536)]
    assert sel.select(0) is a and sel.select(65535) is a
    sel.add(b)  # Pulsar: 0 -> 32768 (new consumer) -> 65536 (first consumer)
    assert sel.ranges(b) == [(0, 32768)] and sel.ranges(a) == [(32769, 65536)]
    assert sel.select(32768) is b and sel.select(32769) is a
    sel.add(d)  # both halves are equal: the lowest one is split
    assert sel.ranges(d) == [(0, 16384)] and sel.ranges(b) == [(16385, 32768)]
    sel.add(e)  # the largest is now a's
    assert sel.ranges(e) == [(32769, 49152)] and sel.ranges(a) == [(49153, 65536)]
    sel.remove(b)  # its slots go to the range above it
    assert sel.ranges(e) == [(16385, 49152)]
    sel.remove(a)  # the top range's owner left: the one below takes the top bound
    assert sel.ranges(e) == [(16385, 65536)] and sel.select(65535) is e
    assert sel.ranges(d) == [(0, 16384)]
    sel.remove(d)
    sel.remove(e)
    assert sel.select(5) is None


def test_sticky_ranges_conflict_with_consumer_busy_and_leave_holes_undelivered() -> None:
    sink = FakeSink()
    sel = StickySelector()
    a = consumer(sink, 1, ranges=[(0, 99), (200, 299)])
    sel.add(a)
    with pytest.raises(ConsumerBusy, match="c1"):
        sel.add(consumer(sink, 2, ranges=[(250, 400)]))
    b = consumer(sink, 3, ranges=[(100, 150)])
    sel.add(b)
    assert sel.select(0) is a and sel.select(99) is a and sel.select(250) is a
    assert sel.select(100) is b and sel.select(150) is b
    assert sel.select(151) is None and sel.select(65535) is None
    with pytest.raises(InvalidCommand):
        sel.add(consumer(sink, 4, ranges=[(500, 400)]))
    with pytest.raises(InvalidCommand):
        sel.add(consumer(sink, 5, ranges=[(0, 65536)]))
    with pytest.raises(InvalidCommand):
        sel.add(consumer(sink, 6, ranges=[]))
    sel.remove(a)
    assert sel.select(0) is None and sel.select(100) is b


def test_key_shared_refuses_mixing_modes_while_consumers_remain() -> None:
    sink = FakeSink()
    d = KeySharedDispatcher()
    first = consumer(sink, 1, mode=c.KEY_SHARED_STICKY, ranges=[(0, 10)])
    d.add(first)
    with pytest.raises(ConsumerBusy, match="STICKY"):
        d.add(consumer(sink, 2))  # AUTO_SPLIT by default
    assert d.consumer_stats(first) == {"keyHashRanges": ["[0, 10]"]}
    d.remove(first)
    auto = consumer(sink, 3)
    d.add(auto)  # the subscription is empty again: any mode may start it
    assert d.mode == c.KEY_SHARED_AUTO_SPLIT and d.select(12345) is auto
