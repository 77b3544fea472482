"""Tenant, Namespace and Topic on a real API server, reconciled against a real standalone broker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.operator.harness import (
    INTERVAL,
    ControlPlane,
    OperatorProcess,
    admin_call,
    condition,
    wait_for,
)
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

EXAMPLE = """
apiVersion: magnetar.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {adminRoles: [acme-admin], allowedClusters: [local]}
---
apiVersion: magnetar.dev/v1alpha1
kind: Namespace
metadata: {name: acme-orders}
spec:
  tenant: acme
  name: orders
  persistence: {ensembleSize: 3, writeQuorum: 3, ackQuorum: 2}
---
apiVersion: magnetar.dev/v1alpha1
kind: Topic
metadata: {name: acme-orders-created}
spec: {namespace: acme/orders, name: created, partitions: 4}
"""


def apply(cp: ControlPlane, ns: str, text: str) -> None:
    cp.kubectl("apply", "-n", ns, "-f", "-", input=text)


def manifest(kind: str, name: str, spec: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "magnetar.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec})


def wait_condition(
    cp: ControlPlane,
    kind: str,
    name: str,
    ns: str,
    status: str,
    reason: str | None = None,
    timeout: float = 20.0,
    type_: str = "Ready",
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        obj = cp.get(f"{kind}.magnetar.dev", name, ns)
        cond = condition(obj, type_)
        if cond.get("status") == status and (reason is None or cond.get("reason") == reason):
            return obj
        return None

    return wait_for(f"{kind}/{name} {type_}={status} {reason or ''}", probe, timeout=timeout)


def partitions(broker: StandaloneProcess, topic: str) -> int:
    code, body = admin_call(broker, "GET", f"persistent/{topic}/partitions")
    assert code == 200, body
    return int(body["partitions"])


def test_example_becomes_ready_and_exists_on_the_broker(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str
) -> None:
    apply(crds, ns, EXAMPLE)
    for kind, name in (("tenant", "acme"), ("namespace", "acme-orders"), ("topic", "acme-orders-created")):
        obj = wait_condition(crds, kind, name, ns, "True", timeout=15)
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        assert condition(obj, "PoliciesApplied")["status"] in {"True", "False"}
    assert admin_call(broker, "GET", "tenants/acme") == (
        200,
        {"adminRoles": ["acme-admin"], "allowedClusters": ["local"]},
    )
    code, policies = admin_call(broker, "GET", "namespaces/acme/orders")
    assert code == 200
    assert policies["persistence"]["bookkeeperEnsemble"] == 3
    assert policies["persistence"]["bookkeeperWriteQuorum"] == 3
    assert policies["persistence"]["bookkeeperAckQuorum"] == 2
    assert partitions(broker, "acme/orders/created") == 4

    # What kubectl shows: READY and a reason, under the full names, the short names and the category.
    table = crds.kubectl("get", "-n", ns, "tenants.magnetar.dev,namespaces.magnetar.dev,topics.magnetar.dev")
    assert "READY" in table and "REASON" in table and table.count("True") == 3
    assert crds.kubectl("get", "-n", ns, "mten,mns,mtop", "-o", "name").split() == [
        "tenant.magnetar.dev/acme",
        "namespace.magnetar.dev/acme-orders",
        "topic.magnetar.dev/acme-orders-created",
    ]
    assert len(crds.kubectl("get", "-n", ns, "magnetar", "-o", "name").split()) == 3

    # The user's spec is never rewritten, and the creation was announced as an event.
    topic = crds.get("topics.magnetar.dev", "acme-orders-created", ns)
    assert topic is not None and topic["spec"] == {
        "namespace": "acme/orders",
        "name": "created",
        "partitions": 4,
    }
    assert "Created" in {e["reason"] for e in crds.events(ns, "acme-orders-created")}


def test_topic_deleted_behind_the_operators_back_is_recreated(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"drift-{uid}"
    apply(crds, ns, manifest("Tenant", tenant, {"allowedClusters": ["local"]}))
    apply(
        crds,
        ns,
        manifest(
            "Namespace",
            "n",
            {"tenant": tenant, "name": "ns", "retention": {"timeInMinutes": 60, "sizeInMB": 10}},
        ),
    )
    apply(crds, ns, manifest("Topic", "t", {"namespace": f"{tenant}/ns", "name": "events", "partitions": 2}))
    wait_condition(crds, "topic", "t", ns, "True")
    wait_condition(crds, "namespace", "n", ns, "True")

    assert admin_call(broker, "DELETE", f"persistent/{tenant}/ns/events/partitions?force=true")[0] == 204
    assert partitions(broker, f"{tenant}/ns/events") == 0
    obj = wait_condition(crds, "topic", "t", ns, "True", reason="DriftCorrected", timeout=INTERVAL + 8)
    assert partitions(broker, f"{tenant}/ns/events") == 2
    assert "re" in obj["status"]["conditions"][0]["message"] or "created" in condition(obj)["message"]
    assert obj["status"]["driftCorrections"] >= 1 and obj["status"]["lastDriftCorrection"]

    # A policy changed behind its back is put back too.
    assert (
        admin_call(
            broker,
            "POST",
            f"namespaces/{tenant}/ns/retention",
            {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1},
        )[0]
        == 204
    )
    wait_condition(crds, "namespace", "n", ns, "True", reason="DriftCorrected", timeout=INTERVAL + 8)
    retention = admin_call(broker, "GET", f"namespaces/{tenant}/ns")[1]["retention_policies"]
    assert retention == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}


def test_ack_quorum_above_write_quorum_is_refused_then_recovers(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"quorum-{uid}"
    apply(crds, ns, manifest("Tenant", tenant, {}))
    wait_condition(crds, "tenant", tenant, ns, "True")
    bad = {
        "tenant": tenant,
        "name": "q",
        "persistence": {"ensembleSize": 3, "writeQuorum": 2, "ackQuorum": 3},
    }
    apply(crds, ns, manifest("Namespace", "q", bad))
    obj = wait_condition(crds, "namespace", "q", ns, "False", reason="InvalidSpec")
    assert "ackQuorum (3) is larger than persistence.writeQuorum (2)" in condition(obj)["message"]
    assert condition(obj, "PoliciesApplied")["reason"] == "InvalidSpec"
    assert admin_call(broker, "GET", f"namespaces/{tenant}/q")[0] == 404
    assert obj["spec"] == bad  # refused, not "fixed" behind the user's back

    good = dict(bad, persistence={"ensembleSize": 3, "writeQuorum": 3, "ackQuorum": 2})
    apply(crds, ns, manifest("Namespace", "q", good))
    obj = wait_condition(crds, "namespace", "q", ns, "True")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 2
    assert admin_call(broker, "GET", f"namespaces/{tenant}/q")[1]["persistence"]["bookkeeperAckQuorum"] == 2


def test_schema_rejects_what_it_can_at_admission(crds: ControlPlane, ns: str) -> None:
    out = crds.kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        check=False,
        input=manifest(
            "Topic",
            "bad",
            {
                "namespace": "no-slash",
                "name": "x",
                "partitions": -1,
                "backlogQuota": {"policy": "drop_everything"},
            },
        ),
    )
    assert "spec.partitions" in out and "spec.namespace" in out and "spec.backlogQuota.policy" in out
    assert crds.get("topics.magnetar.dev", "bad", ns) is None
    out = crds.kubectl(
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        check=False,
        input=manifest(
            "Namespace",
            "bad",
            {
                "tenant": "x",
                "name": "y",
                "persistence": {"ensembleSize": 0, "writeQuorum": 1, "ackQuorum": 1},
            },
        ),
    )
    assert "spec.persistence.ensembleSize" in out


def test_partitions_decrease_is_refused_and_increase_applies(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"parts-{uid}"
    apply(crds, ns, manifest("Tenant", tenant, {}))
    apply(crds, ns, manifest("Namespace", "n", {"tenant": tenant, "name": "ns"}))
    spec = {"namespace": f"{tenant}/ns", "name": "p", "partitions": 4}
    apply(crds, ns, manifest("Topic", "p", spec))
    wait_condition(crds, "topic", "p", ns, "True")
    apply(crds, ns, manifest("Topic", "p", dict(spec, partitions=2)))
    obj = wait_condition(crds, "topic", "p", ns, "False", reason="InvalidSpec")
    assert "partitions can only be increased" in condition(obj)["message"]
    assert partitions(broker, f"{tenant}/ns/p") == 4
    apply(crds, ns, manifest("Topic", "p", dict(spec, partitions=6)))
    wait_condition(crds, "topic", "p", ns, "True")
    assert partitions(broker, f"{tenant}/ns/p") == 6


def test_namespace_waits_for_its_tenant(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"late-{uid}"
    apply(crds, ns, manifest("Namespace", "n", {"tenant": tenant, "name": "ns"}))
    apply(crds, ns, manifest("Topic", "t", {"namespace": f"{tenant}/ns", "name": "t", "partitions": 1}))
    obj = wait_condition(crds, "namespace", "n", ns, "False", reason="WaitingForTenant")
    assert f"tenant {tenant} does not exist" in condition(obj)["message"]
    wait_condition(crds, "topic", "t", ns, "False", reason="WaitingForNamespace")
    apply(crds, ns, manifest("Tenant", tenant, {}))
    wait_condition(crds, "namespace", "n", ns, "True", timeout=20)
    wait_condition(crds, "topic", "t", ns, "True", timeout=20)
    assert partitions(broker, f"{tenant}/ns/t") == 1


def test_unenforced_policies_are_reported_not_dropped(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"unenf-{uid}"
    apply(crds, ns, manifest("Tenant", tenant, {}))
    spec = {
        "tenant": tenant,
        "name": "ns",
        "deduplication": True,
        "messageTTLSeconds": 60,
        "backlogQuota": {"limitSize": 1048576, "policy": "producer_exception"},
    }
    apply(crds, ns, manifest("Namespace", "n", spec))
    obj = wait_condition(crds, "namespace", "n", ns, "True")
    unenforced = admin_call(broker, "GET", f"namespaces/{tenant}/ns")[1]["unenforced"]
    policies = condition(obj, "PoliciesApplied")
    if unenforced:
        assert policies["status"] == "False" and policies["reason"] == "NotApplied"
        assert "not enforced yet" in policies["message"]
    assert sorted(obj["status"]["appliedPolicies"]) == ["backlogQuota", "deduplication", "messageTTLSeconds"]
    assert obj["spec"] == spec


@pytest.mark.parametrize("policy", ["CleanUpAfterDeletion", "KeepAfterDeletion"])
def test_deletion_honours_the_lifecycle_policy(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str, policy: str
) -> None:
    tenant = f"life-{uid}"
    apply(crds, ns, manifest("Tenant", tenant, {"lifecyclePolicy": "KeepAfterDeletion"}))
    apply(crds, ns, manifest("Namespace", "n", {"tenant": tenant, "name": "ns"}))
    apply(
        crds,
        ns,
        manifest(
            "Topic",
            "t",
            {"namespace": f"{tenant}/ns", "name": "t", "partitions": 2, "lifecyclePolicy": policy},
        ),
    )
    obj = wait_condition(crds, "topic", "t", ns, "True")
    assert "magnetar.dev/finalizer" in obj["metadata"]["finalizers"]
    crds.kubectl("delete", "-n", ns, "topic.magnetar.dev/t", "--timeout=30s")
    assert crds.get("topics.magnetar.dev", "t", ns) is None  # finalizer removed in both cases
    expected = 0 if policy == "CleanUpAfterDeletion" else 2
    assert partitions(broker, f"{tenant}/ns/t") == expected


def test_deleting_while_the_broker_is_down_retries_and_keeps_the_finalizer(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"down-{uid}"
    apply(crds, ns, manifest("Tenant", tenant, {}))
    apply(crds, ns, manifest("Namespace", "n", {"tenant": tenant, "name": "ns"}))
    apply(crds, ns, manifest("Topic", "t", {"namespace": f"{tenant}/ns", "name": "t", "partitions": 1}))
    wait_condition(crds, "topic", "t", ns, "True")
    broker.kill9()
    try:
        crds.kubectl("delete", "-n", ns, "topic.magnetar.dev/t", "--wait=false")

        def retried_twice() -> bool:
            retries = [e for e in crds.events(ns, "t") if e["reason"] == "DeleteRetrying"]
            return sum(int(e.get("count") or 1) for e in retries) >= 2

        wait_for("two failed deletion attempts", retried_twice, timeout=40)
        obj = crds.get("topics.magnetar.dev", "t", ns)
        assert obj is not None and obj["metadata"].get("deletionTimestamp")
        assert "magnetar.dev/finalizer" in obj["metadata"]["finalizers"]
    finally:
        broker.start()
    wait_for("the Topic to be gone", lambda: crds.get("topics.magnetar.dev", "t", ns) is None, timeout=30)
    assert partitions(broker, f"{tenant}/ns/t") == 0
