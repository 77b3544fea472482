"""The CRDs as files: what `kubectl get` and admission rely on, checked without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

CRDS = Path(__file__).resolve().parents[2] / "crds"
KINDS = {"Tenant": "mten", "Namespace": "mns", "Topic": "mtop", "BookieEnsemble": "bke"}


def crds() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["spec"]["names"]["kind"]] = doc
    return out


def test_the_four_kinds_are_there() -> None:
    assert set(crds()) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_names_columns_and_subresources(kind: str) -> None:
    crd = crds()[kind]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and crd["spec"]["group"] == "magnetar.dev"
    names = crd["spec"]["names"]
    assert names["shortNames"] == [KINDS[kind]] and names["categories"] == ["magnetar"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"]["status"] == {}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert columns["Age"] == ".metadata.creationTimestamp"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"observedGeneration", "conditions"} <= set(status)


def test_no_defaults_in_schemas_so_the_api_server_never_rewrites_a_spec() -> None:
    assert "default:" not in "".join(p.read_text() for p in CRDS.glob("*.yaml"))


def test_namespace_schema_covers_the_pulsar_policies() -> None:
    spec = crds()["Namespace"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {
        "persistence",
        "retention",
        "messageTTLSeconds",
        "backlogQuota",
        "deduplication",
        "maxProducersPerTopic",
        "maxConsumersPerTopic",
        "lifecyclePolicy",
    } <= set(spec["properties"])
    assert spec["properties"]["lifecyclePolicy"]["enum"] == ["CleanUpAfterDeletion", "KeepAfterDeletion"]
    quota = spec["properties"]["backlogQuota"]["properties"]
    assert quota["policy"]["enum"] == ["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]


def test_bookie_ensemble_schema_has_the_claim_policy_security_context_and_roll_status() -> None:
    (version,) = crds()["BookieEnsemble"]["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    spec = schema["spec"]["properties"]
    assert spec["storage"]["properties"]["deleteClaim"]["type"] == "boolean"
    assert spec["podSecurityContext"] == {
        "description": spec["podSecurityContext"]["description"],
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    status = schema["status"]["properties"]
    assert {"updatedReplicas", "currentRevision", "updateRevision"} <= set(status)
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Rollout"] == '.status.conditions[?(@.type=="PodsUpToDate")].reason'
    assert columns["Updated"] == ".status.updatedReplicas"
