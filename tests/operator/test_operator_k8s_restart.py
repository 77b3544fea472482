"""The operator restarts (kill -9 mid-way, then a clean restart) without repeating finished work
or leaving children behind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.operator.harness import ControlPlane, OperatorProcess, admin_call, condition, wait_for
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

WORK_REASONS = {"Created", "Updated", "DriftCorrected"}


def resources(tenant: str) -> list[dict[str, Any]]:
    def res(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "magnetar.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}

    return [
        res("Tenant", tenant, {}),
        res(
            "Namespace",
            "n",
            {
                "tenant": tenant,
                "name": "ns",
                "messageTTLSeconds": 120,
                "persistence": {"ensembleSize": 2, "writeQuorum": 2, "ackQuorum": 1},
            },
        ),
        *(res("Topic", f"t{i}", {"namespace": f"{tenant}/ns", "name": f"t{i}", "partitions": i + 1}) for i in range(3)),
        res(
            "BookieEnsemble", "bk", {"replicas": 3, "image": "localhost/magnetar-bookie:1", "storage": {"size": "1Gi"}}
        ),
    ]


def plural(kind: str) -> str:
    return {"Tenant": "tenants", "Namespace": "namespaces", "Topic": "topics", "BookieEnsemble": "bookieensembles"}[
        kind
    ] + ".magnetar.dev"


def all_ready(cp: ControlPlane, ns: str, items: list[dict[str, Any]]) -> bool:
    for item in items:
        obj = cp.get(plural(item["kind"]), item["metadata"]["name"], ns)
        type_ = "Reconciled" if item["kind"] == "BookieEnsemble" else "Ready"
        if condition(obj, type_).get("status") != "True":
            return False
    return True


def snapshot(cp: ControlPlane, ns: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything a repeated piece of work would change: versions, transition times, events."""
    snap: dict[str, Any] = {}
    for kind, name in (
        ("statefulset", "bk"),
        ("service", "bk"),
        ("poddisruptionbudget", "bk"),
        ("configmap", "bk-config"),
    ):
        obj = cp.get(kind, name, ns)
        assert obj is not None
        # Controllers keep writing the status of StatefulSets and PDBs; their spec has a generation.
        meta = obj["metadata"]
        snap[f"{kind}/{name}"] = meta.get("generation") or meta["resourceVersion"]
    for item in items:
        obj = cp.get(plural(item["kind"]), item["metadata"]["name"], ns)
        assert obj is not None
        snap[item["metadata"]["name"]] = [
            (c["type"], c["status"], c["reason"], c["lastTransitionTime"]) for c in obj["status"]["conditions"]
        ]
    events = json.loads(cp.kubectl("-n", ns, "get", "events", "-o", "json"))["items"]
    snap["work-events"] = sorted(
        (e["involvedObject"]["name"], e["reason"], e.get("count") or 1) for e in events if e["reason"] in WORK_REASONS
    )
    return snap


def test_restart_midway_and_clean_restart_repeat_nothing(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"restart-{uid}"
    items = resources(tenant)
    crds.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    # Kill the operator as soon as it has started working, before it can have finished.
    wait_for(
        "the first broker write",
        lambda: admin_call(broker, "GET", f"tenants/{tenant}")[0] == 200,
        timeout=20,
        every=0.05,
    )
    operator.kill9()
    operator.start()
    wait_for("everything Ready after the restart", lambda: all_ready(crds, ns, items), timeout=40)

    # Nothing duplicated, nothing left over: exactly the children one ensemble needs.
    names = crds.kubectl("-n", ns, "get", "statefulsets,services,poddisruptionbudgets,configmaps", "-o", "name")
    ours = sorted(n for n in names.split() if "kube-root-ca" not in n)
    assert ours == ["configmap/bk-config", "poddisruptionbudget.policy/bk", "service/bk", "statefulset.apps/bk"]
    for i in range(3):
        assert admin_call(broker, "GET", f"persistent/{tenant}/ns/t{i}/partitions")[1] == {"partitions": i + 1}
    events = json.loads(crds.kubectl("-n", ns, "get", "events", "-o", "json"))["items"]
    created = [e["involvedObject"]["name"] for e in events if e["reason"] == "Created"]
    assert len(created) == len(set(created)), f"some object was created twice: {created}"

    # A clean restart of a settled system changes nothing at all (this time via the console script).
    before = snapshot(crds, ns, items)
    operator.stop()
    operator.start(console_script=True)
    marker = f"===== operator start #{operator.starts} ====="

    def resumed() -> bool:
        log = operator.log_text().split(marker, 1)[1]
        return log.count("Resuming is processed") >= len(items)

    wait_for("the new operator to resume every resource", resumed, timeout=40)
    assert snapshot(crds, ns, items) == before
