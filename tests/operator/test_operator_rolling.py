"""The pure rolling-restart planner of bookies (rolling.py): one decision per reconcile, no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar_operator.conditions import ROLLING
from magnetar_operator.rolling import (
    PAUSED,
    RESTARTING,
    UP_TO_DATE,
    WAITING_FOR_SCALE_DOWN,
    PodState,
    Replication,
    plan_roll,
    roll_pending,
)

OLD, NEW = "bk-old", "bk-new"
HEALTHY = Replication(0)


def sts(replicas: int = 3, *, update: str = NEW, generation: int = 2, observed: int | None = 2) -> dict[str, Any]:
    status: dict[str, Any] = {"updateRevision": update, "currentRevision": OLD}
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "metadata": {"name": "bk", "namespace": "data", "generation": generation},
        "spec": {"replicas": replicas},
        "status": status,
    }


def pod(
    ordinal: int,
    revision: str = NEW,
    *,
    ready: bool = True,
    terminating: bool = False,
    phase: str = "Running",
    waiting: tuple[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"bk-{ordinal}",
        "uid": f"uid-{ordinal}-{revision}",
        "labels": {"controller-revision-hash": revision},
    }
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    body: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        **status,
    }
    if waiting is not None:
        reason, message = waiting
        body["containerStatuses"] = [
            {
                "name": "bookie",
                "ready": False,
                "restartCount": 4,
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ]
    return {"metadata": meta, "status": body}


def test_all_pods_on_the_latest_revision_is_up_to_date() -> None:
    step = plan_roll(sts(), [pod(0), pod(1), pod(2)], HEALTHY)
    assert step.reason == UP_TO_DATE and step.done and step.delete is None
    assert step.message == "all 3 bookies run revision bk-new"
    assert step.status_fields() == {"updatedReplicas": 3, "currentRevision": NEW, "updateRevision": NEW}
    cond = step.condition()
    assert (cond.type, cond.status, cond.reason) == (ROLLING, True, UP_TO_DATE)


def test_up_to_date_even_when_pods_are_not_ready() -> None:
    """Readiness is the Ready condition's business; with nothing to restart the roll is done."""
    step = plan_roll(
        sts(), [pod(0, ready=False), pod(1, waiting=("CrashLoopBackOff", "x"), ready=False), pod(2)], HEALTHY
    )
    assert step.reason == UP_TO_DATE and step.delete is None


def test_all_ready_and_nothing_under_replicated_deletes_the_highest_stale_pod() -> None:
    pods = [pod(0, OLD), pod(1, OLD), pod(2, OLD)]
    step = plan_roll(sts(), pods, HEALTHY)
    assert step.reason == RESTARTING and not step.done
    assert step.delete is not None and (step.delete.name, step.delete.uid) == ("bk-2", "uid-2-bk-old")
    assert step.message.startswith("restarting bk-2 (revision bk-old -> bk-new): all 3 bookies ready")
    assert step.status_fields() == {"updatedReplicas": 0, "currentRevision": OLD, "updateRevision": NEW}


def test_the_roll_goes_on_downwards() -> None:
    step = plan_roll(sts(), [pod(0, OLD), pod(1, OLD), pod(2)], HEALTHY)
    assert step.delete is not None and step.delete.name == "bk-1"
    assert step.updated == 1 and "1/3 bookies on revision bk-new" in step.message


@pytest.mark.parametrize(("count", "text"), [(1, "1 ledger under-replicated"), (7, "7 ledgers under-replicated")])
def test_under_replicated_ledgers_pause_the_roll(count: int, text: str) -> None:
    step = plan_roll(sts(), [pod(0, OLD), pod(1, OLD), pod(2)], Replication(count))
    assert step.reason == PAUSED and step.paused and step.delete is None
    assert step.message.startswith(text)
    assert step.condition().status is False


def test_a_broker_that_cannot_answer_pauses_the_roll() -> None:
    replication = Replication(error="broker unreachable: connection refused")
    step = plan_roll(sts(), [pod(0, OLD), pod(1, OLD), pod(2)], replication)
    assert step.reason == PAUSED and step.delete is None
    assert step.message.startswith("broker unreachable: connection refused")


def test_a_crash_looping_updated_pod_pauses_the_roll_and_is_named() -> None:
    pods = [pod(0, OLD), pod(1, OLD), pod(2, ready=False, waiting=("CrashLoopBackOff", "back-off 40s restarting"))]
    step = plan_roll(sts(), pods, HEALTHY)
    assert step.reason == PAUSED and step.delete is None
    assert step.message.startswith("bk-2 not ready: CrashLoopBackOff: back-off 40s restarting")


def test_an_updated_pod_still_starting_is_waited_for_without_pausing() -> None:
    pods = [pod(0, OLD), pod(1, OLD), pod(2, ready=False, phase="Pending")]
    step = plan_roll(sts(), pods, HEALTHY)
    assert step.reason == RESTARTING and step.delete is None
    assert step.message.startswith("waiting for bk-2 to become ready (phase Pending)")


def test_a_stale_pod_that_is_not_ready_is_restarted_first() -> None:
    """It is unavailable anyway: restarting it costs nothing, even while the gate is closed."""
    pods = [pod(0, OLD, ready=False, waiting=("CrashLoopBackOff", "boom")), pod(1, OLD), pod(2, OLD)]
    for replication in (HEALTHY, Replication(3), Replication(error="broker unreachable: down")):
        step = plan_roll(sts(), pods, replication)
        assert step.reason == RESTARTING
        assert step.delete is not None and step.delete.name == "bk-0"
        assert step.message.startswith("restarting bk-0 first: not ready (CrashLoopBackOff: boom) on old revision")


