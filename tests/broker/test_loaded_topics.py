"""``LoadedTopics``: the broker's topic map keeps its namespace and name indexes right through
inserts and removals (the policy watch relies on them to find the topics a record governs)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from magnetar.broker.topics.loaded import LoadedTopics


def _topic(label: str) -> Any:
    return cast(Any, label)  # the map never looks inside a topic


def test_indexes_follow_inserts_and_removals() -> None:
    t = LoadedTopics()
    keys = [
        "persistent://a/ns/plain",
        "persistent://a/ns/part-partition-0",
        "persistent://a/ns/part-partition-1",
        "persistent://a/other/plain",
        "persistent://b/ns/plain",
    ]
    for k in keys:
        t[k] = _topic(k)
    assert sorted(t.in_namespace("a", "ns")) == sorted(keys[:3])
    assert t.named("a", "ns", "plain") == ["persistent://a/ns/plain"]
    assert sorted(t.named("a", "ns", "part")) == keys[1:3]  # a partitioned topic's record governs its partitions
    assert t.named("a", "ns", "part-partition-1") == [keys[2]]  # and a partition's own record only itself
    assert t.name_of(keys[2]).partition_index == 1

    t[keys[0]] = _topic("replaced")  # a second insert of a key does not duplicate it
    assert t.named("a", "ns", "plain") == [keys[0]] and t[keys[0]] == "replaced"

    assert t.pop(keys[1]) == keys[1]
    assert t.named("a", "ns", "part") == [keys[2]]
    assert t.pop("persistent://a/ns/absent", None) is None
    del t[keys[2]]
    assert t.named("a", "ns", "part") == [] and t.named("a", "ns", "part-partition-1") == []
    assert t.in_namespace("a", "ns") == [keys[0]]
    with pytest.raises(KeyError):
        t.name_of(keys[2])

    t.clear()
    assert t.in_namespace("a", "ns") == [] and t.named("b", "ns", "plain") == [] and not t


def test_mutators_that_would_bypass_the_indexes_are_refused() -> None:
    t = LoadedTopics()
    with pytest.raises(TypeError):
        t.update({"persistent://a/ns/x": _topic("x")})
    with pytest.raises(TypeError):
        t.setdefault("persistent://a/ns/x", _topic("x"))
    assert not t and t.in_namespace("a", "ns") == []
