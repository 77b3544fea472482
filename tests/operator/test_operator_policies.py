"""Pure policy rules: spec fields to admin bodies, impossible specs, read-back comparison."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar_operator import conditions, policies
from magnetar_operator.conditions import READY, Condition
from magnetar_operator.policies import InvalidSpec
from magnetar_operator.topics import check_partitions


def test_namespace_spec_maps_to_pulsar_bodies() -> None:
    spec = {
        "persistence": {"ensembleSize": 3, "writeQuorum": 3, "ackQuorum": 2},
        "retention": {"timeInMinutes": 60, "sizeInMB": 100},
        "messageTTLSeconds": 30,
        "backlogQuota": {"limitSize": 1024, "policy": "producer_exception"},
        "deduplication": True,
        "maxProducersPerTopic": 5,
    }
    want = policies.desired(spec, level="namespace")
    assert want["persistence"].body == {
        "bookkeeperEnsemble": 3,
        "bookkeeperWriteQuorum": 3,
        "bookkeeperAckQuorum": 2,
    }
    assert want["retention"].endpoint == "retention"
    assert want["retention"].body == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert want["messageTTLSeconds"].endpoint == "messageTTL" and want["messageTTLSeconds"].body == 30
    assert want["backlogQuota"].body == {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    assert want["backlogQuota"].params is None
    assert want["deduplication"].body is True
    assert want["maxProducersPerTopic"].endpoint == "maxProducersPerTopic"


def test_topic_level_uses_topic_endpoint_names() -> None:
    want = policies.desired({"maxProducers": 2, "maxConsumers": 3}, level="topic")
    assert (want["maxProducers"].endpoint, want["maxConsumers"].endpoint) == ("maxProducers", "maxConsumers")


def test_message_age_quota_is_sent_with_its_type() -> None:
    want = policies.desired(
        {"backlogQuota": {"type": "message_age", "limitTime": 60, "policy": "producer_exception"}},
        level="namespace",
    )
    assert want["backlogQuota"].params == {"backlogQuotaType": "message_age"}


@pytest.mark.parametrize(
    ("persistence", "words"),
    [
        (
            {"ensembleSize": 3, "writeQuorum": 2, "ackQuorum": 3},
            "ackQuorum (3) is larger than persistence.writeQuorum (2)",
        ),
        (
            {"ensembleSize": 2, "writeQuorum": 3, "ackQuorum": 2},
            "writeQuorum (3) is larger than persistence.ensembleSize (2)",
        ),
    ],
)
def test_quorums_out_of_order_are_refused_with_the_reason(persistence: dict[str, int], words: str) -> None:
    with pytest.raises(InvalidSpec, match=words.replace("(", r"\(").replace(")", r"\)")):
        policies.validate({"persistence": persistence})


def test_retention_smaller_than_backlog_quota_is_refused() -> None:
    spec = {
        "retention": {"timeInMinutes": 10, "sizeInMB": 1},
        "backlogQuota": {"limitSize": 2 * 1024 * 1024, "policy": "producer_exception"},
    }
    with pytest.raises(InvalidSpec, match="retention must be at least the backlog quota"):
        policies.validate(spec)
    policies.validate({**spec, "retention": {"timeInMinutes": 10, "sizeInMB": -1}})


def test_valid_quorums_pass() -> None:
    policies.validate({"persistence": {"ensembleSize": 3, "writeQuorum": 3, "ackQuorum": 2}})


def test_read_back_tolerates_extra_broker_fields() -> None:
    want = {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2}
    have = dict(want, managedLedgerMaxMarkDeleteRate=0)
    assert policies.matches(want, have)
    assert not policies.matches(want, dict(have, bookkeeperAckQuorum=1))
    assert not policies.matches(want, None)
    assert not policies.matches(True, 1)
    assert policies.matches(5, 5)


def test_namespace_document_lookup_and_unenforced_names() -> None:
    doc: dict[str, Any] = {
        "backlog_quota_map": {"destination_storage": {"limitSize": 1, "limitTime": -1, "policy": "producer_exception"}},
        "deduplicationEnabled": True,
        "unenforced": ["backlog_quota_map", "deduplicationEnabled"],
    }
    assert policies.from_namespace_document("backlogQuota", doc, quota_type="destination_storage")["limitSize"] == 1
    assert policies.from_namespace_document("backlogQuota", doc, quota_type="message_age") is None
    assert policies.not_enforced(["backlogQuota", "deduplication", "persistence"], doc["unenforced"]) == [
        "backlogQuota",
        "deduplication",
    ]
    assert policies.not_enforced(["maxProducers"], ["max_producers_per_topic"]) == ["maxProducers"]


@pytest.mark.parametrize(
    ("want", "have", "unpartitioned", "ok"),
    [
        (4, 0, False, True),
        (4, 4, False, True),
        (6, 4, False, True),
        (2, 4, False, False),
        (0, 4, False, False),
        (4, 0, True, False),
        (0, 0, True, True),
    ],
)
def test_partition_changes(want: int, have: int, unpartitioned: bool, ok: bool) -> None:
    if ok:
        check_partitions(want, have, unpartitioned)
    else:
        with pytest.raises(InvalidSpec):
            check_partitions(want, have, unpartitioned)


def test_condition_transition_time_moves_only_when_status_flips() -> None:
    first = conditions.merge([], [Condition(READY, False, "WaitingForTenant", "x")], generation=1, timestamp="t1")
    same = conditions.merge(first, [Condition(READY, False, "InvalidSpec", "y")], generation=2, timestamp="t2")
    flipped = conditions.merge(same, [Condition(READY, True, "Created", "z")], generation=2, timestamp="t3")
    assert [c["lastTransitionTime"] for c in (first[0], same[0], flipped[0])] == ["t1", "t1", "t3"]
    assert same[0]["reason"] == "InvalidSpec" and same[0]["observedGeneration"] == 2


@pytest.mark.parametrize(
    ("old_reason", "changed", "created", "cause", "expected"),
    [
        (None, True, True, "create", "Created"),
        (None, False, False, "create", "Synced"),
        ("Created", True, False, "update", "Updated"),
        ("Created", True, True, "timer", "DriftCorrected"),
        ("Created", True, True, "resume", "DriftCorrected"),
        ("DriftCorrected", False, False, "timer", "DriftCorrected"),
    ],
)
def test_ready_reason(old_reason: str | None, changed: bool, created: bool, cause: str, expected: str) -> None:
    status = (
        {"conditions": [{"type": READY, "status": "True", "reason": old_reason, "message": "m"}]} if old_reason else {}
    )
    reason, _ = conditions.ready_reason_after(status, changed=changed, created=created, cause=cause)
    assert reason == expected