def test_a_fixed_config_recovers_a_paused_roll() -> None:
    """bk-2 crash-loops on a bad revision; the user fixes the config, so that revision is old now."""
    pods = [pod(0, OLD), pod(1, OLD), pod(2, "bk-bad", ready=False, waiting=("CrashLoopBackOff", "bad"))]
    step = plan_roll(sts(update="bk-fixed"), pods, HEALTHY)
    assert step.delete is not None and step.delete.name == "bk-2"


def test_a_stale_pod_not_ready_goes_before_waiting_for_an_updated_one() -> None:
    pods = [pod(0, OLD), pod(1, OLD, ready=False, phase="Pending"), pod(2, ready=False, phase="Pending")]
    step = plan_roll(sts(), pods, HEALTHY)
    assert step.delete is not None and step.delete.name == "bk-1"


def test_a_pod_being_deleted_is_waited_for() -> None:
    step = plan_roll(sts(), [pod(0, OLD), pod(1, OLD), pod(2, OLD, terminating=True)], HEALTHY)
    assert step.reason == RESTARTING and step.delete is None
    assert step.message.startswith("bk-2: pod being deleted")


def test_a_missing_pod_is_waited_for() -> None:
    step = plan_roll(sts(), [pod(0, OLD), pod(1, OLD)], HEALTHY)
    assert step.reason == RESTARTING and step.delete is None
    assert step.message.startswith("bk-2: waiting for the StatefulSet controller to create it")


def test_a_template_not_yet_seen_by_the_controller_is_waited_for() -> None:
    """Right after a template change the StatefulSet's updateRevision is still the old one."""
    step = plan_roll(sts(update=OLD, generation=3, observed=2), [pod(0, OLD), pod(1, OLD), pod(2, OLD)], HEALTHY)
    assert step.reason == RESTARTING and step.delete is None
    assert "observe bk generation 3" in step.message


def test_a_new_statefulset_has_nothing_to_restart() -> None:
    """Its controller may create the pods before it first writes the StatefulSet's status."""
    for pods in ([], [pod(0, ""), pod(1, "")]):
        step = plan_roll(sts(update="", generation=1, observed=None), pods, HEALTHY)
        assert step.reason == UP_TO_DATE and step.delete is None
        # No revision yet: none is written (the CRD refuses an empty one as null, and the pass's
        # whole status patch with it).
        assert step.status_fields() == {"updatedReplicas": len(pods)}


def test_a_scale_down_goes_first() -> None:
    step = plan_roll(sts(), [pod(0, OLD), pod(1, OLD), pod(2, OLD)], HEALTHY, scale_down="draining bookie bk-3")
    assert step.reason == WAITING_FOR_SCALE_DOWN and step.delete is None and not step.paused
    assert step.message.endswith("restarts wait for the scale-down: draining bookie bk-3")


def test_pods_beyond_the_replicas_do_not_count_unless_terminating() -> None:
    step = plan_roll(sts(2), [pod(0), pod(1), pod(2, OLD)], HEALTHY)
    assert step.reason == UP_TO_DATE and step.updated == 2
    step = plan_roll(sts(2), [pod(0, OLD), pod(1), pod(2, OLD, terminating=True)], HEALTHY)
    assert step.reason == RESTARTING and step.delete is None and "bk-2: pod being deleted" in step.message


def test_current_revision_is_read_from_the_pods_not_the_statefulset() -> None:
    """An OnDelete StatefulSet never moves status.currentRevision forward (kubernetes#73492)."""
    done = plan_roll(sts(), [pod(0), pod(1), pod(2)], HEALTHY)
    assert done.current_revision == NEW  # sts() says currentRevision: bk-old
    midway = plan_roll(sts(), [pod(0, "bk-older"), pod(1, OLD), pod(2, OLD)], HEALTHY)
    assert midway.current_revision == OLD


def test_roll_pending_only_with_a_stale_pod() -> None:
    assert not roll_pending(None, [])
    assert not roll_pending(sts(), [pod(0), pod(1), pod(2)])
    assert roll_pending(sts(), [pod(0), pod(1, OLD), pod(2)])


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        ({"containerStatuses": [{"name": "bookie", "state": {"waiting": {"reason": "ContainerCreating"}}}]}, None),
        (
            {
                "containerStatuses": [
                    {"name": "bookie", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}
                ]
            },
            "ImagePullBackOff: no",
        ),
        (
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3"}
                ],
            },
            "Unschedulable: 0/3",
        ),
        (
            {"containerStatuses": [{"name": "bookie", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]},
            "Error: exit code 3",
        ),
        (
            {
                "containerStatuses": [
                    {
                        "name": "bookie",
                        "ready": False,
                        "restartCount": 2,
                        "state": {"running": {}},
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    }
                ]
            },
            "container bookie restarted 2 times, last exit code 1 (Error)",
        ),
        ({"phase": "Failed", "reason": "Evicted", "message": "disk"}, "pod phase Failed (Evicted: disk)"),
        ({"phase": "Running", "containerStatuses": [{"name": "bookie", "state": {"running": {}}}]}, None),
    ],
)
def test_pod_problems_are_read_from_its_status(status: dict[str, Any], problem: str | None) -> None:
    state = PodState.from_pod({"metadata": {"name": "bk-1", "uid": "u", "labels": {}}, "status": status})
    assert state.problem == problem and state.ordinal == 1 and not state.ready
