"""BookieEnsemble and broker sets on a real API server with the controller manager running.

There is no kubelet, so no pod ever runs: these tests check the objects (StatefulSet, Services,
PodDisruptionBudget, ConfigMap), their owner references and the garbage collector's cascade.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
from tests.operator.harness import INTERVAL, POOL_NAMESPACE, ControlPlane, OperatorProcess, condition, gone, wait_for

pytestmark = pytest.mark.k8s

SPEC: dict[str, Any] = {
    "replicas": 3,
    "image": "localhost/magnetar-bookie:1",
    "storage": {"size": "2Gi", "storageClassName": "local-disks"},
    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
    "config": {"journalSyncData": "true"},
}


def apply(cp: ControlPlane, ns: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": "magnetar.dev/v1alpha1", "kind": "BookieEnsemble", "metadata": {"name": name}, "spec": spec}
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(body))


def sts_where(cp: ControlPlane, ns: str, name: str, check: Any, what: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        sts = cp.get("statefulset", name, ns)
        return sts if sts is not None and check(sts) else None

    return wait_for(what, probe, timeout=20)


def container(sts: dict[str, Any]) -> dict[str, Any]:
    return dict(sts["spec"]["template"]["spec"]["containers"][0])


def test_children_match_the_spec_and_updates_propagate(operator: OperatorProcess, crds: ControlPlane, ns: str) -> None:
    apply(crds, ns, "bk", SPEC)
    sts = sts_where(crds, ns, "bk", lambda s: True, "the bookie StatefulSet")
    owner = crds.get("bookieensembles.magnetar.dev", "bk", ns)
    assert owner is not None
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == "bk"
    assert container(sts)["image"] == "localhost/magnetar-bookie:1"
    assert container(sts)["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "2Gi" and claim["storageClassName"] == "local-disks"
    assert "podAntiAffinity" in sts["spec"]["template"]["spec"]["affinity"]
    svc = crds.get("service", "bk", ns)
    assert svc is not None and svc["spec"]["clusterIP"] == "None"
    pdb = wait_for("the PDB", lambda: crds.get("poddisruptionbudget", "bk", ns))
    assert pdb["apiVersion"] == "policy/v1beta1"  # what a 1.20 API server serves, found by discovery
    assert pdb["spec"]["maxUnavailable"] == 1
    for child in (sts, svc, pdb, crds.get("configmap", "bk-config", ns)):
        assert child is not None
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref["uid"] == owner["metadata"]["uid"] and ref["controller"] is True

    def ensemble_status() -> dict[str, Any] | None:
        obj = crds.get("bookieensembles.magnetar.dev", "bk", ns)
        return obj if obj and (obj.get("status") or {}).get("desiredReplicas") == 3 else None

    obj = wait_for("BookieEnsemble status", ensemble_status)
    # No kubelet here: the objects are right, but no bookie pod becomes ready.
    assert condition(obj)["reason"] == "WaitingForBookies" and "0/3 bookies ready" in condition(obj)["message"]
    assert condition(obj, "Reconciled")["status"] == "True"
    checksum = sts["spec"]["template"]["metadata"]["annotations"]["magnetar.dev/config-checksum"]
    assert obj["status"]["configChecksum"] == checksum

    apply(crds, ns, "bk", dict(SPEC, replicas=4, image="localhost/magnetar-bookie:2"))
    sts_where(
        crds,
        ns,
        "bk",
        lambda s: s["spec"]["replicas"] == 4 and container(s)["image"] == "localhost/magnetar-bookie:2",
        "replicas 4 and image :2",
    )
    apply(
        crds, ns, "bk", dict(SPEC, replicas=4, image="localhost/magnetar-bookie:2", config={"journalSyncData": "false"})
    )
    sts_where(
        crds,
        ns,
        "bk",
        lambda s: s["spec"]["template"]["metadata"]["annotations"]["magnetar.dev/config-checksum"] != checksum,
        "a new config checksum (rolls the pods)",
    )
    cm = crds.get("configmap", "bk-config", ns)
    assert cm is not None and "journalSyncData: 'false'" in cm["data"]["bookie.yaml"]


def test_scale_down_drains_each_bookie_before_its_pod_and_volume_go(
    operator: OperatorProcess, crds: ControlPlane, ns: str
) -> None:
    """The broker (a real standalone) is asked to decommission bk-2 and then bk-1; they hold no
    ledgers there, so each drain finishes at once and the StatefulSet shrinks one pod at a time.
    Draining bookies that do hold ledgers is tested in tests/bookie/test_autorecovery.py."""
    apply(crds, ns, "bk", SPEC)
    sts_where(crds, ns, "bk", lambda s: s["spec"]["replicas"] == 3, "3 replicas")
    wait_for("the claim of bk-2", lambda: crds.get("persistentvolumeclaim", "data-bk-2", ns))
    apply(crds, ns, "bk", dict(SPEC, replicas=1, image="localhost/magnetar-bookie:3"))
    sts = sts_where(crds, ns, "bk", lambda s: s["spec"]["replicas"] == 1, "the StatefulSet scaled to 1")
    assert container(sts)["image"].endswith(":3")

    def decommissioned() -> list[str] | None:
        messages = [e["message"] for e in crds.events(ns, "bk") if e["reason"] == "BookieDecommissioned"]
        return messages if len(messages) == 2 else None

    # Each pass that drains a bookie records it in an event (one for bk-2, one for bk-1), and the
    # ScaleDownAllowed condition reports the last drain. The condition once went back to bk-2's
    # report when a drift-timer pass wrote the status it had read before the bk-1 pass's write
    # landed; passes now re-read the status under the ensemble's lock (bookie_ensembles.py).
    messages = wait_for("two BookieDecommissioned events", decommissioned, timeout=120.0)
    assert sorted("bk-2.bk." in m for m in messages) == [False, True], messages
    assert sorted("bk-1.bk." in m for m in messages) == [False, True], messages
    assert all('"complete": true' in m for m in messages), messages  # the broker's drain reports
    obj = crds.get("bookieensembles.magnetar.dev", "bk", ns)
    assert obj is not None and obj["spec"]["replicas"] == 1  # the user's spec stays as written
    assert condition(obj, "ScaleDownAllowed")["reason"] == "Decommissioned"
    wait_for(
        "the condition to report bk-1's drain",
        lambda: (
            "bk-1.bk."
            in condition(crds.get("bookieensembles.magnetar.dev", "bk", ns) or {}, "ScaleDownAllowed").get(
                "message", ""
            )
        ),
    )
    for ordinal in (1, 2):
        claim = f"data-bk-{ordinal}"
        wait_for(f"the claim {claim} to go", partial(gone, crds, "persistentvolumeclaim", claim, ns))
    # The removed bookies never ran here, so their identities are forgotten straight away.
    wait_for(
        "no identities left to forget",
        lambda: not (crds.get("bookieensembles.magnetar.dev", "bk", ns) or {}).get("status", {}).get("forgetPending"),
    )
    # A later pass (forced by an image change) keeps reporting the scale-down but removes nothing.
    apply(crds, ns, "bk", dict(SPEC, replicas=1, image="localhost/magnetar-bookie:4"))
    sts_where(crds, ns, "bk", lambda s: container(s)["image"].endswith(":4"), "a later pass (image :4)")
    later = crds.get("bookieensembles.magnetar.dev", "bk", ns)
    assert later is not None and condition(later, "ScaleDownAllowed")["reason"] == "Decommissioned"
    assert "bk-1.bk." in condition(later, "ScaleDownAllowed")["message"]  # not written back to bk-2's
    assert crds.get("persistentvolumeclaim", "data-bk-0", ns) is not None
    assert [e["reason"] for e in crds.events(ns, "bk")].count("BookieDecommissioned") == 2


def test_scale_down_keeps_the_claim_when_told_to(operator: OperatorProcess, crds: ControlPlane, ns: str) -> None:
    """storage.deleteClaim: false: the drained bookie's pod goes, its volume claim stays."""
    spec = dict(SPEC, replicas=2, storage={"size": "1Gi", "deleteClaim": False})
    apply(crds, ns, "bk", spec)
    wait_for("the claim of bk-1", lambda: crds.get("persistentvolumeclaim", "data-bk-1", ns))
    apply(crds, ns, "bk", dict(spec, replicas=1))
    sts_where(crds, ns, "bk", lambda s: s["spec"]["replicas"] == 1, "the StatefulSet scaled to 1")

    def decommissioned() -> list[str]:
        return [e["message"] for e in crds.events(ns, "bk") if e["reason"] == "BookieDecommissioned"]

    (message,) = wait_for("the BookieDecommissioned event", decommissioned)
    assert "bk-1.bk." in message and message.endswith("claim data-bk-1 kept (storage.deleteClaim: false)")
    assert crds.get("persistentvolumeclaim", "data-bk-1", ns) is not None
    assert crds.get("persistentvolumeclaim", "data-bk-0", ns) is not None


