"""The placement rules of namespace isolation policies (broker/cluster/isolation.py), as pure functions.

The cluster tests (test_isolation*.py) show the rules enforced by running brokers; these cover the
cases a four-broker cluster does not reach cheaply: secondaries below ``min_limit``, host-only
regexes, overlapping policies, and no shared broker.
"""

from __future__ import annotations

from typing import Any

import pytest

from magnetar.broker.cluster.isolation import InvalidIsolationPolicy, IsolationPolicies, IsolationPolicy

B = ["10.0.0.1:6650", "10.0.0.2:6650", "10.0.0.3:6650", "10.0.0.4:6650"]


def data(ns: str, primary: list[str], secondary: list[str] | None = None, min_limit: int = 1) -> dict[str, Any]:
    return {
        "namespaces": [ns],
        "primary": primary,
        "secondary": secondary or [],
        "auto_failover_policy": {"policy_type": "min_available", "parameters": {"min_limit": str(min_limit)}},
    }


def policies(**named: dict[str, Any]) -> IsolationPolicies:
    return IsolationPolicies({name: IsolationPolicy.from_json(d) for name, d in named.items()})


def test_primaries_only_while_enough_of_them_live() -> None:
    p = policies(gold=data("gold/.*", [r"10\.0\.0\.[12]"], [r"10\.0\.0\.3"], min_limit=2))
    assert p.candidates("gold/ns", B).brokers == B[:2]
    # One primary left (< min_limit 2): the secondary joins; never broker 4.
    assert p.candidates("gold/ns", [B[1], B[2], B[3]]).brokers == [B[1], B[2]]
    found = p.candidates("gold/ns", [B[3]])
    assert found.brokers == [] and found.policy == "gold"
    assert "no broker of namespace isolation policy gold is available for namespace gold/ns" in found.why_empty


def test_unmatched_namespaces_go_to_shared_brokers_only_and_secondaries_stay_shared() -> None:
    p = policies(gold=data("gold/.*", [r"10\.0\.0\.1"], [r"10\.0\.0\.2"]))
    assert p.candidates("public/default", B).brokers == B[1:]  # a secondary is still shared (Pulsar)
    none = policies(gold=data("gold/.*", [r"10\.0\.0\.[0-9]"])).candidates("public/default", B)
    assert none.brokers == [] and none.policy is None and "no shared broker" in none.why_empty


def test_regexes_match_the_whole_host_port_or_the_host() -> None:
    p = policies(
        by_port=data("a/.*", [r"10\.0\.0\.1:6650"]), by_host=data("b/.*", [r"10\.0\.0\.2"]), part=data("c/.*", ["10"])
    )
    assert p.candidates("a/x", B).brokers == [B[0]]
    assert p.candidates("b/x", B).brokers == [B[1]]
    assert p.candidates("c/x", B).brokers == []  # "10" is no whole name: full matches only
    assert p.candidates("ab/x", B).policy is None  # namespace regexes match the whole tenant/namespace


def test_the_first_policy_by_name_wins_when_several_match() -> None:
    p = policies(zeta=data("t/.*", [r"10\.0\.0\.2"]), alpha=data("t/n.*", [r"10\.0\.0\.1"]))
    assert p.candidates("t/ns", B).policy == "alpha" and p.candidates("t/other", B).policy == "zeta"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"namespaces": ["a/.*"], "primary": ["x"]}, "auto_failover_policy is required"),
        (data("a/.*", ["("]), "primary regex '(' is invalid"),
        (data("(", ["x"]), "namespaces regex '(' is invalid"),
        (data("a/.*", ["x"], ["["]), "secondary regex '[' is invalid"),
        (data("a/.*", []), "primary must name at least one"),
        (data("a/.*", ["x"], min_limit=-1), "min_limit must not be negative"),
    ],
)
def test_bad_policies_are_refused_with_why(body: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidIsolationPolicy, match=reason.replace("(", r"\(").replace("[", r"\[")):
        IsolationPolicy.from_json(body)


def test_json_round_trip_is_pulsars_shape() -> None:
    body = data("a/.*", ["x"], ["y"], min_limit=2)
    got = IsolationPolicy.from_json(body).to_json()
    assert got["auto_failover_policy"]["parameters"] == {"min_limit": "2", "usage_threshold": "100"}
    assert {k: got[k] for k in ("namespaces", "primary", "secondary")} == {
        "namespaces": ["a/.*"],
        "primary": ["x"],
        "secondary": ["y"],
    }
