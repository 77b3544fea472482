"""The typed ``value`` column without Spark's JVM: Avro -> Spark/Arrow types, the merge of schema
versions (Parquet's rule: union by name in first-seen order, int->long and float->double, a
conflict named), and entries decoded with their writer version into the merged struct.

Payloads are written with fastavro (Avro) and json (JSON) as a producer with a schema writes them,
and go through ``columnar.message_rows.RowColumns`` into Arrow, so what is checked is what Spark receives.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import logging
import uuid
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from magnetar.columnar.message_rows import COLUMNS, StoredEntry, entry_rows
from magnetar.jobs.schema_versions import SchemaVersion, listed_versions, live_versions, schema_key
from magnetar.jobs.source import SCHEMA, typed_schema
from magnetar.jobs.value_schema import TypedValues
from magnetar.jobs.value_types import Node, SchemaMergeError, arrow_type, avro_node, merge_nodes, spark_type
from magnetar.protocol.batch import encode_batch, make_record
from magnetar.protocol.entry import EntryMeta
from magnetar.schema.info import SchemaType

TOPIC = "persistent://public/default/orders"

ADDRESS: dict[str, Any] = {
    "type": "record",
    "name": "Address",
    "fields": [{"name": "city", "type": ["null", "string"]}],
}
V0: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "qty", "type": ["null", "int"]},
        {"name": "price", "type": "float"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "blob", "type": ["null", "bytes"]},
        {"name": "address", "type": ["null", ADDRESS]},
        {"name": "history", "type": {"type": "array", "items": "Address"}},
    ],
}
# v1: adds an optional field with a default, widens qty to long and price to double, and adds a
# field to the nested record.
V1 = json.loads(json.dumps(V0))
V1["fields"][1]["type"] = ["null", "long"]
V1["fields"][2]["type"] = "double"
V1["fields"][7]["type"][1]["fields"].append({"name": "zip", "type": ["null", "string"], "default": None})
V1["fields"].append({"name": "note", "type": ["null", "string"], "default": None})


def version(v: int, definition: Any, stype: SchemaType = SchemaType.AVRO) -> SchemaVersion:
    return SchemaVersion(v, stype, json.dumps(definition))


def avro(definition: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(definition), record)
    return out.getvalue()


def entry(payloads: list[bytes | None], sv: int | None, entry_id: int = 0, **extra: Any) -> StoredEntry:
    meta, payload = encode_batch(
        [make_record(p, {}, None, 0, i) for i, p in enumerate(payloads)], producer_name="p", first_sequence_id=0
    )
    if sv is not None:
        meta["sv"] = sv
    meta.update(extra)  # type: ignore[typeddict-item]
    return StoredEntry(entry_id, meta, payload)


def rows_of(values: TypedValues, stored: StoredEntry, topic: str = TOPIC) -> list[dict[str, Any]]:
    return entry_rows(topic, -1, 1, stored, values.for_topic(topic))


ORDER0 = {
    "id": "o-1",
    "qty": 2,
    "price": 1.5,
    "tags": ["new"],
    "attrs": {"a": 1},
    "status": "NEW",
    "blob": b"\x00\x01",
    "address": {"city": "Oslo"},
    "history": [{"city": "Rome"}],
}


# ------------------------------------------------------------------------------------ types


def test_avro_types_map_to_spark_types() -> None:
    assert spark_type(avro_node(V0)) == StructType(
        [
            StructField("id", StringType()),
            StructField("qty", IntegerType()),
            StructField("price", FloatType()),
            StructField("tags", ArrayType(StringType())),
            StructField("attrs", MapType(StringType(), IntegerType())),
            StructField("status", StringType()),  # an enum is its symbol
            StructField("blob", BinaryType()),
            StructField("address", StructType([StructField("city", StringType())])),
            StructField("history", ArrayType(StructType([StructField("city", StringType())]))),  # a named reference
        ]
    )


def test_logical_types_and_other_primitives() -> None:
    definition = {
        "type": "record",
        "name": "L",
        "fields": [
            {"name": "ok", "type": "boolean"},
            {"name": "n", "type": "long"},
            {"name": "d", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "f", "type": {"type": "fixed", "name": "F4", "size": 4}},
            {"name": "either", "type": ["null", "int", "string"]},
            {"name": "num", "type": ["int", "long"]},
        ],
    }
    assert spark_type(avro_node(definition)) == StructType(
        [
            StructField("ok", BooleanType()),
            StructField("n", LongType()),
            StructField("d", DateType()),
            StructField("ts", TimestampType()),
            StructField("lts", TimestampNTZType()),
            StructField("dec", DecimalType(9, 2)),
            StructField("u", StringType()),
            StructField("t", IntegerType()),
            StructField("f", BinaryType()),
            StructField("either", StringType()),  # several non-null types: JSON text
            StructField("num", LongType()),
        ]
    )
    # Decoded values fit those types, through Arrow.
    values = TypedValues.merge({TOPIC: [version(0, definition)]})
    assert values is not None and not values.node.plain
    record = {
        "ok": True,
        "n": 1 << 40,
        "d": datetime.date(2024, 2, 29),
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.UTC),
        "lts": datetime.datetime(2024, 1, 2, 3, 4, 5, 7),
        "dec": decimal.Decimal("12.34"),
        "u": uuid.UUID(int=7),
        "t": datetime.time(1, 2, 3, 4000),
        "f": b"abcd",
        "either": "x",
        "num": 5,
    }
    (row,) = rows_of(values, entry([avro(definition, record)], 0))
    got = row["value"]
    assert got["d"] == record["d"] and got["ts"] == record["ts"] and got["lts"] == record["lts"]
    assert got["dec"] == record["dec"] and got["u"] == str(uuid.UUID(int=7)) and got["t"] == 3_723_004
    assert (got["ok"], got["n"], got["f"], got["either"], got["num"]) == (True, 1 << 40, b"abcd", '"x"', 5)


def test_arrow_types_are_the_ones_spark_expects() -> None:
    merged = TypedValues.merge({TOPIC: [version(0, V0), version(1, V1)]})
    assert merged is not None
    assert arrow_type(merged.node) == to_arrow_type(merged.spark_type(), timezone="UTC")


def test_recursive_record_is_refused_with_its_name() -> None:
    node = {"type": "record", "name": "Tree", "fields": [{"name": "kids", "type": {"type": "array", "items": "Tree"}}]}
    with pytest.raises(ValueError, match="recursive Avro type Tree"):
        avro_node(node)


# ------------------------------------------------------------------------------------ merge


def test_merge_is_a_union_by_name_in_first_seen_order_with_widening() -> None:
    values = TypedValues.merge({TOPIC: [version(0, V0), version(1, V1)]})
    assert values is not None
    merged = values.spark_type()
    assert isinstance(merged, StructType)
    assert merged.fieldNames() == [f["name"] for f in V0["fields"]] + ["note"]  # v0's order, then what v1 adds
    assert merged["qty"].dataType == LongType()  # int -> long
    assert merged["price"].dataType == DoubleType()  # float -> double
    assert merged["address"].dataType == StructType(
        [StructField("city", StringType()), StructField("zip", StringType())]
    )  # records merge recursively
    assert all(f.nullable for f in merged.fields)
    # The other way round (newest first) gives the same types, fields in that order.
    back = TypedValues.merge({TOPIC: [version(1, V1), version(0, V0)]})
    assert back is not None and back.spark_type() == merged


def test_merge_widens_inside_arrays_and_maps() -> None:
    a = Node("map", item=Node("array", item=Node("int")))
    b = Node("map", item=Node("array", item=Node("long")))
    assert merge_nodes(a, b, "m", "v0", "v1") == b


def test_irreconcilable_change_names_the_field_and_versions() -> None:
    v2 = json.loads(json.dumps(V0))
    v2["fields"][1]["type"] = ["null", "string"]  # qty: int -> string
    with pytest.raises(SchemaMergeError, match=r"field 'qty' is int in .*versions 0, 1 but string in .*version 2"):
        TypedValues.merge({TOPIC: [version(0, V0), version(1, V0), version(2, v2)]})
    nested = json.loads(json.dumps(V0))
    nested["fields"][7]["type"][1]["fields"][0]["type"] = "int"  # address.city: string -> int
    with pytest.raises(SchemaMergeError, match=r"field 'address\.city' is string in .*version 0 but int in"):
        TypedValues.merge({TOPIC: [version(0, V0), version(3, nested)]})
    with pytest.raises(SchemaMergeError, match=r"int -> ?long|int->long"):
        merge_nodes(Node("int"), Node("double"), "x", "a", "b")


def test_no_avro_defined_version_means_no_typed_columns() -> None:
    assert TypedValues.merge({TOPIC: []}) is None
    assert typed_schema(None) == SCHEMA and tuple(SCHEMA.fieldNames()) == COLUMNS
    values = TypedValues.merge({TOPIC: [version(0, V0)]})
    assert typed_schema(values).fieldNames() == [*COLUMNS, "schema_version", "value"]
    assert typed_schema(values)["schema_version"].dataType == IntegerType()


def test_live_versions_of_a_get_all_versions_response() -> None:
    doc = {
        "getSchemaResponses": [
            {"version": 1, "type": "AVRO", "timestamp": 2, "data": json.dumps(V1), "properties": {}},
            {"version": 0, "type": "AVRO", "timestamp": 1, "data": json.dumps(V0), "properties": {}},
        ]
    }
    assert [v.version for v in live_versions(doc)] == [0, 1]  # oldest first, whatever the order given
    doc["getSchemaResponses"].append({"version": 2, "type": "NONE", "data": "", "deleted": True})
    doc["getSchemaResponses"].append({"version": 3, "type": "JSON", "data": json.dumps(V1)})
    assert [(v.version, v.type) for v in live_versions(doc)] == [(3, SchemaType.JSON)]  # after the deletion
    assert live_versions({"getSchemaResponses": [{"version": 0, "type": "STRING", "data": ""}]}) == []
    # Deleted versions listed without their tombstone (it took the next number): a gap ends the live run.
    gap = {"getSchemaResponses": [{"version": n, "type": "AVRO", "data": json.dumps(V0)} for n in (0, 1, 3)]}
    assert [(v.version, v.live) for v in listed_versions(gap)] == [(0, False), (1, False), (3, True)]
    assert [v.version for v in live_versions(gap)] == [3]
    assert live_versions(None) == []
    assert schema_key("persistent://public/default/orders-partition-3") == TOPIC


# ------------------------------------------------------------------------------------ decoding


def test_each_message_is_decoded_with_its_writer_version() -> None:
    values = TypedValues.merge({TOPIC: [version(0, V0), version(1, V1)]})
    assert values is not None
    order1 = {**ORDER0, "id": "o-2", "qty": 1 << 40, "price": 0.1, "address": None, "note": "hi"}
    rows = rows_of(values, entry([avro(V0, ORDER0), None, avro(V0, {**ORDER0, "id": "o-3"})], 0))
    rows += rows_of(values, entry([avro(V1, order1)], 1, entry_id=1))
    rows += rows_of(values, entry([b"raw"], None, entry_id=2))  # written without a schema
    assert [r["schema_version"] for r in rows] == [0, 0, 0, 1, None]
    v0 = rows[0]["value"]
    assert v0 == {
        **ORDER0,
        "attrs": [("a", 1)],
        "address": {"city": "Oslo", "zip": None},
        "history": [{"city": "Rome", "zip": None}],  # v1's Address, referenced by name, has a zip
        "note": None,  # v0 has no note: null
    }
    assert rows[1]["value"] is None and rows[1]["payload"] is None  # a null-value message
    assert rows[2]["value"]["id"] == "o-3"
    v1 = rows[3]["value"]
    assert (v1["id"], v1["qty"], v1["price"], v1["address"], v1["note"]) == ("o-2", 1 << 40, 0.1, None, "hi")
    assert rows[4]["value"] is None and rows[4]["payload"] == b"raw"


def test_json_payloads_are_coerced_to_the_struct() -> None:
    values = TypedValues.merge({TOPIC: [version(0, V0, SchemaType.JSON), version(1, V1, SchemaType.JSON)]})
    assert values is not None
    good = {
        "id": "j-1",
        "qty": 3.0,  # a JSON number: an integral float is the long 3
        "price": 2,
        "tags": ["a", "b"],
        "attrs": {"x": 1},
        "status": "PAID",
        "blob": "AAE=",  # bytes travel as base64
        "address": {"city": "Paris", "unknown": 1},
        "history": [],
        "extra": "dropped",
    }
    bad = {"id": 5, "qty": "three", "tags": "not a list", "address": [1], "note": "n", "status": 1}
    rows = rows_of(values, entry([json.dumps(good).encode(), json.dumps(bad).encode()], 0))
    first, second = (r["value"] for r in rows)
    assert first["qty"] == 3 and first["price"] == 2.0 and first["blob"] == b"\x00\x01"
    assert first["address"] == {"city": "Paris", "zip": None} and first["note"] is None
    assert first["attrs"] == [("x", 1)] and first["tags"] == ["a", "b"] and first["status"] == "PAID"
    assert "extra" not in first
    # A value of the wrong kind is null, the rest of the message is kept; a number for a string
    # (an enum the Python client wrote by its value) is its JSON text.
    assert (second["qty"], second["tags"], second["address"], second["note"]) == (None, None, None, "n")
    assert (second["id"], second["status"]) == ("5", "1")


def test_unknown_version_encrypted_entry_and_bad_payload_give_null(caplog: pytest.LogCaptureFixture) -> None:
    values = TypedValues.merge({TOPIC: [version(0, V0)]})
    assert values is not None
    with caplog.at_level(logging.WARNING, logger="magnetar.jobs.value_schema"):
        rows = rows_of(values, entry([avro(V0, ORDER0)], 7))  # version 7 was deleted with force
    assert rows[0]["schema_version"] == 7 and rows[0]["value"] is None
    assert "schema version 7 is not among the registry's versions [0]" in caplog.text
    encrypted = entry([avro(V0, ORDER0)], 0, ek=[["k", b"wrapped", {}]], ep=b"nonce", ea="AES-256-GCM")
    (row,) = rows_of(values, encrypted)
    assert row["schema_version"] == 0 and row["value"] is None and row["batch_index"] == -1
    with caplog.at_level(logging.WARNING, logger="magnetar.jobs.value_schema"):
        rows = rows_of(values, entry([b"\xff", avro(V0, ORDER0)], 0))
    assert rows[0]["value"] is None and rows[1]["value"]["id"] == "o-1"  # one bad message, not the batch
    assert "does not decode" in caplog.text


def test_a_topic_without_schema_in_a_typed_read_has_null_values() -> None:
    values = TypedValues.merge({TOPIC: [version(0, V0)], "persistent://public/default/raw": []})
    assert values is not None
    rows = rows_of(values, entry([b"x"], None), topic="persistent://public/default/raw")
    assert rows[0]["value"] is None and rows[0]["payload"] == b"x"
    batch = values.for_topic(TOPIC)
    assert batch.decode(0, [avro(V0, ORDER0)])[0]["id"] == "o-1"
    assert pa.types.is_struct(values.arrow_type())


def test_entry_meta_keeps_the_version_key() -> None:
    meta: EntryMeta = {"crc": 0, "sv": 3}
    assert meta["sv"] == 3


def test_a_deleted_version_is_decoded_into_the_merge_of_the_live_ones() -> None:
    old = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}, {"name": "qty", "type": "int"}]}
    deleted = SchemaVersion(0, SchemaType.AVRO, json.dumps(old), live=False)
    values = TypedValues.merge({TOPIC: [deleted, version(1, V0)]})  # id was an int before the deletion
    assert values is not None and values.spark_type() == spark_type(avro_node(V0))
    (row,) = rows_of(values, entry([avro(old, {"id": 9, "qty": 4})], 0))
    assert row["value"]["qty"] == 4 and row["value"]["id"] == "9" and row["value"]["tags"] is None


def test_the_export_job_takes_no_decode_schema_from_its_command_line() -> None:
    """``magnetar-jobs export --no-decode-schema`` (and a SparkApplication's arguments) reach
    ``export(decode_schema=False)``; without it a schema'd topic gets its typed columns."""
    from magnetar.jobs.main import build_parser

    base = ["export", "--admin-url", "http://127.0.0.1:8080", "--topic", "orders", "--target", "/tmp/out"]
    assert build_parser("magnetar-jobs").parse_args(base).decode_schema is True
    assert build_parser("magnetar-jobs").parse_args([*base, "--no-decode-schema"]).decode_schema is False
