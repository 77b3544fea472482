"""Bookie restarts on a real control plane: one pod at a time, highest ordinal first, each one
waiting for the previous to be Ready again; and the broker pool's owner, the operator Deployment.

Mocked: the kubelet, which the e2e suite runs for real. No kubelet runs here, so no pod is ever
scheduled or started; the tests play the kubelet's part by writing pod status — the Ready
condition, or a container waiting in CrashLoopBackOff — through the API server's pods/status
subresource with the admin kubeconfig. The API server, the StatefulSet controller (which recreates
each deleted pod at the new revision), the garbage collector, the operator and the broker it asks
about under-replicated ledgers (a standalone, which has none) are all real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from tests.operator.harness import ControlPlane, OperatorProcess, condition, gone, wait_for
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

SPEC: dict[str, Any] = {
    "replicas": 3,
    "image": "localhost/magnetar-bookie:1",
    "storage": {"size": "1Gi"},
    "config": {"journalSyncData": "true"},
}
SELECTOR = "app.kubernetes.io/component=bookie,magnetar.dev/bookie-ensemble=bk"


class Kubelet:
    """Writes pod status as a kubelet would (pods/status), with the admin credentials."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        api_client = k8s_config.new_client_from_config(str(cp.kubeconfig))  # type: ignore[no-untyped-call]
        self.api: Any = k8s_client.CoreV1Api(api_client)
        self.namespace = namespace

    def _status(self, pod: str, status: dict[str, Any]) -> None:
        self.api.patch_namespaced_pod_status(pod, self.namespace, {"status": status})

    def ready(self, pod: str) -> None:
        self._status(
            pod,
            {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "bookie",
                        "ready": True,
                        "restartCount": 0,
                        "image": "i",
                        "imageID": "",
                        "state": {"running": {}},
                    }
                ],
            },
        )

    def crash_loop(self, pod: str) -> None:
        waiting = {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=bookie"}
        self._status(
            pod,
            {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
                "containerStatuses": [
                    {
                        "name": "bookie",
                        "ready": False,
                        "restartCount": 3,
                        "image": "i",
                        "imageID": "",
                        "state": {"waiting": waiting},
                    }
                ],
            },
        )


def apply(cp: ControlPlane, ns: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": "magnetar.dev/v1alpha1", "kind": "BookieEnsemble", "metadata": {"name": "bk"}, "spec": spec}
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(body))


def pods(cp: ControlPlane, ns: str) -> dict[str, tuple[str, str]]:
    """Pod name -> (uid, revision) of the bookie pods that are not being deleted."""
    items = json.loads(cp.kubectl("-n", ns, "get", "pods", "-l", SELECTOR, "-o", "json"))["items"]
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["metadata"]["labels"]["controller-revision-hash"])
        for p in items
        if not p["metadata"].get("deletionTimestamp")
    }


def ensemble(cp: ControlPlane, ns: str) -> dict[str, Any]:
    return cp.get("bookieensembles.magnetar.dev", "bk", ns) or {}


def rollout(cp: ControlPlane, ns: str, reason: str, text: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        cond = condition(ensemble(cp, ns), "PodsUpToDate")
        return cond if cond.get("reason") == reason and text in cond.get("message", "") else None

    return wait_for(f"PodsUpToDate {reason} saying {text!r}", probe, timeout=40)


def event_reasons(cp: ControlPlane, ns: str) -> list[str]:
    return [e["reason"] for e in cp.events(ns, "bk")]


def test_config_change_restarts_one_bookie_at_a_time_and_a_crash_loop_pauses_it(
    operator: OperatorProcess, crds: ControlPlane, ns: str
) -> None:
    kubelet = Kubelet(crds, ns)
    apply(crds, ns, SPEC)
    first = wait_for("3 bookie pods", lambda: (lambda p: p if len(p) == 3 else None)(pods(crds, ns)))
    for name in first:
        kubelet.ready(name)
    old_revision = first["bk-0"][1]
    rollout(crds, ns, "UpToDate", f"all 3 bookies run revision {old_revision}")

    apply(crds, ns, dict(SPEC, config={"journalSyncData": "false"}))
    sts = wait_for(
        "a new StatefulSet revision",
        lambda: (lambda s: s if s and s["status"].get("updateRevision") not in (None, old_revision) else None)(
            crds.get("statefulset", "bk", ns)
        ),
    )
    new_revision = sts["status"]["updateRevision"]
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}

    def recreated(name: str) -> tuple[str, str]:
        """Wait for `name` to come back at the new revision; nothing else may have been restarted."""
        now = wait_for(
            f"{name} recreated at {new_revision}",
            lambda: (lambda p: p if p.get(name, ("", ""))[1] == new_revision else None)(pods(crds, ns)),
        )
        for other, (uid, _) in first.items():
            if other < name:  # lower ordinals are restarted later, one at a time
                assert now[other][0] == uid, f"{other} was restarted while {name} was not yet ready"
        return now[name]

    # bk-2 first. Recreated but not ready: the roll waits for it.
    bk2 = recreated("bk-2")
    rollout(crds, ns, "Restarting", "waiting for bk-2 to become ready")
    # It crash-loops: the roll pauses, names it and why, and says so in an event.
    kubelet.crash_loop("bk-2")
    paused = rollout(crds, ns, "Paused", "bk-2 not ready: CrashLoopBackOff: back-off 40s")
    assert paused["status"] == "False" and "1/3 bookies on revision" in paused["message"]
    wait_for("a RollingUpdatePaused event", lambda: "RollingUpdatePaused" in event_reasons(crds, ns))
    # Several more passes see the crash loop (kopf logs each retry); none deletes another pod.
    marker = "bk-2 not ready: CrashLoopBackOff"
    seen = operator.log_text().count(marker)
    wait_for("three more paused passes", lambda: operator.log_text().count(marker) >= seen + 3, timeout=40)
    now = pods(crds, ns)
    assert now["bk-2"] == bk2 and now["bk-1"] == first["bk-1"] and now["bk-0"] == first["bk-0"]

    # Ready at last: the roll resumes, with bk-1 and then bk-0, each after the previous is Ready.
    kubelet.ready("bk-2")
    recreated("bk-1")
    wait_for("a RollingUpdateResumed event", lambda: "RollingUpdateResumed" in event_reasons(crds, ns))
    rollout(crds, ns, "Restarting", "waiting for bk-1 to become ready")
    assert pods(crds, ns)["bk-0"] == first["bk-0"]
    kubelet.ready("bk-1")
    recreated("bk-0")
    kubelet.ready("bk-0")

    done = rollout(crds, ns, "UpToDate", f"all 3 bookies run revision {new_revision}")
    assert done["status"] == "True"
    status = ensemble(crds, ns)["status"]
    assert status["updatedReplicas"] == 3
    assert status["currentRevision"] == status["updateRevision"] == new_revision
    restarts = [e for e in crds.events(ns, "bk") if e["reason"] == "RestartingBookie"]
    assert sorted(e["message"].split()[1] for e in restarts) == ["bk-0", "bk-1", "bk-2"]
    assert sum(e.get("count") or 1 for e in restarts) == 3