def test_deleted_child_is_recreated_and_deletion_cascades(
    operator: OperatorProcess, crds: ControlPlane, ns: str
) -> None:
    apply(crds, ns, "bk", SPEC)
    sts_where(crds, ns, "bk", lambda s: True, "the StatefulSet")
    wait_for("the Service", lambda: crds.get("service", "bk", ns))
    crds.kubectl("delete", "-n", ns, "service/bk")
    wait_for("the Service re-created by the drift timer", lambda: crds.get("service", "bk", ns), timeout=INTERVAL + 10)
    obj = wait_for(
        "Reconciled=DriftCorrected",
        lambda: (lambda o: o if condition(o, "Reconciled").get("reason") == "DriftCorrected" else None)(
            crds.get("bookieensembles.magnetar.dev", "bk", ns)
        ),
    )
    assert obj["status"]["driftCorrections"] >= 1

    crds.kubectl("delete", "-n", ns, "bookieensemble.magnetar.dev/bk", "--timeout=30s")
    for kind, name in (
        ("statefulset", "bk"),
        ("service", "bk"),
        ("poddisruptionbudget", "bk"),
        ("configmap", "bk-config"),
    ):
        wait_for(f"{kind}/{name} garbage-collected", partial(gone, crds, kind, name, ns), timeout=30)


