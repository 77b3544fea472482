"""Schemas through the operator: a Topic's spec.schemaInfo and a Namespace's schema policies, on a
real API server, applied to a real standalone broker and read back through its admin REST API.

What each test shows fails without the feature: the broker has no schema (404) unless the operator
uploaded it, a schema deleted or replaced behind the operator's back stays gone unless the drift
timer puts it back, and the conditions carry the broker's own refusal text.
"""

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
from tests.operator.test_operator_k8s_resources import apply, manifest, wait_condition
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

ORDER_V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}
# Adds an optional field: readable both ways (compatible under every strategy but ALWAYS_INCOMPATIBLE).
ORDER_V2_OPTIONAL = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "note", "type": ["null", "string"], "default": None}],
}
# Adds a field without a default: a BACKWARD reader (the new schema) cannot read v1 data.
ORDER_V2_REQUIRED = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}


def schema_info(definition: dict[str, Any], **properties: str) -> dict[str, Any]:
    # Indented as pulsar-client writes its definitions: the comparison must not care about whitespace.
    return {"type": "AVRO", "schema": json.dumps(definition, indent=2), "properties": properties}


def broker_schema(broker: StandaloneProcess, topic: str) -> dict[str, Any] | None:
    """The topic's newest live schema from the broker's REST API (None: 404, no live schema)."""
    code, body = admin_call(broker, "GET", f"schemas/{topic}/schema")
    if code == 404:
        return None
    assert code == 200, (code, body)
    return dict(body)


def holds(broker: StandaloneProcess, topic: str, definition: dict[str, Any], properties: dict[str, str]) -> bool:
    found = broker_schema(broker, topic)
    return (
        found is not None
        and found["type"] == "AVRO"
        and json.loads(found["data"]) == definition
        and (found.get("properties") or {}) == properties
    )


def setup_namespace(crds: ControlPlane, ns: str, tenant: str, **policies: Any) -> None:
    apply(crds, ns, manifest("Tenant", tenant, {}))
    apply(crds, ns, manifest("Namespace", "n", {"tenant": tenant, "name": "ns", **policies}))
    wait_condition(crds, "namespace", "n", ns, "True")


