"""Typed columns in Spark for topics with a schema, end to end: records sent with ``AvroSchema`` and
``JsonSchema`` by the real client to a real ``magnetar standalone``, read with the ``magnetar``
data source (local Spark) and exported to Parquet, then read back with Spark.

Shown here: the ``value`` column is a struct with the records' fields and Spark types (nested
record -> struct, array, map, enum -> string); a second schema version that adds an optional
field gives the merged struct, where the rows written with the first version have null for it;
``schema_version`` is the version each row was written with; ``decodeSchema=false`` and a topic
without a schema keep the raw columns only; an export made of one run before and one run after
the second version is read back by ``spark.read.option("mergeSchema", "true").parquet`` with the
same struct and values as the data source gives.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.jobs.export import export
from magnetar.jobs.source import SCHEMA
from magnetar.schema import Array, AvroSchema, CustomEnum, Integer, JsonSchema, Long, Map, Record, String

pytestmark = pytest.mark.spark


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Address(Record):
    city = String()


def order_v1() -> Any:
    class Order(Record):
        id = String(required=True)
        qty = Integer()
        tags = Array(String())
        attrs = Map(Long())
        color = CustomEnum(Color)
        address = Address()

    return Order


def order_v2() -> Any:
    """Version 2: one more field, optional with a default (FULL-compatible with version 1)."""

    class Order(Record):
        id = String(required=True)
        qty = Integer()
        tags = Array(String())
        attrs = Map(Long())
        color = CustomEnum(Color)
        address = Address()
        note = String(required_default=True)

    return Order


OrderV1, OrderV2 = order_v1(), order_v2()

V1_FIELDS = [
    StructField("id", StringType()),
    StructField("qty", IntegerType()),
    StructField("tags", ArrayType(StringType())),
    StructField("attrs", MapType(StringType(), LongType())),
    StructField("color", StringType()),
    StructField("address", StructType([StructField("city", StringType())])),
]
MERGED = StructType([*V1_FIELDS, StructField("note", StringType())])


def send(sa: StandaloneProcess, topic: str, schema: Any, records: list[Any]) -> None:
    client = magnetar.Client(sa.service_url)
    try:
        producer = client.create_producer(topic, schema=schema)
        for r in records:
            producer.send(r)
        producer.close()
    finally:
        client.close()


def load(spark: Any, sa: StandaloneProcess, topic: str, **options: str) -> Any:
    reader = spark.read.format("magnetar").option("adminUrl", sa.admin_url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def typed_rows(df: Any) -> dict[str, tuple[int | None, dict[str, Any]]]:
    """``{value.id: (schema_version, value as a dict)}``."""
    out = {}
    for r in df.select("schema_version", "value").collect():
        out[r.value.id] = (r.schema_version, r.value.asDict(recursive=True))
    return out


def v1_order(i: int) -> Any:
    return OrderV1(
        id=f"a-{i}", qty=i, tags=[f"t{i}", "x"], attrs={"k": i * 10}, color=Color.BLUE, address=Address(city=f"c{i}")
    )


def test_avro_versions_as_a_merged_struct_in_the_source_and_the_export(
    spark: Any, standalone: StandaloneProcess, tmp_path: Path
) -> None:
    sa = standalone
    topic = "persistent://public/default/spark-schema-avro"
    target = f"file://{tmp_path}/export"
    send(sa, topic, AvroSchema(OrderV1), [v1_order(i) for i in range(3)])

    # The first export run sees version 1 only: its struct has no `note`.
    assert export(spark, sa.admin_url, target=target, name="typed", topic=topic).rows == 3
    assert load(spark, sa, topic).schema["value"].dataType == StructType(V1_FIELDS)

    send(
        sa,
        topic,
        AvroSchema(OrderV2),
        [
            OrderV2(id="b-0", qty=7, tags=[], attrs={}, color=Color.RED, address=None, note="gift"),
            OrderV2(id="b-1", qty=None, tags=["y"], attrs={"z": -1}, color=None, address=Address(city="Oslo")),
        ],
    )
    df = load(spark, sa, topic)
    assert df.schema.fieldNames() == [*SCHEMA.fieldNames(), "schema_version", "value"]
    assert df.schema["schema_version"].dataType == IntegerType()
    assert df.schema["value"].dataType == MERGED
    rows = typed_rows(df)
    assert rows == {
        **{
            f"a-{i}": (
                0,
                {
                    "id": f"a-{i}",
                    "qty": i,
                    "tags": [f"t{i}", "x"],
                    "attrs": {"k": i * 10},
                    "color": "BLUE",
                    "address": {"city": f"c{i}"},
                    "note": None,  # written with version 0, which has no note
                },
            )
            for i in range(3)
        },
        "b-0": (
            1,
            {
                "id": "b-0",
                "qty": 7,
                "tags": [],
                "attrs": {},
                "color": "RED",
                "address": None,
                "note": "gift",
            },
        ),
        "b-1": (
            1,
            {
                "id": "b-1",
                "qty": None,
                "tags": ["y"],
                "attrs": {"z": -1},
                "color": None,
                "address": {"city": "Oslo"},
                "note": None,
            },
        ),
    }
    # The raw payload is still there, the bytes the producer sent.
    payload = df.where("value.id = 'b-0'").select("payload").first().payload
    assert AvroSchema(OrderV2).decode(bytes(payload)).note == "gift"
    # Switched off: the raw columns only.
    assert load(spark, sa, topic, decodeSchema="false").schema == SCHEMA

    # The second run exports version 2's rows with the merged struct; Spark merges the two runs'
    # files (one struct without `note`, one with) into the data source's struct.
    assert export(spark, sa.admin_url, target=target, name="typed", topic=topic).rows == 2
    back = spark.read.option("mergeSchema", "true").parquet(target)
    assert back.schema["value"].dataType == MERGED
    assert back.schema["schema_version"].dataType == IntegerType()
    assert typed_rows(back) == rows


def test_json_records_as_a_struct(spark: Any, standalone: StandaloneProcess, tmp_path: Path) -> None:
    sa = standalone
    topic = "persistent://public/default/spark-schema-json"
    send(
        sa,
        topic,
        JsonSchema(OrderV1),
        [
            OrderV1(id="j-0", qty=3, tags=["a"], attrs={"m": 2}, color=Color.RED, address=Address(city="Rome")),
            OrderV1(id="j-1", qty=None, tags=None, attrs=None, color=None, address=None),
        ],
    )
    expected = {
        "j-0": (
            0,
            {
                "id": "j-0",
                "qty": 3,
                "tags": ["a"],
                "attrs": {"m": 2},
                "color": "1",  # the Python client writes an enum by its value in JSON
                "address": {"city": "Rome"},
            },
        ),
        "j-1": (0, {"id": "j-1", "qty": None, "tags": None, "attrs": None, "color": None, "address": None}),
    }
    df = load(spark, sa, topic)
    assert df.schema["value"].dataType == StructType(V1_FIELDS)  # JSON schemas: their Avro definition
    assert typed_rows(df) == expected

    target = f"file://{tmp_path}/export"
    assert export(spark, sa.admin_url, target=target, name="json", topic=topic).rows == 2
    back = spark.read.option("mergeSchema", "true").parquet(target)
    assert back.schema["value"].dataType == StructType(V1_FIELDS)
    assert typed_rows(back) == expected


def test_a_topic_without_schema_keeps_the_raw_columns(spark: Any, standalone: StandaloneProcess) -> None:
    topic = "persistent://public/default/spark-schema-none"
    client = magnetar.Client(standalone.service_url)
    try:
        producer = client.create_producer(topic)
        producer.send(b"raw")
        producer.close()
    finally:
        client.close()
    df = load(spark, standalone, topic)
    assert df.schema == SCHEMA  # the registry answers 404: plain bytes, as before
    assert [bytes(r.payload) for r in df.collect()] == [b"raw"]
