"""The pure scale-down plan of a BookieEnsemble: which bookie to drain, and what its result means."""

from __future__ import annotations

import pytest

from magnetar_operator.bookie_ensembles import ScaleDown, plan_scale_down
from magnetar_operator.conditions import SCALING
from magnetar_operator.decommissioning import DrainResult


@pytest.mark.parametrize(("want", "current"), [(3, None), (3, 3), (4, 3)])
def test_no_drain_without_a_scale_down(want: int, current: int | None) -> None:
    assert plan_scale_down("bk", "data", want, current) is None


def test_the_highest_ordinal_is_drained_first() -> None:
    assert plan_scale_down("bk", "data", 1, 3) == ScaleDown("bk-2.bk.data.svc:3181", current=3, want=1)
    assert plan_scale_down("bk", "data", 2, 3) == ScaleDown("bk-2.bk.data.svc:3181", current=3, want=2)


def test_a_finished_drain_removes_one_pod_and_asks_for_the_next() -> None:
    step = ScaleDown("bk-2.bk.data.svc:3181", current=3, want=1)
    replicas, cond, retry = step.after(DrainResult(True, False, "bookie bk-2 drained: {}"))
    assert replicas == 2 and retry == "scaling down: next bookie"
    assert (cond.type, cond.status, cond.reason) == (SCALING, True, "Decommissioned")
    assert cond.message == "bookie bk-2 drained: {}; StatefulSet 3 -> 2 replicas (target 1)"
    last = ScaleDown("bk-1.bk.data.svc:3181", current=2, want=1)
    replicas, _, retry = last.after(DrainResult(True, False, "drained"))
    assert replicas == 1 and retry is None  # the target reached: no retry


def test_an_unfinished_drain_keeps_the_pod() -> None:
    step = ScaleDown("bk-2.bk.data.svc:3181", current=3, want=2)
    replicas, cond, retry = step.after(DrainResult(False, False, "draining bookie bk-2: 2 ledgers left"))
    assert replicas == 3 and retry == "draining bookie bk-2: 2 ledgers left"
    assert (cond.status, cond.reason, cond.message) == (False, "Decommissioning", retry)


def test_an_impossible_drain_is_reported_not_retried() -> None:
    step = ScaleDown("bk-2.bk.data.svc:3181", current=3, want=2)
    replicas, cond, retry = step.after(DrainResult(False, True, "bookie bk-2 cannot be drained: too few"))
    assert replicas == 3 and retry is None
    assert (cond.status, cond.reason) == (False, "DecommissionImpossible")
