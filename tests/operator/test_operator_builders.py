"""Pure builders: the manifests a BookieEnsemble and the broker sets turn into (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from magnetar_operator import bookies, broker_pool, brokers, manifests
from magnetar_operator.config import Settings
from magnetar_operator.kube import contains, mutable_part

OWNER = {
    "apiVersion": "magnetar.dev/v1alpha1",
    "kind": "BookieEnsemble",
    "metadata": {"name": "bk", "namespace": "data", "uid": "uid-1"},
}
SPEC: dict[str, Any] = {
    "replicas": 3,
    "image": "magnetar/bookie:1",
    "storage": {"size": "10Gi", "storageClassName": "local"},
    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": 2147483648}},
    "config": {"journalSyncData": "true"},
}


def children(spec: dict[str, Any] = SPEC, **kw: Any) -> dict[str, dict[str, Any]]:
    out = bookies.build_bookie_children(spec, "bk", "data", pdb_api_version="policy/v1beta1", owner=OWNER, **kw)
    return {c["kind"]: c for c in out}


def test_statefulset_matches_the_spec() -> None:
    sts = children()["StatefulSet"]
    assert sts["metadata"]["namespace"] == "data"
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "bk"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "magnetar/bookie:1"
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"memory": "2147483648"},
    }
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["spec"]["storageClassName"] == "local"
    assert {m["name"] for m in container["volumeMounts"]} == {"data", "config"}


def test_children_are_owned_by_the_resource_as_controller() -> None:
    for child in children().values():
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "BookieEnsemble",
            "name": "bk",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }


def test_selector_pdb_and_service_agree_with_pod_labels() -> None:
    kids = children()
    pod_labels = kids["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    for selector in (
        kids["StatefulSet"]["spec"]["selector"]["matchLabels"],
        kids["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        kids["Service"]["spec"]["selector"],
    ):
        assert selector.items() <= pod_labels.items()
    assert kids["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert kids["Service"]["spec"]["clusterIP"] == "None"


def test_probes_hit_the_health_endpoints() -> None:
    container = children()["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


@pytest.mark.parametrize(
    ("mode", "key"),
    [
        ("required", "requiredDuringSchedulingIgnoredDuringExecution"),
        ("preferred", "preferredDuringSchedulingIgnoredDuringExecution"),
    ],
)
def test_anti_affinity_modes(mode: str, key: str) -> None:
    spec = dict(SPEC, antiAffinity=mode)
    affinity = children(spec)["StatefulSet"]["spec"]["template"]["spec"]["affinity"]
    assert list(affinity["podAntiAffinity"]) == [key]


def test_no_anti_affinity_when_switched_off() -> None:
    pod = children(dict(SPEC, antiAffinity="none"))["StatefulSet"]["spec"]["template"]["spec"]
    assert "affinity" not in pod


def checksum_of(spec: dict[str, Any]) -> str:
    sts = children(spec)["StatefulSet"]
    return str(sts["spec"]["template"]["metadata"]["annotations"][manifests.CHECKSUM_ANNOTATION])


def test_config_change_changes_the_checksum_and_image_does_not() -> None:
    base = checksum_of(SPEC)
    assert checksum_of(dict(SPEC, config={"journalSyncData": "false"})) != base
    assert checksum_of(dict(SPEC, image="magnetar/bookie:2")) == base
    assert checksum_of(dict(SPEC, config={"journalSyncData": "true"})) == base


def test_config_map_renders_user_settings_over_defaults() -> None:
    text = children(dict(SPEC, config={"bookiePort": "4000"}))["ConfigMap"]["data"]["bookie.yaml"]
    assert "bookiePort: '4000'" in text
    assert "dataDir: /data/ledgers" in text


def test_replicas_override_keeps_the_current_size() -> None:
    assert children(replicas=5)["StatefulSet"]["spec"]["replicas"] == 5


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (["policy/v1beta1"], "policy/v1beta1"),
        (["policy/v1", "policy/v1beta1"], "policy/v1"),
        (["v1"], "policy/v1"),
    ],
)
def test_pdb_version_follows_discovery(served: list[str], expected: str) -> None:
    assert manifests.choose_pdb_api_version(served) == expected


def test_shared_broker_pool_has_client_and_headless_services() -> None:
    bs = brokers.BrokerSet(name="magnetar-broker", namespace="mg", replicas=2, image="magnetar/broker:1")
    kids = brokers.build_broker_children(bs, pdb_api_version="policy/v1")
    kinds = [(c["kind"], c["metadata"]["name"]) for c in kids]
    assert ("Service", "magnetar-broker") in kinds and ("Service", "magnetar-broker-headless") in kinds
    sts = next(c for c in kids if c["kind"] == "StatefulSet")
    assert sts["spec"]["serviceName"] == "magnetar-broker-headless"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/admin/v2/brokers/health"
    assert all("ownerReferences" not in c["metadata"] for c in kids)


def test_isolated_broker_set_names_its_tenant() -> None:
    bs = brokers.BrokerSet(name="magnetar-broker-acme", namespace="t", replicas=1, image="i", isolated_tenant="acme")
    sts = brokers.build_broker_statefulset(bs)
    env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MAGNETAR_ISOLATED_TENANT"] == "acme"
    assert sts["metadata"]["labels"][brokers.TENANT_LABEL] == "acme"


def test_live_objects_with_server_defaults_still_contain_the_desired_state() -> None:
    sts = children()["StatefulSet"]
    live = {**sts, "spec": {**sts["spec"], "revisionHistoryLimit": 10}}
    container = dict(live["spec"]["template"]["spec"]["containers"][0], terminationMessagePath="/dev/x")
    live["spec"]["template"] = {
        **sts["spec"]["template"],
        "spec": {**sts["spec"]["template"]["spec"], "containers": [container]},
    }
    assert contains(mutable_part(sts), live)
    changed = {**live, "spec": {**live["spec"], "replicas": 1}}
    assert not contains(mutable_part(sts), changed)


def test_mutable_part_leaves_immutable_fields_out() -> None:
    patch = mutable_part(children()["StatefulSet"])
    assert set(patch["spec"]) == {"replicas", "template", "updateStrategy"}


def test_bookies_are_restarted_by_the_operator_not_the_statefulset_controller() -> None:
    assert children()["StatefulSet"]["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_switching_a_live_statefulset_to_on_delete_drops_its_rolling_update_settings() -> None:
    """A StatefulSet made by an older operator has rollingUpdate.partition, which OnDelete forbids."""
    sts = children()["StatefulSet"]
    patch = mutable_part(sts)
    assert patch["spec"]["updateStrategy"] == {"type": "OnDelete", "rollingUpdate": None}
    old = {
        **sts,
        "spec": {**sts["spec"], "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}},
    }
    assert not contains(patch, old)
    assert contains(patch, sts)  # once switched, the live object (no rollingUpdate) matches: no more writes
    broker = brokers.build_broker_statefulset(brokers.BrokerSet(name="b", namespace="n", replicas=1, image="i"))
    assert mutable_part(broker)["spec"]["updateStrategy"] == {"type": "RollingUpdate"}


SECURITY = {"runAsUser": 10000, "runAsGroup": 10000, "fsGroup": 10000, "runAsNonRoot": True}


def test_bookie_pods_get_the_spec_security_context_or_the_operator_default() -> None:
    def pod_spec(spec: dict[str, Any], default: dict[str, Any] | None = None) -> dict[str, Any]:
        kids = children(spec, default_security_context=default)
        return dict(kids["StatefulSet"]["spec"]["template"]["spec"])

    assert "securityContext" not in pod_spec(SPEC)
    assert pod_spec(SPEC, SECURITY)["securityContext"] == SECURITY
    own = {"runAsUser": 2000, "fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod_spec(dict(SPEC, podSecurityContext=own), SECURITY)["securityContext"] == own


def test_a_drained_bookie_loses_its_claim_unless_told_to_keep_it() -> None:
    assert bookies.delete_claim(SPEC) is True
    assert bookies.delete_claim(dict(SPEC, storage={"size": "1Gi", "deleteClaim": True})) is True
    assert bookies.delete_claim(dict(SPEC, storage={"size": "1Gi", "deleteClaim": False})) is False


def test_broker_pods_get_the_security_context() -> None:
    bs = brokers.BrokerSet(name="b", namespace="n", replicas=1, image="i", pod_security_context=SECURITY)
    assert brokers.build_broker_statefulset(bs)["spec"]["template"]["spec"]["securityContext"] == SECURITY
    plain = brokers.BrokerSet(name="b", namespace="n", replicas=1, image="i")
    assert "securityContext" not in brokers.build_broker_statefulset(plain)["spec"]["template"]["spec"]


def test_the_pool_is_owned_by_the_operator_deployment_when_named() -> None:
    settings = Settings(broker_namespace="mg", admin_url="http://x", pod_security_context=SECURITY)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "magnetar-operator", "namespace": "mg", "uid": "dep-uid"},
    }
    kids = broker_pool.pool_children(settings, pdb_api_version="policy/v1", owner=deployment)
    assert {c["kind"] for c in kids} == {"ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"}
    for child in kids:
        assert child["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": "magnetar-operator",
                "uid": "dep-uid",
                "controller": False,
                "blockOwnerDeletion": False,
            }
        ]
    sts = next(c for c in kids if c["kind"] == "StatefulSet")
    assert sts["spec"]["template"]["spec"]["securityContext"] == SECURITY
    unowned = broker_pool.pool_children(settings, pdb_api_version="policy/v1", owner=None)
    assert all("ownerReferences" not in c["metadata"] for c in unowned)


def test_settings_read_the_operator_deployment_and_security_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGNETAR_OPERATOR_DEPLOYMENT", "magnetar-operator")
    monkeypatch.setenv("MAGNETAR_POD_SECURITY_CONTEXT", '{"runAsUser": 10000, "fsGroup": 10000}')
    settings = Settings.from_env()
    assert settings.operator_deployment == "magnetar-operator"
    assert settings.pod_security_context == {"runAsUser": 10000, "fsGroup": 10000}
    monkeypatch.setenv("MAGNETAR_POD_SECURITY_CONTEXT", "[1]")
    with pytest.raises(ValueError, match="MAGNETAR_POD_SECURITY_CONTEXT must hold a JSON object"):
        Settings.from_env()
