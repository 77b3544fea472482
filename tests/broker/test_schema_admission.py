"""WIRE.md R118-R124 against a real standalone: the broker's schema registry and its admission rules.

The protocol is spoken by hand (``tests/protocol/wire.py``: ``producer``/``subscribe`` frames with a
``schema`` map, ``get_schema``), so each rule is checked against what the broker itself does, not
through the client's handling of schemas. Each test works in a namespace of its own, so a policy it
sets cannot leak into another test.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.protocol.wire import Wire, admin, batch, session
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol import commands as c
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import SchemaInfo, SchemaType

pytestmark = pytest.mark.timeout(120)


def avro(*fields: dict[str, Any], name: str = "Order") -> dict[str, Any]:
    """The wire ``schema`` map (R118) of an Avro record with ``fields``."""
    definition = {"type": "record", "name": name, "fields": list(fields)}
    return SchemaInfo(SchemaType.AVRO, json.dumps(definition), name).to_wire()


ID = {"name": "id", "type": "string"}
QTY_OPTIONAL = {"name": "qty", "type": ["null", "int"], "default": None}
QTY_REQUIRED = {"name": "qty", "type": "int"}
X_DEFAULT = {"name": "extra_count", "type": "int", "default": 0}
X_REQUIRED = {"name": "extra_count", "type": "int"}

V0 = avro(ID)
V1_ADD_OPTIONAL = avro(ID, QTY_OPTIONAL)
ADD_REQUIRED = avro(ID, QTY_REQUIRED)
REMOVE_ID = avro(QTY_OPTIONAL)
ID_AS_INT = avro({"name": "id", "type": "int"})


@pytest.fixture
def ns(standalone: StandaloneProcess) -> Iterator[str]:
    """A namespace of this test's own (policies set in it stay in it)."""
    name = f"public/s-{uuid.uuid4().hex[:8]}"
    admin(standalone, "PUT", f"/admin/v2/namespaces/{name}")
    yield name


@pytest.fixture
def wire(standalone: StandaloneProcess) -> Iterator[Wire]:
    with session(standalone.service_url) as w:
        yield w


def topic_in(ns: str) -> str:
    return f"persistent://{ns}/t-{uuid.uuid4().hex[:8]}"


class Ids:
    """Fresh producer/consumer ids on one connection."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


ids = Ids()


def produce(wire: Wire, topic: str, schema: dict[str, Any] | None) -> Any:
    """The broker's answer to a ``producer`` with ``schema``: ``producer_success`` or ``error``."""
    return wire.request(c.producer(topic, ids(), schema=schema))


def subscribe(wire: Wire, topic: str, schema: dict[str, Any] | None, **options: Any) -> Any:
    return wire.request(c.subscribe(topic, f"sub-{ids()}", ids(), c.SUB_EXCLUSIVE, schema=schema, **options))


def version_of(answer: Any) -> int:
    assert answer["t"] == c.PRODUCER_SUCCESS, answer
    version: int = answer["schema_version"]
    return version


def refused(answer: Any) -> str:
    """The reason of an ``IncompatibleSchema`` refusal (fails on anything else)."""
    assert answer["t"] == c.ERROR and answer["code"] == "IncompatibleSchema", answer
    message: str = answer["message"]
    return message


def set_ns_policy(sa: StandaloneProcess, ns: str, endpoint: str, value: Any) -> None:
    admin(sa, "POST", f"/admin/v2/namespaces/{ns}/{endpoint}", value)


def get_schema(wire: Wire, topic: str, version: int | None = None) -> Any:
    return wire.request(c.get_schema(topic, version))


# ---------------------------------------------------------------------------------------------- R119