@pytest.fixture
def pool_operator(
    crds: ControlPlane, broker: StandaloneProcess, ns: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """A second operator, watching only `ns`, that runs a broker pool there owned by Deployment `op`."""
    op = OperatorProcess(
        crds.kubeconfig,
        broker.admin_url,
        tmp_path_factory.mktemp("pool-operator") / "operator.log",
        extra_env={
            "MAGNETAR_MANAGE_BROKER_POOL": "true",
            "MAGNETAR_BROKER_NAMESPACE": ns,
            "MAGNETAR_BROKER_POOL_NAME": "pool",
            "MAGNETAR_BROKER_REPLICAS": "1",
            "MAGNETAR_OPERATOR_DEPLOYMENT": "op",
            "MAGNETAR_POD_SECURITY_CONTEXT": '{"runAsUser": 10000, "fsGroup": 10000}',
        },
        namespaces=[ns],
    )
    op.start()
    try:
        yield op
    finally:
        op.stop()


POOL_CHILDREN = [
    ("statefulset", "pool"),
    ("service", "pool"),
    ("service", "pool-headless"),
    ("configmap", "pool-config"),
    ("poddisruptionbudget", "pool"),
]


def test_the_pool_is_owned_by_the_operator_deployment_and_goes_with_it(
    pool_operator: OperatorProcess, crds: ControlPlane, ns: str
) -> None:
    """`helm uninstall` deletes the operator Deployment; the pool the operator made must go too."""
    missing = f"Deployment {ns}/op (MAGNETAR_OPERATOR_DEPLOYMENT) not found"
    wait_for("the operator to report its Deployment missing", lambda: missing in pool_operator.log_text())
    assert crds.get("statefulset", "pool", ns) is None  # no owner yet: the pool is left alone

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "op"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "op"}},
            "template": {"metadata": {"labels": {"app": "op"}}, "spec": {"containers": [{"name": "op", "image": "x"}]}},
        },
    }
    crds.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(deployment))
    dep = wait_for("the Deployment", lambda: crds.get("deployment", "op", ns))
    for kind, name in POOL_CHILDREN:
        child = wait_for(f"{kind}/{name} of the pool", partial(crds.get, kind, name, ns))
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Deployment", "op", dep["metadata"]["uid"])
        assert ref["controller"] is False
    sts = crds.get("statefulset", "pool", ns)
    assert sts is not None and sts["spec"]["template"]["spec"]["securityContext"] == {
        "runAsUser": 10000,
        "fsGroup": 10000,
    }

    crds.kubectl("delete", "-n", ns, "deployment/op", "--wait=false")
    for kind, name in POOL_CHILDREN:
        wait_for(f"{kind}/{name} garbage-collected", partial(gone, crds, kind, name, ns), timeout=30)
    # The operator, still running, does not bring the pool back without its owner.
    seen = pool_operator.log_text().count(missing)
    wait_for("two more passes of the pool loop", lambda: pool_operator.log_text().count(missing) >= seen + 2)
    assert crds.get("statefulset", "pool", ns) is None