def test_schema_info_is_uploaded_and_put_back_after_drift(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"sch-{uid}"
    topic = f"{tenant}/ns/orders"
    setup_namespace(crds, ns, tenant)
    spec = {
        "namespace": f"{tenant}/ns",
        "name": "orders",
        "partitions": 2,  # one schema for the partitioned topic, under its base name
        "schemaInfo": schema_info(ORDER_V1, owner="billing"),
    }
    apply(crds, ns, manifest("Topic", "t", spec))
    obj = wait_condition(crds, "topic", "t", ns, "True")
    applied = condition(obj, "SchemaApplied")
    assert applied["status"] == "True" and applied["reason"] == "Applied", applied
    assert holds(broker, topic, ORDER_V1, {"owner": "billing"})
    found = broker_schema(broker, topic)
    assert found is not None and obj["status"]["schemaVersion"] == found["version"]
    assert obj["spec"] == spec  # never rewritten

    # Deleted behind the operator's back: the drift timer uploads it again.
    code, body = admin_call(broker, "DELETE", f"schemas/{topic}/schema")
    assert code in (200, 204), (code, body)
    assert broker_schema(broker, topic) is None
    obj = wait_condition(crds, "topic", "t", ns, "True", reason="DriftCorrected", timeout=INTERVAL + 10)
    assert holds(broker, topic, ORDER_V1, {"owner": "billing"})
    corrections = int(obj["status"]["driftCorrections"])
    assert "schema" in condition(obj)["message"]

    # Replaced by a newer (compatible) version behind its back: the spec's schema becomes newest again.
    code, body = admin_call(broker, "POST", f"schemas/{topic}/schema", schema_info(ORDER_V2_OPTIONAL, owner="billing"))
    assert code == 200, (code, body)
    assert not holds(broker, topic, ORDER_V1, {"owner": "billing"})

    def corrected_again() -> bool:
        current = crds.get("topics.magnetar.dev", "t", ns) or {}
        return int((current.get("status") or {}).get("driftCorrections", 0)) > corrections and holds(
            broker, topic, ORDER_V1, {"owner": "billing"}
        )

    wait_for("the replaced schema to be put back", corrected_again, timeout=INTERVAL + 10)

    # Removing schemaInfo from the spec leaves the broker's schema alone (as pulsar-resources-operator).
    apply(crds, ns, manifest("Topic", "t", {k: v for k, v in spec.items() if k != "schemaInfo"}))
    wait_condition(crds, "topic", "t", ns, "True", type_="SchemaApplied", reason="NotManaged")
    assert holds(broker, topic, ORDER_V1, {"owner": "billing"})


def test_incompatible_change_under_backward_is_refused_with_the_brokers_reason(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"schb-{uid}"
    topic = f"{tenant}/ns/orders"
    setup_namespace(crds, ns, tenant, schemaCompatibilityStrategy="BACKWARD")
    spec = {"namespace": f"{tenant}/ns", "name": "orders", "schemaInfo": schema_info(ORDER_V1)}
    apply(crds, ns, manifest("Topic", "t", spec))
    wait_condition(crds, "topic", "t", ns, "True")
    before = broker_schema(broker, topic)
    assert before is not None and json.loads(before["data"]) == ORDER_V1

    # What the broker itself answers for that upload (asked through the /compatibility endpoint,
    # which registers nothing): refused under BACKWARD.
    code, verdict = admin_call(broker, "POST", f"schemas/{topic}/compatibility", schema_info(ORDER_V2_REQUIRED))
    # (IsCompatibilityResponse: Jackson names Pulsar's `isCompatibility` field "compatibility")
    assert code == 200 and verdict.get("compatibility", verdict.get("isCompatibility")) is False, (code, verdict)

    apply(crds, ns, manifest("Topic", "t", dict(spec, schemaInfo=schema_info(ORDER_V2_REQUIRED))))
    obj = wait_condition(crds, "topic", "t", ns, "False", reason="SchemaIncompatible")
    refused = condition(obj, "SchemaApplied")
    assert refused["status"] == "False" and refused["reason"] == "Incompatible", refused
    assert refused["message"].startswith("the broker refused spec.schemaInfo: ")
    reason = refused["message"].removeprefix("the broker refused spec.schemaInfo: ")
    assert "qty" in reason and "BACKWARD" in reason, reason  # the broker's reason names field and strategy
    code, body = admin_call(broker, "POST", f"schemas/{topic}/schema", schema_info(ORDER_V2_REQUIRED))
    assert (code, body["reason"]) == (409, reason)  # word for word what the broker answers
    assert condition(obj)["message"] == refused["message"]
    # The broker still has v1, and the Topic is not Ready with the wrong schema.
    after = broker_schema(broker, topic)
    assert after is not None and after["version"] == before["version"] and json.loads(after["data"]) == ORDER_V1

    # A compatible evolution recovers it.
    apply(crds, ns, manifest("Topic", "t", dict(spec, schemaInfo=schema_info(ORDER_V2_OPTIONAL))))
    obj = wait_condition(crds, "topic", "t", ns, "True")
    assert condition(obj, "SchemaApplied")["reason"] == "Applied"
    assert holds(broker, topic, ORDER_V2_OPTIONAL, {})


def test_impossible_schema_info_is_refused_without_a_broker_call(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"schx-{uid}"
    setup_namespace(crds, ns, tenant)
    # An unknown type never gets past admission (the CRD's enum).
    bad_type = {"namespace": f"{tenant}/ns", "name": "x", "schemaInfo": {"type": "XML", "schema": "<a/>"}}
    out = crds.kubectl("apply", "-n", ns, "-f", "-", check=False, input=manifest("Topic", "x", bad_type))
    assert "spec.schemaInfo.type" in out and crds.get("topics.magnetar.dev", "x", ns) is None

    # An AVRO definition that is not JSON passes admission; the operator refuses it before any call.
    spec = {"namespace": f"{tenant}/ns", "name": "bad", "schemaInfo": {"type": "AVRO", "schema": "{not json"}}
    apply(crds, ns, manifest("Topic", "bad", spec))
    obj = wait_condition(crds, "topic", "bad", ns, "False", reason="InvalidSpec")
    cond = condition(obj, "SchemaApplied")
    assert cond["status"] == "False" and cond["reason"] == "InvalidSpec"
    assert "spec.schemaInfo.schema is not valid JSON" in cond["message"]
    # No broker call: not even the topic was created, and there is no schema.
    assert f"persistent://{tenant}/ns/bad" not in admin_call(broker, "GET", f"persistent/{tenant}/ns")[1]
    assert broker_schema(broker, f"{tenant}/ns/bad") is None

    # Fixed spec: created and uploaded.
    apply(crds, ns, manifest("Topic", "bad", dict(spec, schemaInfo=schema_info(ORDER_V1))))
    wait_condition(crds, "topic", "bad", ns, "True")
    assert holds(broker, f"{tenant}/ns/bad", ORDER_V1, {})


def namespace_schema_policies(broker: StandaloneProcess, namespace: str) -> tuple[Any, Any, Any]:
    """The three policies, each from its own REST endpoint."""
    values = []
    for endpoint in ("schemaCompatibilityStrategy", "schemaValidationEnforced", "isAllowAutoUpdateSchema"):
        code, body = admin_call(broker, "GET", f"namespaces/{namespace}/{endpoint}")
        assert code == 200, (endpoint, code, body)
        values.append(body)
    return values[0], values[1], values[2]


def test_namespace_schema_policies_are_applied_and_drift_corrected(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant = f"schp-{uid}"
    namespace = f"{tenant}/ns"
    policies = {
        "schemaCompatibilityStrategy": "FORWARD_TRANSITIVE",
        "schemaValidationEnforced": True,
        "isAllowAutoUpdateSchema": False,
    }
    apply(crds, ns, manifest("Tenant", tenant, {}))
    spec = {"tenant": tenant, "name": "ns", **policies}
    apply(crds, ns, manifest("Namespace", "n", spec))
    obj = wait_condition(crds, "namespace", "n", ns, "True")
    assert set(policies) <= set(obj["status"]["appliedPolicies"])
    assert namespace_schema_policies(broker, namespace) == ("FORWARD_TRANSITIVE", True, False)
    document = admin_call(broker, "GET", f"namespaces/{namespace}")[1]
    assert document["schema_compatibility_strategy"] == "FORWARD_TRANSITIVE"
    assert document["schema_validation_enforced"] is True and document["is_allow_auto_update_schema"] is False

    # Changed behind the operator's back (each with Pulsar's verb): put back by the drift timer.
    assert admin_call(broker, "PUT", f"namespaces/{namespace}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")[0] in (
        200,
        204,
    )
    assert admin_call(broker, "POST", f"namespaces/{namespace}/isAllowAutoUpdateSchema", True)[0] in (200, 204)
    assert namespace_schema_policies(broker, namespace)[0] == "ALWAYS_COMPATIBLE"
    wait_condition(crds, "namespace", "n", ns, "True", reason="DriftCorrected", timeout=INTERVAL + 10)
    assert namespace_schema_policies(broker, namespace) == ("FORWARD_TRANSITIVE", True, False)

    # Dropped from the spec: the broker's defaults apply again (Pulsar's unset values).
    apply(crds, ns, manifest("Namespace", "n", {"tenant": tenant, "name": "ns"}))

    def defaults_back() -> bool:
        obj = crds.get("namespaces.magnetar.dev", "n", ns) or {}
        done = not set(policies) & set((obj.get("status") or {}).get("appliedPolicies") or [])
        return done and namespace_schema_policies(broker, namespace)[1:] == (False, True)

    wait_for("the schema policies to be unset", defaults_back, timeout=20)
    assert namespace_schema_policies(broker, namespace)[0] in ("UNDEFINED", None, "")
