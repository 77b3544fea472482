"""Bundle ranges: Pulsar's names, BundlesData JSON, lookup of a hash, and the two split algorithms."""

from __future__ import annotations

import pytest

from magnetar.broker.cluster.ownership import bundle_of
from magnetar.broker.loadbalance.bundle_ranges import (
    RANGE_EQUALLY_DIVIDE,
    TOPIC_COUNT_EQUALLY_DIVIDE,
    BundleRanges,
    InvalidBundle,
    equal,
    format_bundle,
    parse_bundle,
    split,
    split_boundary,
)
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.topic_name import TopicName


def test_four_equal_bundles_have_pulsars_names() -> None:
    assert equal(4).names() == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]


def test_bundles_data_json_round_trips() -> None:
    doc = equal(4).to_json()
    assert doc == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
    assert BundleRanges.from_json(doc) == equal(4)
    assert BundleRanges.from_json({"numBundles": 8}) == equal(8)


@pytest.mark.parametrize(
    "doc",
    [
        None,
        {},
        {"boundaries": ["0x00000000", "0x80000000"]},  # does not reach 0xffffffff
        {"boundaries": ["0x00000000", "0x90000000", "0x80000000", "0xffffffff"]},
        {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 2},
        {"boundaries": ["zz", "0xffffffff"]},
        {"numBundles": 0},
    ],
)
def test_malformed_bundles_data_is_refused(doc: object) -> None:
    with pytest.raises(InvalidBundle):
        BundleRanges.from_json(doc)


@pytest.mark.parametrize("name", ["0x1", "0x10_0x05", "zz_0x10", "10_20", "0x0_0x100000000", "a_b_c"])
def test_malformed_bundle_names_are_invalid(name: str) -> None:
    with pytest.raises(InvalidBundle, match="Invalid bundle range"):
        parse_bundle(name)


def test_a_hash_finds_its_range_and_the_top_hash_the_last_one() -> None:
    r = equal(4)
    assert r.find(0) == "0x00000000_0x40000000"
    assert r.find(0x3FFFFFFF) == "0x00000000_0x40000000"
    assert r.find(0x40000000) == "0x40000000_0x80000000"
    assert r.find(0xFFFFFFFF) == "0xc0000000_0xffffffff"


@pytest.mark.parametrize("n", [1, 3, 4, 16])
def test_equal_ranges_agree_with_the_brokers_bundle_of(n: int) -> None:
    r = equal(n)
    for i in range(200):
        topic = TopicName.parse(f"persistent://public/default/t-{i}")
        assert r.find(crc32c(str(topic).encode())) == bundle_of(topic, n)


def test_range_equally_divide_halves_the_range_as_pulsar() -> None:
    assert split(0x00000000, 0x40000000, RANGE_EQUALLY_DIVIDE) == ("0x00000000_0x20000000", "0x20000000_0x40000000")
    # the last bundle: Pulsar names its halves 0xc0000000_0xdfffffff and 0xdfffffff_0xffffffff
    assert split(0xC0000000, 0xFFFFFFFF, RANGE_EQUALLY_DIVIDE) == ("0xc0000000_0xdfffffff", "0xdfffffff_0xffffffff")


def test_topic_count_equally_divide_puts_half_the_topics_on_each_side() -> None:
    hashes = [0x10, 0x30, 0x50, 0x70, 0x90]
    at = split_boundary(0, 0x100, TOPIC_COUNT_EQUALLY_DIVIDE, hashes)
    assert at == 0x30 + (0x50 - 0x30) // 2  # between the 2nd and 3rd of five, as Pulsar
    assert split_boundary(0, 0x100, TOPIC_COUNT_EQUALLY_DIVIDE, [0x80, 0x20, 0x60, 0x40]) == 0x50
    even = [0x20, 0x40, 0x60, 0x80]
    lo_half = [h for h in even if h < 0x50]
    assert len(lo_half) == 2


def test_topic_count_cannot_split_fewer_than_two_topics() -> None:
    assert split(0, 0x100, TOPIC_COUNT_EQUALLY_DIVIDE, []) is None
    assert split(0, 0x100, TOPIC_COUNT_EQUALLY_DIVIDE, [0x42]) is None
    assert split(0, 0x100, TOPIC_COUNT_EQUALLY_DIVIDE, [0x500]) is None  # outside the bundle
    assert split(0x42, 0x100, TOPIC_COUNT_EQUALLY_DIVIDE, [0x42, 0x42]) is None  # no boundary inside


def test_unknown_algorithm_is_refused_with_pulsars_message() -> None:
    with pytest.raises(InvalidBundle, match="Unsupported namespace bundle split algorithm"):
        split(0, 0x100, "specified_positions_divide")


def test_with_split_replaces_one_bundle_by_two() -> None:
    r = equal(2).with_split("0x80000000_0xffffffff", 0xC0000000)
    assert r.names() == ["0x00000000_0x80000000", "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]
    assert r.to_json()["numBundles"] == 3
    with pytest.raises(InvalidBundle):
        r.with_split("0x00000000_0x40000000", 0x20000000)  # not one of its bundles
    with pytest.raises(InvalidBundle):
        r.with_split("0x00000000_0x80000000", 0x80000000)  # not strictly inside


def test_format_and_parse_are_inverse() -> None:
    assert parse_bundle(format_bundle(0x1234, 0xFFFFFFFF)) == (0x1234, 0xFFFFFFFF)
