"""Avro's resolution rules one at a time, the non-Avro types, and the strategy plumbing.

Every Avro pair here is also decoded by fastavro (``fastavro_reads``), so a rule that Magnetar got
wrong shows up as a disagreement with an independent implementation, not only as a changed string.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.schema.test_compatibility_table import avro, fastavro_reads

from magnetar.protocol.errors import IncompatibleSchema
from magnetar.schema.compatibility import can_read, check_compatible, check_reader
from magnetar.schema.info import CompatibilityStrategy, SchemaInfo, SchemaType

S = CompatibilityStrategy


def readable(reader: Any, writer: Any) -> str | None:
    """can_read on two Avro definitions, asserting fastavro reaches the same verdict."""
    ours = can_read(avro(reader), avro(writer))
    assert (ours is None) == fastavro_reads(reader, writer), f"can_read says {ours!r}; fastavro disagrees"
    return ours


def rec(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


# --------------------------------------------------------------------------------------------
# Records


def test_nested_record_fields_are_resolved_recursively_and_named_by_path() -> None:
    address = rec("Address", f("city", "string"))
    v1 = rec("Customer", f("id", "string"), f("address", address))
    with_zip = rec("Customer", f("id", "string"), f("address", rec("Address", f("city", "string"), f("zip", "string"))))
    assert readable(with_zip, v1) == (
        "field 'address.zip' has no default in the reader's schema and the writer's schema lacks it"
    )
    assert readable(v1, with_zip) is None  # the writer's extra nested field is skipped
    with_zip_default = rec(
        "Customer", f("id", "string"), f("address", rec("Address", f("city", "string"), f("zip", "string", default="")))
    )
    assert readable(with_zip_default, v1) is None
    with pytest.raises(IncompatibleSchema, match=r"field 'address.zip' added without a default"):
        check_compatible(avro(with_zip), [avro(v1)], S.BACKWARD)


def test_field_order_does_not_matter() -> None:
    assert readable(rec("R", f("b", "int"), f("a", "string")), rec("R", f("a", "string"), f("b", "int"))) is None


def test_record_names_do_not_matter_outside_unions() -> None:
    """Java Avro's resolver (Pulsar's broker decides with it) resolves two records by their fields
    alone; fastavro insists on the name, so it is no referee here (tests/schema/test_avro_record_names.py)."""
    old = rec("Order", f("id", "string"))
    renamed = rec("Purchase", f("id", "string"))
    assert can_read(avro(renamed), avro(old)) is None
    assert can_read(avro(old), avro(renamed)) is None
    assert readable(rec("Purchase", f("id", "string"), aliases=["Order"]), old) is None
    # A namespace change alone is fine, for fastavro too.
    assert (
        readable(rec("Order", f("id", "string"), namespace="b"), rec("Order", f("id", "string"), namespace="a")) is None
    )


def test_field_aliases_let_a_reader_rename_a_field() -> None:
    old = rec("R", f("qty", "int"))
    assert readable(rec("R", f("quantity", "int", aliases=["qty"])), old) is None
    assert readable(rec("R", f("quantity", "long", aliases=["qty"])), old) is None  # alias + promotion
    assert "field 'quantity'" in (readable(rec("R", f("quantity", "int")), old) or "")


# --------------------------------------------------------------------------------------------
# Primitive promotions


@pytest.mark.parametrize(
    ("writer", "reader", "ok"),
    [
        ("int", "long", True),
        ("int", "float", True),
        ("int", "double", True),
        ("long", "float", True),
        ("long", "double", True),
        ("float", "double", True),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("long", "int", False),
        ("double", "float", False),
        ("float", "long", False),
        ("int", "string", False),
        ("boolean", "int", False),
        ("null", "string", False),
    ],
)
def test_primitive_promotions(writer: str, reader: str, ok: bool) -> None:
    reason = readable(rec("R", f("x", reader)), rec("R", f("x", writer)))
    assert (reason is None) == ok, reason
    if not ok:
        assert reason == f"field 'x': type changed from {writer} to {reader}, which is not an Avro promotion"


# --------------------------------------------------------------------------------------------
# Enums, fixed


def test_enum_symbols_need_the_reader_default() -> None:
    rgb = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
    rg = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    rg_default = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"], "default": "RED"}
    assert readable(rec("R", f("c", rgb)), rec("R", f("c", rg))) is None  # adding a symbol: new reads old
    reason = readable(rec("R", f("c", rg)), rec("R", f("c", rgb)))
    assert reason is not None and "field 'c'" in reason and "'BLUE'" in reason and "no default" in reason
    assert readable(rec("R", f("c", rg_default)), rec("R", f("c", rgb))) is None
    other = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}
    assert "names differ" in (readable(rec("R", f("c", other)), rec("R", f("c", rgb))) or "")


def test_fixed_needs_the_same_name_and_size() -> None:
    md5 = {"type": "fixed", "name": "Hash", "size": 16}
    assert readable(rec("R", f("h", md5)), rec("R", f("h", md5))) is None
    sha = {"type": "fixed", "name": "Hash", "size": 32}
    assert "changed size from 16 to 32" in (readable(rec("R", f("h", sha)), rec("R", f("h", md5))) or "")
    renamed = {"type": "fixed", "name": "Digest", "size": 16}
    assert "names differ" in (readable(rec("R", f("h", renamed)), rec("R", f("h", md5))) or "")


# --------------------------------------------------------------------------------------------
# Unions


def test_unions() -> None:
    def one(t: Any) -> dict[str, Any]:
        return rec("R", f("x", t))

    # Writer union: every branch must resolve.
    assert readable(one(["null", "string", "int"]), one(["null", "string"])) is None
    assert "matches no branch" in (readable(one(["null", "string"]), one(["null", "string", "int"])) or "")
    assert readable(one("string"), one(["null", "string"])) == (
        "field 'x': the writer's union branch null cannot be read as string"
    )
    # Reader union: the writer's type must match a branch (promotions count).
    assert readable(one(["null", "string"]), one("string")) is None
    assert readable(one(["null", "long"]), one("int")) is None
    assert readable(one(["null", "long"]), one(["null", "int"])) is None
    assert "matches no branch" in (readable(one(["null", "string"]), one("int")) or "")
    # A record branch is resolved deeply.
    inner_v1 = rec("Inner", f("a", "int"))
    inner_v2 = rec("Inner", f("a", "int"), f("b", "int"))
    assert readable(one(["null", inner_v1]), one(["null", inner_v2])) is None
    assert readable(one(["null", inner_v2]), one(["null", inner_v1])) == (
        "field 'x.b' has no default in the reader's schema and the writer's schema lacks it"
    )


# --------------------------------------------------------------------------------------------
# Arrays, maps


def test_arrays_and_maps_resolve_their_items() -> None:
    assert (
        readable(
            rec("R", f("tags", {"type": "array", "items": "long"})),
            rec("R", f("tags", {"type": "array", "items": "int"})),
        )
        is None
    )
    assert (
        readable(
            rec("R", f("tags", {"type": "array", "items": "int"})),
            rec("R", f("tags", {"type": "array", "items": "string"})),
        )
        == "field 'tags[]': type changed from string to int, which is not an Avro promotion"
    )
    assert (
        readable(
            rec("R", f("m", {"type": "map", "values": "double"})), rec("R", f("m", {"type": "map", "values": "float"}))
        )
        is None
    )
    reason = readable(
        rec("R", f("m", {"type": "map", "values": rec("V", f("a", "int"), f("b", "int"))})),
        rec("R", f("m", {"type": "map", "values": rec("V", f("a", "int"))})),
    )
    assert reason is not None and "field 'm{}.b'" in reason
    assert "type changed from array<string> to map<string>" in (
        readable(
            rec("R", f("x", {"type": "map", "values": "string"})),
            rec("R", f("x", {"type": "array", "items": "string"})),
        )
        or ""
    )


# --------------------------------------------------------------------------------------------
# Named references and recursion


def test_named_references_and_recursive_types_terminate() -> None:
    node_v1 = rec("Node", f("value", "int"), f("next", ["null", "Node"], default=None))
    node_v2 = rec(
        "Node", f("value", "long"), f("label", "string", default=""), f("next", ["null", "Node"], default=None)
    )
    node_v3 = rec("Node", f("value", "int"), f("label", "string"), f("next", ["null", "Node"], default=None))
    assert readable(node_v1, node_v1) is None
    assert readable(node_v2, node_v1) is None
    assert readable(node_v1, node_v2) is not None  # long -> int
    assert readable(node_v3, node_v1) == (
        "field 'label' has no default in the reader's schema and the writer's schema lacks it"
    )
    # A type defined once and referenced by name later (same namespace, qualified on both sides).
    point = {"type": "record", "name": "Point", "fields": [f("x", "int")]}
    line_v1 = rec("Line", f("a", point), f("b", "Point"), namespace="geo")
    line_v2 = rec("Line", f("a", {**point, "fields": [f("x", "double")]}), f("b", "geo.Point"), namespace="geo")
    assert can_read(avro(line_v2), avro(line_v1)) is None
    assert can_read(avro(line_v1), avro(line_v2)) == (
        "field 'a.x': type changed from double to int, which is not an Avro promotion"
    )
    assert "unknown type name" in (can_read(avro(rec("R", f("p", "Nowhere"))), avro(rec("R", f("p", "int")))) or "")


def test_top_level_non_record_schemas() -> None:
    assert readable("long", "int") is None
    assert (
        readable("int", "long") == "the top-level schema: type changed from long to int, which is not an Avro promotion"
    )
    assert readable(["null", "string"], "string") is None


# --------------------------------------------------------------------------------------------
# Other schema types


def test_json_schemas_use_the_avro_rules_of_their_definition() -> None:
    v1 = rec("Order", f("id", "string"))
    v2 = rec("Order", f("id", "string"), f("qty", "int"))
    j1, j2 = avro(v1, SchemaType.JSON), avro(v2, SchemaType.JSON)
    assert can_read(j2, j1) == "field 'qty' has no default in the reader's schema and the writer's schema lacks it"
    assert can_read(j1, j2) is None
    with pytest.raises(IncompatibleSchema, match="field 'qty' added without a default"):
        check_compatible(j2, [j1], S.BACKWARD)
    check_compatible(j2, [j1], S.FORWARD)


def _proto(root: str) -> SchemaInfo:
    definition = {"fileDescriptorSet": "Cg==", "rootMessageClassName": root, "rootMessageTypeName": root}
    return SchemaInfo(SchemaType.PROTOBUF_NATIVE, json.dumps(definition))


def test_protobuf_native_compares_the_root_message_type() -> None:
    assert can_read(_proto("shop.Order"), _proto("shop.Order")) is None
    assert can_read(_proto("shop.Invoice"), _proto("shop.Order")) == (
        "the top-level schema: the root message type changed from 'shop.Order' to 'shop.Invoice'"
    )
    check_compatible(_proto("shop.Order"), [_proto("shop.Order")], S.FULL)
    with pytest.raises(IncompatibleSchema, match="root message type changed"):
        check_compatible(_proto("shop.Invoice"), [_proto("shop.Order")], S.BACKWARD)
    no_root = SchemaInfo(SchemaType.PROTOBUF_NATIVE, json.dumps({"fileDescriptorSet": "Cg=="}))
    assert "rootMessageTypeName" in (can_read(no_root, _proto("shop.Order")) or "")


def test_a_type_change_is_refused_with_the_types_named() -> None:
    order = avro(rec("Order", f("id", "string")))
    string = SchemaInfo(SchemaType.STRING)
    assert can_read(string, order) == "the top-level schema: the schema type changed from AVRO to STRING"
    assert can_read(avro(rec("Order", f("id", "string")), SchemaType.JSON), order) is not None
    assert can_read(string, SchemaInfo(SchemaType.STRING)) is None
    for strategy in set(S) - {S.ALWAYS_COMPATIBLE}:
        with pytest.raises(IncompatibleSchema, match=r"AVRO to STRING|STRING to AVRO|ALWAYS_INCOMPATIBLE"):
            check_compatible(string, [order], strategy)
    check_compatible(string, [order], S.ALWAYS_COMPATIBLE)


def test_an_invalid_definition_is_a_reason_not_a_crash() -> None:
    good = avro(rec("R", f("a", "int")))
    assert "not valid JSON" in (can_read(SchemaInfo(SchemaType.AVRO, "{nope"), good) or "")
    assert "not a valid Avro schema" in (can_read(avro({"type": "record", "fields": []}), good) or "")


# --------------------------------------------------------------------------------------------
# Strategy plumbing

V1 = avro(rec("Order", f("id", "string")))
ADD_REQUIRED = avro(rec("Order", f("id", "string"), f("qty", "int")))  # forward-only
REMOVE_REQUIRED_FROM = avro(rec("Order", f("id", "string"), f("qty", "int")))
REMOVED = avro(rec("Order", f("id", "string")))  # backward-only against REMOVE_REQUIRED_FROM
ADD_OPTIONAL = avro(rec("Order", f("id", "string"), f("note", ["null", "string"], default=None)))


def test_undefined_is_treated_as_full() -> None:
    check_compatible(ADD_OPTIONAL, [V1], S.UNDEFINED)
    with pytest.raises(IncompatibleSchema, match=r"under FULL .*added without a default"):
        check_compatible(ADD_REQUIRED, [V1], S.UNDEFINED)
    with pytest.raises(IncompatibleSchema, match=r"under FULL .*removed"):
        check_compatible(REMOVED, [REMOVE_REQUIRED_FROM], S.UNDEFINED)
    check_compatible(ADD_REQUIRED, [V1], S.FORWARD)  # the same change passes a one-way strategy
    check_compatible(REMOVED, [REMOVE_REQUIRED_FROM], S.BACKWARD)


@pytest.mark.parametrize("strategy", list(S))
def test_no_live_version_is_always_compatible(strategy: CompatibilityStrategy) -> None:
    check_compatible(ADD_REQUIRED, [], strategy)
    check_compatible(SchemaInfo(SchemaType.STRING), [], strategy)
    check_reader(ADD_REQUIRED, [], strategy)


def test_always_incompatible_refuses_any_change_and_always_compatible_any() -> None:
    with pytest.raises(IncompatibleSchema, match="ALWAYS_INCOMPATIBLE"):
        check_compatible(ADD_OPTIONAL, [V1], S.ALWAYS_INCOMPATIBLE)
    check_compatible(avro(rec("Order", f("id", "int"))), [V1], S.ALWAYS_COMPATIBLE)


# The reader can read the newest version (qty: int) but not the oldest (qty: long, no promotion
# from long to int): which strategies look at the oldest decides.
READER_V0 = avro(rec("Order", f("id", "string"), f("qty", "long")))
READER_V1 = avro(rec("Order", f("id", "string"), f("qty", "int")))
READER = avro(rec("Order", f("id", "string"), f("qty", "int"), f("note", ["null", "string"], default=None)))

CONSUMER_VERDICTS = {
    S.ALWAYS_COMPATIBLE: True,
    S.ALWAYS_INCOMPATIBLE: False,
    S.BACKWARD: False,  # must read every live version
    S.FORWARD: True,  # the newest only
    S.FULL: True,  # the newest only
    S.BACKWARD_TRANSITIVE: False,
    S.FORWARD_TRANSITIVE: False,
    S.FULL_TRANSITIVE: False,
    S.UNDEFINED: True,  # as FULL
}


@pytest.mark.parametrize("strategy", list(S))
def test_check_reader_per_strategy(strategy: CompatibilityStrategy) -> None:
    live = [READER_V0, READER_V1]
    if CONSUMER_VERDICTS[strategy]:
        check_reader(READER, live, strategy)
        return
    with pytest.raises(IncompatibleSchema) as refused:
        check_reader(READER, live, strategy)
    message = str(refused.value)
    effective = "FULL" if strategy is S.UNDEFINED else strategy.name
    assert effective in message, message
    if strategy is not S.ALWAYS_INCOMPATIBLE:
        assert "live version index 0" in message and "field 'qty': type changed from long to int" in message


def test_check_reader_refuses_a_reader_that_cannot_read_the_newest() -> None:
    newest = avro(rec("Order", f("id", "string"), f("qty", "string")))
    for strategy in (S.FORWARD, S.FULL, S.BACKWARD):
        with pytest.raises(IncompatibleSchema, match=rf"{strategy.name} with live version index 1 \(the newest"):
            check_reader(READER, [READER_V1, newest], strategy)


def test_refusals_name_the_registrys_version_numbers_when_given() -> None:
    """After a deletion the live versions are not numbered from 0: the broker passes their numbers,
    and the refusal names the version a user can fetch (``schemas get --version N``)."""
    old = SchemaInfo(
        SchemaType.AVRO, json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    )
    new = SchemaInfo(
        SchemaType.AVRO, json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})
    )
    with pytest.raises(IncompatibleSchema, match=r"BACKWARD with live version 7 \(the newest, of 1\)") as refused:
        check_compatible(new, [old], CompatibilityStrategy.BACKWARD, [7])
    assert "version index" not in str(refused.value)
    with pytest.raises(IncompatibleSchema, match=r"cannot read data written with version 7"):
        check_reader(new, [old], CompatibilityStrategy.BACKWARD, [7])
