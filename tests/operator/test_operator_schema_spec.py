"""Pure schema rules of the operator (no cluster): what a schemaInfo may be, when the broker's
schema counts as the spec's, the namespace schema policies' bodies, and the CRDs' enums."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from magnetar.schema.info import CompatibilityStrategy, SchemaType
from magnetar_operator import policies, topic_schema
from magnetar_operator.conditions import SCHEMA
from magnetar_operator.policies import InvalidSpec

CRDS = Path(__file__).resolve().parents[2] / "crds"
AVRO = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}


def crd_spec(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load((CRDS / f"magnetar.dev_{kind}.yaml").read_text())
    return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def test_spec_types_are_the_registrys_storable_types_and_the_crd_enum() -> None:
    not_storable = {"NONE", "BYTES", "AUTO", "AUTO_CONSUME", "AUTO_PUBLISH", "KEY_VALUE"}
    assert set(topic_schema.SCHEMA_TYPES) == set(SchemaType.__members__) - not_storable
    assert crd_spec("topics")["schemaInfo"]["properties"]["type"]["enum"] == list(topic_schema.SCHEMA_TYPES)


def test_namespace_crd_has_pulsar_resources_operator_field_names_and_the_strategies() -> None:
    spec = crd_spec("namespaces")
    assert spec["schemaCompatibilityStrategy"]["enum"] == [s.name for s in CompatibilityStrategy]
    assert spec["schemaValidationEnforced"]["type"] == spec["isAllowAutoUpdateSchema"]["type"] == "boolean"


@pytest.mark.parametrize(
    ("info", "words"),
    [
        ({"type": "XML", "schema": "<a/>"}, "spec.schemaInfo.type 'XML' is not a schema type"),
        ({"schema": "{}"}, "spec.schemaInfo.type '' is not a schema type"),
        ({"type": "AVRO"}, "spec.schemaInfo.schema is empty: a AVRO schema needs its definition"),
        ({"type": "JSON", "schema": "{not json"}, "spec.schemaInfo.schema is not valid JSON"),
        ({"type": "PROTOBUF_NATIVE", "schema": "nope"}, "spec.schemaInfo.schema is not valid JSON"),
        ({"type": "AVRO", "schema": "42"}, "is JSON but not an Avro schema"),
    ],
)
def test_impossible_schema_info_is_refused_with_the_reason(info: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidSpec, match=words) as caught:
        topic_schema.validate({"schemaInfo": info})
    assert caught.value.condition_type == SCHEMA  # reported in SchemaApplied, not PoliciesApplied


@pytest.mark.parametrize(
    "info",
    [
        None,
        {"type": "AVRO", "schema": json.dumps(AVRO)},
        {"type": "AVRO", "schema": '"string"'},
        {"type": "STRING"},
        {"type": "INT64", "schema": ""},
    ],
)
def test_possible_schema_info_passes(info: dict[str, Any] | None) -> None:
    topic_schema.validate({} if info is None else {"schemaInfo": info})


def test_payload_is_pulsars_post_schema_payload() -> None:
    spec = {"schemaInfo": {"type": "AVRO", "schema": "{}", "properties": {"a": "1"}}}
    assert topic_schema.payload(spec) == {"type": "AVRO", "schema": "{}", "properties": {"a": "1"}}
    assert topic_schema.payload({"schemaInfo": {"type": "STRING"}}) == {
        "type": "STRING",
        "schema": "",
        "properties": {},
    }
    assert topic_schema.payload({}) is None


def test_broker_schema_is_the_specs_when_type_definition_and_properties_agree() -> None:
    want = topic_schema.payload({"schemaInfo": {"type": "AVRO", "schema": json.dumps(AVRO), "properties": {"a": "1"}}})
    assert want is not None
    reordered = json.dumps(dict(reversed(list(AVRO.items()))), indent=2)  # other key order and whitespace
    have = {"version": 3, "type": "AVRO", "data": reordered, "properties": {"a": "1"}, "timestamp": 1}
    assert topic_schema.same(want, have)
    assert not topic_schema.same(want, None)  # no live schema
    assert not topic_schema.same(want, dict(have, properties={}))
    assert not topic_schema.same(want, dict(have, type="JSON"))
    assert not topic_schema.same(want, dict(have, data=json.dumps(dict(AVRO, name="Other"))))
    text = {"type": "STRING", "schema": "", "properties": {}}
    assert topic_schema.same(text, {"type": "STRING", "data": "", "properties": {}})
    assert not topic_schema.same(text, {"type": "STRING", "data": "x", "properties": {}})


def test_namespace_schema_policies_use_pulsars_endpoints_verbs_and_bodies() -> None:
    spec = {
        "schemaCompatibilityStrategy": "BACKWARD",
        "schemaValidationEnforced": True,
        "isAllowAutoUpdateSchema": False,
    }
    want = policies.desired(spec, level="namespace")
    strategy = want["schemaCompatibilityStrategy"]
    assert (strategy.endpoint, strategy.method, strategy.body) == ("schemaCompatibilityStrategy", "PUT", "BACKWARD")
    enforced = want["schemaValidationEnforced"]
    assert (enforced.endpoint, enforced.method, enforced.body) == ("schemaValidationEnforced", "POST", True)
    auto = want["isAllowAutoUpdateSchema"]
    assert (auto.endpoint, auto.method, auto.body) == ("isAllowAutoUpdateSchema", "POST", False)


def test_unset_schema_policies_read_as_pulsars_defaults() -> None:
    document = {"schema_validation_enforced": True}
    read = {
        f: policies.from_namespace_document(f, document, quota_type="destination_storage")
        for f in policies.SCHEMA_POLICY_UNSET
    }
    assert read == {
        "schemaCompatibilityStrategy": "UNDEFINED",
        "schemaValidationEnforced": True,
        "isAllowAutoUpdateSchema": True,
    }
    # So a spec asking for the default is satisfied by a document that leaves the key out: no write every pass.
    assert policies.matches(
        policies.desired({"isAllowAutoUpdateSchema": True}, level="namespace")["isAllowAutoUpdateSchema"].body,
        read["isAllowAutoUpdateSchema"],
    )
