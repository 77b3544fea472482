"""The schema admin REST API (Pulsar's SchemasResource paths and bodies), the schema policy endpoints
and the ``magnetar-admin schemas`` / ``namespaces ...schema...`` verbs, against a real standalone."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.protocol.wire import Wire, admin, session
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.protocol import commands as c

pytestmark = pytest.mark.timeout(180)


def definition(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Order", "fields": list(fields)})


ID = {"name": "id", "type": "string"}
QTY_OPTIONAL = {"name": "qty", "type": ["null", "int"], "default": None}
QTY_REQUIRED = {"name": "qty", "type": "int"}
V0 = {"type": "AVRO", "schema": definition(ID), "properties": {"owner": "billing"}}
V1 = {"type": "AVRO", "schema": definition(ID, QTY_OPTIONAL), "properties": {}}
BAD = {"type": "AVRO", "schema": definition(ID, QTY_REQUIRED), "properties": {}}


@pytest.fixture
def ns(standalone: StandaloneProcess) -> str:
    name = f"public/sa-{uuid.uuid4().hex[:8]}"
    admin(standalone, "PUT", f"/admin/v2/namespaces/{name}")
    return name


@pytest.fixture
def wire(standalone: StandaloneProcess) -> Iterator[Wire]:
    with session(standalone.service_url) as w:
        yield w


def schemas(topic_path: str) -> str:
    return f"/admin/v2/schemas/{topic_path}"


def call(sa: StandaloneProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return admin_call(sa, method, path, body)


def test_upload_get_versions_and_all_versions(standalone: StandaloneProcess, ns: str) -> None:
    path = f"{ns}/orders-{uuid.uuid4().hex[:6]}"
    status, body = call(standalone, "GET", schemas(path) + "/schema")
    assert status == 404 and body["reason"]
    status, body = call(standalone, "POST", schemas(path) + "/schema", V0)
    assert (status, body) == (200, {"version": {"version": 0}})
    status, body = call(standalone, "POST", schemas(path) + "/schema", V1)
    assert (status, body) == (200, {"version": {"version": 1}})
    status, body = call(standalone, "POST", schemas(path) + "/schema", V0)  # already there: its version
    assert body == {"version": {"version": 0}}
    status, body = call(standalone, "GET", schemas(path) + "/schema")
    assert status == 200
    assert set(body) == {"version", "type", "timestamp", "data", "properties"}
    assert (body["version"], body["type"], body["data"], body["properties"]) == (1, "AVRO", V1["schema"], {})
    assert body["timestamp"] > 0
    status, body = call(standalone, "GET", schemas(path) + "/schema/0")
    assert (body["version"], body["data"], body["properties"]) == (0, V0["schema"], {"owner": "billing"})
    status, body = call(standalone, "GET", schemas(path) + "/schema/9")
    assert status == 404
    status, body = call(standalone, "GET", schemas(path) + "/schemas")
    assert [v["version"] for v in body["getSchemaResponses"]] == [0, 1]


def test_incompatible_upload_is_409_and_bad_bodies_are_400(standalone: StandaloneProcess, ns: str) -> None:
    path = f"{ns}/orders-{uuid.uuid4().hex[:6]}"
    assert call(standalone, "POST", schemas(path) + "/schema", V0)[0] == 200
    status, body = call(standalone, "POST", schemas(path) + "/schema", BAD)
    assert status == 409 and "qty" in body["reason"]
    for bad in ({"type": "NOPE", "schema": ""}, {"type": "AVRO", "schema": "{not json"}, [1, 2]):
        status, body = call(standalone, "POST", schemas(path) + "/schema", bad)
        assert status == 400, (bad, status, body)
    status, _ = call(standalone, "POST", schemas("public/no-such-ns/x") + "/schema", V0)
    assert status == 404


def test_upload_ignores_auto_update_but_not_the_strategy(standalone: StandaloneProcess, ns: str) -> None:
    admin(standalone, "POST", f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema", False)
    path = f"{ns}/orders-{uuid.uuid4().hex[:6]}"
    assert call(standalone, "POST", schemas(path) + "/schema", V0)[0] == 200
    assert call(standalone, "POST", schemas(path) + "/schema", V1)[0] == 200
    assert call(standalone, "POST", schemas(path) + "/schema", BAD)[0] == 409


def test_delete_is_a_tombstone_and_force_removes_everything(standalone: StandaloneProcess, wire: Wire, ns: str) -> None:
    path = f"{ns}/orders-{uuid.uuid4().hex[:6]}"
    call(standalone, "POST", schemas(path) + "/schema", V0)
    status, body = call(standalone, "DELETE", schemas(path) + "/schema")
    assert (status, body) == (200, {"version": 1})
    assert call(standalone, "GET", schemas(path) + "/schema")[0] == 404  # no live schema
    assert call(standalone, "GET", schemas(path) + "/schema/0")[1]["data"] == V0["schema"]  # still readable
    # A schema that was refused before is fine after the delete: nothing live to be checked against.
    status, body = call(standalone, "POST", schemas(path) + "/schema", BAD)
    assert (status, body) == (200, {"version": {"version": 2}})
    answer = wire.request(c.get_schema(f"persistent://{path}", 0))
    assert answer["t"] == c.GET_SCHEMA_RESPONSE  # the binary protocol too (R121)
    status, body = call(standalone, "DELETE", schemas(path) + "/schema?force=true")
    assert status == 200
    assert call(standalone, "GET", schemas(path) + "/schema/0")[0] == 404
    assert call(standalone, "GET", schemas(path) + "/schemas")[0] == 404
    assert call(standalone, "POST", schemas(path) + "/schema", V1)[1] == {"version": {"version": 0}}


def test_compatibility_and_version_endpoints(standalone: StandaloneProcess, ns: str) -> None:
    path = f"{ns}/orders-{uuid.uuid4().hex[:6]}"
    call(standalone, "POST", schemas(path) + "/schema", V0)
    status, body = call(standalone, "POST", schemas(path) + "/compatibility", V1)
    assert (status, body) == (200, {"compatibility": True, "schemaCompatibilityStrategy": "FULL"})
    assert call(standalone, "POST", schemas(path) + "/compatibility", BAD)[1]["compatibility"] is False
    admin(standalone, "PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "FORWARD")
    body = call(standalone, "POST", schemas(path) + "/compatibility", BAD)[1]
    assert body == {"compatibility": True, "schemaCompatibilityStrategy": "FORWARD"}
    assert call(standalone, "POST", schemas(path) + "/version", V0) == (200, {"version": 0})
    assert call(standalone, "POST", schemas(path) + "/version", V1)[0] == 404


def test_namespace_policy_endpoints(standalone: StandaloneProcess, ns: str) -> None:
    base = f"/admin/v2/namespaces/{ns}"
    # Pulsar's defaults when unset.
    assert call(standalone, "GET", base + "/schemaCompatibilityStrategy") == (200, "UNDEFINED")
    assert call(standalone, "GET", base + "/schemaValidationEnforced") == (200, False)
    assert call(standalone, "GET", base + "/isAllowAutoUpdateSchema") == (200, True)
    admin(standalone, "PUT", base + "/schemaCompatibilityStrategy", "BACKWARD_TRANSITIVE")
    assert call(standalone, "GET", base + "/schemaCompatibilityStrategy")[1] == "BACKWARD_TRANSITIVE"
    admin(standalone, "POST", base + "/schemaCompatibilityStrategy", "FORWARD")
    assert call(standalone, "GET", base + "/schemaCompatibilityStrategy")[1] == "FORWARD"
    admin(standalone, "DELETE", base + "/schemaCompatibilityStrategy")
    assert call(standalone, "GET", base + "/schemaCompatibilityStrategy")[1] == "UNDEFINED"
    admin(standalone, "POST", base + "/schemaValidationEnforced", True)
    admin(standalone, "POST", base + "/isAllowAutoUpdateSchema", False)
    assert call(standalone, "GET", base + "/schemaValidationEnforced")[1] is True
    assert call(standalone, "GET", base + "/isAllowAutoUpdateSchema")[1] is False
    policies = call(standalone, "GET", base)[1]
    assert policies["schema_validation_enforced"] is True and policies["is_allow_auto_update_schema"] is False
    assert call(standalone, "PUT", base + "/schemaCompatibilityStrategy", "SIDEWAYS")[0] == 400


def test_topic_policy_endpoints(standalone: StandaloneProcess, ns: str) -> None:
    path = f"{ns}/orders-{uuid.uuid4().hex[:6]}"
    admin(standalone, "PUT", f"/admin/v2/persistent/{path}")
    base = f"/admin/v2/persistent/{path}"
    admin(standalone, "PUT", base + "/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    assert call(standalone, "GET", base + "/schemaCompatibilityStrategy")[1] == "ALWAYS_COMPATIBLE"
    admin(standalone, "POST", base + "/schemaValidationEnforced", True)
    assert call(standalone, "GET", base + "/schemaValidationEnforced")[1] is True
    call(standalone, "POST", schemas(path) + "/schema", V0)
    assert call(standalone, "POST", schemas(path) + "/compatibility", BAD)[1]["compatibility"] is True
    admin(standalone, "DELETE", base + "/schemaCompatibilityStrategy")
    assert call(standalone, "POST", schemas(path) + "/compatibility", BAD)[1]["compatibility"] is False


def test_deleting_a_topic_deletes_its_schema(standalone: StandaloneProcess, ns: str) -> None:
    plain, partitioned = f"{ns}/plain-{uuid.uuid4().hex[:6]}", f"{ns}/parts-{uuid.uuid4().hex[:6]}"
    admin(standalone, "PUT", f"/admin/v2/persistent/{plain}")
    admin(standalone, "PUT", f"/admin/v2/persistent/{partitioned}/partitions", 2)
    for path in (plain, partitioned):
        assert call(standalone, "POST", schemas(path) + "/schema", V0)[0] == 200
    admin(standalone, "DELETE", f"/admin/v2/persistent/{plain}")
    admin(standalone, "DELETE", f"/admin/v2/persistent/{partitioned}/partitions")
    for path in (plain, partitioned):
        assert call(standalone, "GET", schemas(path) + "/schema/0")[0] == 404


# ---------------------------------------------------------------------------------------------- CLI


def cli(sa: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def ok(sa: StandaloneProcess, *args: str) -> str:
    done = cli(sa, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_schema_verbs(standalone: StandaloneProcess, ns: str, tmp_path: Path) -> None:
    topic = f"persistent://{ns}/orders-{uuid.uuid4().hex[:6]}"
    v0, v1, bad = tmp_path / "v0.json", tmp_path / "v1.json", tmp_path / "bad.json"
    for f, doc in ((v0, V0), (v1, V1), (bad, BAD)):
        f.write_text(json.dumps(doc))
    ok(standalone, "schemas", "upload", topic, "--filename", str(v0))
    ok(standalone, "schemas", "upload", topic, "-f", str(v1))
    refused = cli(standalone, "schemas", "upload", topic, "--filename", str(bad))
    assert refused.returncode != 0 and "409" in refused.stderr and "qty" in refused.stderr
    latest = json.loads(ok(standalone, "schemas", "get", topic))
    assert (latest["version"], latest["data"]) == (1, V1["schema"])
    assert json.loads(ok(standalone, "schemas", "get", topic, "--version", "0"))["data"] == V0["schema"]
    every = json.loads(ok(standalone, "schemas", "get", topic, "--all-version"))
    assert [v["version"] for v in every["getSchemaResponses"]] == [0, 1]
    assert json.loads(ok(standalone, "schemas", "compatibility", topic, "-f", str(bad)))["compatibility"] is False
    ok(standalone, "schemas", "delete", topic)
    assert cli(standalone, "schemas", "get", topic).returncode != 0
    ok(standalone, "schemas", "delete", topic, "--force")
    assert cli(standalone, "schemas", "get", topic, "--version", "0").returncode != 0


def test_cli_namespace_schema_policy_verbs(standalone: StandaloneProcess, ns: str) -> None:
    assert ok(standalone, "namespaces", "get-schema-compatibility-strategy", ns).strip() == "UNDEFINED"
    ok(standalone, "namespaces", "set-schema-compatibility-strategy", ns, "--compatibility", "BACKWARD")
    assert ok(standalone, "namespaces", "get-schema-compatibility-strategy", ns).strip() == "BACKWARD"
    assert cli(standalone, "namespaces", "set-schema-compatibility-strategy", ns, "-c", "SIDEWAYS").returncode != 0
    assert ok(standalone, "namespaces", "get-schema-validation-enforce", ns).strip() == "false"
    ok(standalone, "namespaces", "set-schema-validation-enforce", ns, "--enable")
    assert ok(standalone, "namespaces", "get-schema-validation-enforce", ns).strip() == "true"
    ok(standalone, "namespaces", "set-schema-validation-enforce", ns, "--disable")
    assert ok(standalone, "namespaces", "get-schema-validation-enforce", ns).strip() == "false"
    assert ok(standalone, "namespaces", "get-is-allow-auto-update-schema", ns).strip() == "true"
    ok(standalone, "namespaces", "set-is-allow-auto-update-schema", ns, "--disable")
    assert ok(standalone, "namespaces", "get-is-allow-auto-update-schema", ns).strip() == "false"