def test_r119_first_producer_registers_version_0_and_the_same_schema_gets_it_again(wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    assert version_of(produce(wire, topic, V0)) == 0
    assert version_of(produce(wire, topic, V0)) == 0
    # The same definition with other whitespace is the same schema (pulsar-client indents its JSON).
    indented = {**V0, "schema": json.dumps(json.loads(V0["schema"]), indent=True)}
    assert version_of(produce(wire, topic, indented)) == 0
    answer = get_schema(wire, topic)
    assert answer["t"] == c.GET_SCHEMA_RESPONSE and answer["version"] == 0
    assert SchemaInfo.from_wire(answer["schema"]).same_schema(SchemaInfo.from_wire(V0))


def test_r119_compatible_change_is_next_version_incompatible_is_refused_with_reason(wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    assert version_of(produce(wire, topic, V0)) == 0
    assert version_of(produce(wire, topic, V1_ADD_OPTIONAL)) == 1
    reason = refused(produce(wire, topic, ADD_REQUIRED))  # FULL (broker default): a new reader lacks qty
    assert "FULL" in reason and "qty" in reason
    reason = refused(produce(wire, topic, ID_AS_INT))
    assert "id" in reason
    # Nothing was registered by the refusals; the older versions still admit their producers.
    assert get_schema(wire, topic)["version"] == 1
    assert version_of(produce(wire, topic, V0)) == 0


# Each strategy against the usual evolutions of V0 (an admitted change gets version 1).
STRATEGY_CASES = [
    ("ALWAYS_COMPATIBLE", ID_AS_INT, True),
    ("ALWAYS_INCOMPATIBLE", V1_ADD_OPTIONAL, False),
    ("BACKWARD", REMOVE_ID, True),  # the new schema reads old data, ignoring id
    ("BACKWARD", ADD_REQUIRED, False),  # the new schema cannot fill qty from old data
    ("FORWARD", ADD_REQUIRED, True),  # old readers ignore qty
    ("FORWARD", REMOVE_ID, False),  # old readers cannot fill id
    ("FULL", V1_ADD_OPTIONAL, True),
    ("FULL", REMOVE_ID, False),
    ("BACKWARD_TRANSITIVE", REMOVE_ID, True),
    ("FORWARD_TRANSITIVE", REMOVE_ID, False),
    ("FULL_TRANSITIVE", ADD_REQUIRED, False),
]


@pytest.mark.parametrize(("strategy", "change", "admitted"), STRATEGY_CASES)
def test_r124_each_strategy_from_the_namespace_policy(
    standalone: StandaloneProcess, wire: Wire, ns: str, strategy: str, change: dict[str, Any], admitted: bool
) -> None:
    admin(standalone, "PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", strategy)
    topic = topic_in(ns)
    assert version_of(produce(wire, topic, V0)) == 0
    answer = produce(wire, topic, change)
    if admitted:
        assert version_of(answer) == 1
    else:
        assert strategy in refused(answer)


def test_r124_transitive_strategies_check_every_live_version(
    standalone: StandaloneProcess, wire: Wire, ns: str
) -> None:
    # v0 {id}, v1 {id, x=0}: x without default reads v1 data but not v0 data.
    for strategy, admitted in (("BACKWARD", True), ("BACKWARD_TRANSITIVE", False)):
        set_ns_policy(standalone, ns, "schemaCompatibilityStrategy", strategy)
        topic = topic_in(ns)
        assert version_of(produce(wire, topic, V0)) == 0
        assert version_of(produce(wire, topic, avro(ID, X_DEFAULT))) == 1
        answer = produce(wire, topic, avro(ID, X_REQUIRED))
        if admitted:
            assert version_of(answer) == 2
        else:
            reason = refused(answer)
            assert "BACKWARD_TRANSITIVE" in reason and "extra_count" in reason


def test_r124_topic_level_strategy_overrides_the_namespace(standalone: StandaloneProcess, wire: Wire, ns: str) -> None:
    set_ns_policy(standalone, ns, "schemaCompatibilityStrategy", "ALWAYS_INCOMPATIBLE")
    topic = topic_in(ns)
    path = topic.removeprefix("persistent://")
    admin(standalone, "PUT", f"/admin/v2/persistent/{path}")
    assert version_of(produce(wire, topic, V0)) == 0
    refused(produce(wire, topic, V1_ADD_OPTIONAL))
    admin(standalone, "PUT", f"/admin/v2/persistent/{path}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    assert version_of(produce(wire, topic, ID_AS_INT)) == 1
    # Removing the topic's own policy gives the namespace's back.
    admin(standalone, "DELETE", f"/admin/v2/persistent/{path}/schemaCompatibilityStrategy")
    refused(produce(wire, topic, V1_ADD_OPTIONAL))


def test_r124_policy_values_are_validated(standalone: StandaloneProcess, ns: str) -> None:
    status, body = admin_call(standalone, "POST", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "SIDEWAYS")
    assert status == 400 and "SIDEWAYS" in body["reason"]
    status, body = admin_call(standalone, "POST", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced", "yes")
    assert status == 400


def test_r119_schema_validation_enforced_refuses_a_schemaless_producer(
    standalone: StandaloneProcess, wire: Wire, ns: str
) -> None:
    with_schema, without = topic_in(ns), topic_in(ns)
    assert version_of(produce(wire, with_schema, V0)) == 0
    # Off (the default): a producer without schema is admitted, with no schema version.
    answer = produce(wire, with_schema, None)
    assert answer["t"] == c.PRODUCER_SUCCESS and "schema_version" not in answer
    set_ns_policy(standalone, ns, "schemaValidationEnforced", True)
    assert "schemaValidationEnforced" in refused(produce(wire, with_schema, None))
    # A topic without schema still takes bytes producers.
    assert produce(wire, without, None)["t"] == c.PRODUCER_SUCCESS


def test_r119_auto_update_off_refuses_new_schemas_but_admits_uploaded_ones(
    standalone: StandaloneProcess, wire: Wire, ns: str
) -> None:
    set_ns_policy(standalone, ns, "isAllowAutoUpdateSchema", False)
    topic = topic_in(ns)
    assert "auto updating is disabled" in refused(produce(wire, topic, V0))
    path = topic.removeprefix("persistent://")
    upload = {"type": "AVRO", "schema": V0["schema"], "properties": {}}
    status, body = admin_call(standalone, "POST", f"/admin/v2/schemas/{path}/schema", upload)
    assert status < 300, body
    assert version_of(produce(wire, topic, V0)) == 0
    assert "auto updating is disabled" in refused(produce(wire, topic, V1_ADD_OPTIONAL))


# ---------------------------------------------------------------------------------------------- R120


def test_r120_a_consumer_registers_its_schema_on_an_idle_topic(wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    assert subscribe(wire, topic, V0)["t"] == c.SUCCESS
    assert get_schema(wire, topic)["version"] == 0
    # The producer with that schema finds the version the consumer registered.
    assert version_of(produce(wire, topic, V0)) == 0


def test_r120_a_consumer_on_a_busy_topic_without_schema_registers_nothing(wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    producer = produce(wire, topic, None)
    assert producer["t"] == c.PRODUCER_SUCCESS
    assert subscribe(wire, topic, V0)["t"] == c.SUCCESS
    answer = get_schema(wire, topic)
    assert answer["t"] == c.ERROR and answer["code"] == "TopicNotFound"


def test_r120_a_topic_with_stored_entries_is_not_idle(wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    pid = ids()
    assert wire.request(c.producer(topic, pid))["t"] == c.PRODUCER_SUCCESS
    meta, payload = batch(b"stored")
    wire.send(c.send(pid, 0, meta, payload))
    assert wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR))["t"] == c.SEND_RECEIPT
    assert wire.request(c.close_producer(pid))["t"] == c.SUCCESS
    assert subscribe(wire, topic, V0)["t"] == c.SUCCESS
    assert get_schema(wire, topic)["t"] == c.ERROR


def test_r120_consumers_against_live_versions(standalone: StandaloneProcess, wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    assert version_of(produce(wire, topic, V0)) == 0
    assert version_of(produce(wire, topic, V1_ADD_OPTIONAL)) == 1
    assert subscribe(wire, topic, V0)["t"] == c.SUCCESS  # equal to a live version
    assert subscribe(wire, topic, avro(ID, {"name": "note", "type": "string", "default": ""}))["t"] == c.SUCCESS
    assert "qty" in refused(subscribe(wire, topic, avro(ID, QTY_REQUIRED)))  # cannot fill qty from v0/v1
    assert subscribe(wire, topic, None)["t"] == c.SUCCESS  # bytes read anything
    # Readers (non-durable) follow the same rule.
    assert "qty" in refused(subscribe(wire, topic, avro(ID, QTY_REQUIRED), durable=False))
    set_ns_policy(standalone, ns, "schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    assert subscribe(wire, topic, avro(ID, QTY_REQUIRED))["t"] == c.SUCCESS


# ---------------------------------------------------------------------------------------------- R119/R123


def test_r123_partitions_and_domains_share_one_registry(standalone: StandaloneProcess, wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    admin(standalone, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", 2)
    assert version_of(produce(wire, f"{topic}-partition-0", V0)) == 0
    assert version_of(produce(wire, f"{topic}-partition-1", V0)) == 0
    assert version_of(produce(wire, f"{topic}-partition-1", V1_ADD_OPTIONAL)) == 1
    refused(produce(wire, f"{topic}-partition-0", ADD_REQUIRED))
    assert get_schema(wire, topic)["version"] == 1
    assert get_schema(wire, f"{topic}-partition-0")["version"] == 1
    non_persistent = topic.replace("persistent://", "non-persistent://")
    assert version_of(produce(wire, non_persistent, V1_ADD_OPTIONAL)) == 1


# ---------------------------------------------------------------------------------------------- R121


def test_r121_get_schema_by_version_and_its_errors(wire: Wire, ns: str) -> None:
    topic = topic_in(ns)
    answer = get_schema(wire, topic)
    assert answer["t"] == c.ERROR and answer["code"] == "TopicNotFound"
    assert "no schema version" in answer["message"]
    produce(wire, topic, V0)
    produce(wire, topic, V1_ADD_OPTIONAL)
    first = get_schema(wire, topic, 0)
    assert first["version"] == 0 and first["schema"]["schema"] == V0["schema"]
    assert first["schema"]["type"] == "AVRO" and first["schema"]["name"] == "Order"
    assert get_schema(wire, topic, 1)["schema"]["schema"] == V1_ADD_OPTIONAL["schema"]
    missing = get_schema(wire, topic, 7)
    assert missing["code"] == "TopicNotFound" and "no schema version 7" in missing["message"]


def test_r118_a_bad_schema_map_is_invalid_command(wire: Wire, ns: str) -> None:
    answer = produce(wire, topic_in(ns), {"type": "NOT_A_TYPE", "schema": ""})
    assert answer["t"] == c.ERROR and answer["code"] == "InvalidCommand"
    answer = produce(wire, topic_in(ns), {"type": "AVRO", "schema": "{not json"})
    assert answer["t"] == c.ERROR and answer["code"] == "InvalidCommand"


# ---------------------------------------------------------------------------------------------- R123


@pytest.mark.durability
def test_r123_the_registry_survives_kill_9_of_the_standalone(fresh_standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"
    with session(fresh_standalone.service_url) as wire:
        assert version_of(produce(wire, topic, V0)) == 0
        assert version_of(produce(wire, topic, V1_ADD_OPTIONAL)) == 1
    fresh_standalone.kill9()
    fresh_standalone.start()
    with session(fresh_standalone.service_url) as wire:
        assert get_schema(wire, topic, 0)["schema"]["schema"] == V0["schema"]
        assert get_schema(wire, topic)["version"] == 1
        assert version_of(produce(wire, topic, V0)) == 0
        assert version_of(produce(wire, topic, avro(ID, QTY_OPTIONAL, X_DEFAULT))) == 2


async def test_r123_concurrent_registrations_never_share_a_version(tmp_path: Path) -> None:
    """Every write is a compare-and-set: registrations racing on one record each get their own
    number (two brokers admitting at once cannot both create version N)."""
    store = await LmdbMetadataStore.open(tmp_path / "metadata")
    try:
        registries = [SchemaRegistry(store) for _ in range(6)]
        name = TopicName.parse("persistent://public/default/race")
        infos = [SchemaInfo.from_wire(avro(ID, {"name": f"f{i}", "type": "int", "default": i})) for i in range(6)]
        results = await asyncio.gather(
            *(r.add(name, info, lambda live: None) for r, info in zip(registries, infos, strict=True))
        )
        assert sorted(v for v, created in results) == list(range(6))
        assert all(created for _, created in results)
        stored = await SchemaRegistry(store).versions(name)
        assert [v.version for v in stored] == list(range(6))
        for version, _ in results:
            assert stored[version].info == infos[[v for v, _ in results].index(version)]
    finally:
        await store.close()