def test_shared_broker_pool_is_kept(operator: OperatorProcess, crds: ControlPlane) -> None:
    sts = wait_for("the broker pool", lambda: crds.get("statefulset", "magnetar-broker", POOL_NAMESPACE))
    assert sts["spec"]["replicas"] == 2
    probes = container(sts)
    assert probes["readinessProbe"]["httpGet"]["path"] == "/ready"
    for svc in ("magnetar-broker", "magnetar-broker-headless"):
        assert crds.get("service", svc, POOL_NAMESPACE) is not None
    crds.kubectl("-n", POOL_NAMESPACE, "scale", "statefulset/magnetar-broker", "--replicas=5")
    sts_where(crds, POOL_NAMESPACE, "magnetar-broker", lambda s: s["spec"]["replicas"] == 2, "the pool size put back")


def test_isolated_tenant_gets_its_own_broker_set(operator: OperatorProcess, crds: ControlPlane, ns: str) -> None:
    tenant = {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": "iso"},
        "spec": {"isolation": {"enabled": True, "brokers": {"replicas": 2}}},
    }
    crds.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(tenant))
    sts = sts_where(crds, ns, "magnetar-broker-iso", lambda s: s["spec"]["replicas"] == 2, "the isolated set")
    env = {e["name"]: e.get("value") for e in container(sts)["env"]}
    assert env["MAGNETAR_ISOLATED_TENANT"] == "iso"

    def reported() -> dict[str, Any] | None:
        obj = crds.get("tenants.magnetar.dev", "iso", ns)
        return obj if condition(obj).get("status") == "True" else None

    obj = wait_for("the Tenant Ready", reported)
    assert obj["status"]["brokerSet"] == "magnetar-broker-iso"
    policies = condition(obj, "PoliciesApplied")
    assert policies["status"] == "True" and "namespace isolation policy tenant-iso" in policies["message"]

    tenant["spec"] = {"isolation": {"enabled": False}}
    crds.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(tenant))
    wait_for("the isolated set removed", lambda: crds.get("statefulset", "magnetar-broker-iso", ns) is None)
