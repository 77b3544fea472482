"""``Record.schema()`` gives the Avro dict pulsar-client's ``pulsar.schema`` gives for the same class.

Every expected dict below was written by hand from reading pulsar-client-python's
``pulsar/schema/definition.py`` (``Record.schema_info``, ``CustomEnum.schema_info``,
``Array.schema_info``, ``Map.schema_info``), not produced by running Magnetar: a field is
``["null", T]`` unless ``required``; ``default`` appears only with ``required_default=True`` and then
comes between ``name`` and ``type``; enums are defaulted by member name; a record or enum already
defined earlier in the same schema is referred to by its (namespace-qualified, for records) name;
``_sorted_fields`` sorts the fields; only a class's own declared fields count. Key order matters
too: the registry stores ``json.dumps(schema, indent=True)`` and Pulsar compares that text.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import fastavro
import pytest

from magnetar.schema import (
    Array,
    AvroSchema,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Float,
    Integer,
    JsonSchema,
    Long,
    Map,
    Null,
    Record,
    String,
)
from magnetar.schema.info import SchemaType


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    BLUE = 3


class Primitives(Record):
    b = Boolean()
    i = Integer()
    lo = Long()
    f = Float()
    d = Double()
    by = Bytes()
    s = String()


PRIMITIVES = {
    "type": "record",
    "name": "Primitives",
    "fields": [
        {"name": "b", "type": ["null", "boolean"]},
        {"name": "i", "type": ["null", "int"]},
        {"name": "lo", "type": ["null", "long"]},
        {"name": "f", "type": ["null", "float"]},
        {"name": "d", "type": ["null", "double"]},
        {"name": "by", "type": ["null", "bytes"]},
        {"name": "s", "type": ["null", "string"]},
    ],
}


class Requirements(Record):
    id = String(required=True)
    qty = Integer(default=5, required_default=True)
    flag = Boolean(required_default=True)
    note = String(default="x", required=True, required_default=True)
    empty = Null(required=True)


REQUIREMENTS = {
    "type": "record",
    "name": "Requirements",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "qty", "default": 5, "type": ["null", "int"]},
        # Boolean's default() is False when none is given.
        {"name": "flag", "default": False, "type": ["null", "boolean"]},
        {"name": "note", "default": "x", "type": "string"},
        {"name": "empty", "type": "null"},
    ],
}


class Enums(Record):
    color = Color  # an Enum class as a field: CustomEnum(Color)
    second = CustomEnum(Color, default=Color.GREEN, required=True, required_default=True)


ENUMS = {
    "type": "record",
    "name": "Enums",
    "fields": [
        {"name": "color", "type": ["null", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}]},
        # Second use of Color: by name; the default by member name.
        {"name": "second", "default": "GREEN", "type": "Color"},
    ],
}


class Point(Record):
    x = Double(required=True)
    y = Double(required=True)


class Nested(Record):
    start = Point()
    end = Point(required=True)
    origin = Point  # a Record class as a field: Point()


NESTED = {
    "type": "record",
    "name": "Nested",
    "fields": [
        {
            "name": "start",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Point",
                    "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "double"}],
                },
            ],
        },
        {"name": "end", "type": "Point"},
        {"name": "origin", "type": ["null", "Point"]},
    ],
}


class Collections(Record):
    tags = Array(String())
    counts = Map(Long(), required=True)
    points = Array(Point())
    by_name = Map(Point())
    matrix = Array(Array(Integer()))


COLLECTIONS = {
    "type": "record",
    "name": "Collections",
    "fields": [
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {
            "name": "points",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Point",
                        "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "double"}],
                    },
                },
            ],
        },
        {"name": "by_name", "type": ["null", {"type": "map", "values": "Point"}]},
        {"name": "matrix", "type": ["null", {"type": "array", "items": {"type": "array", "items": "int"}}]},
    ],
}


class Address(Record):
    _avro_namespace = "com.example.geo"
    street = String()


class Customer(Record):
    _avro_namespace = "com.example"
    home = Address()
    work = Address()


CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "com.example",
    "fields": [
        {
            "name": "home",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "namespace": "com.example.geo",
                    "fields": [{"name": "street", "type": ["null", "string"]}],
                },
            ],
        },
        # Reused by its namespace-qualified name.
        {"name": "work", "type": ["null", "com.example.geo.Address"]},
    ],
}


class Sorted(Record):
    _sorted_fields = True
    zeta = Integer()
    alpha = String()
    mid = Long(required=True)


SORTED = {
    "type": "record",
    "name": "Sorted",
    "fields": [
        {"name": "alpha", "type": ["null", "string"]},
        {"name": "mid", "type": "long"},
        {"name": "zeta", "type": ["null", "int"]},
    ],
}


class Base(Record):
    a = Integer()


class Derived(Base):
    b = String()


# Only the class's own declarations count (Pulsar's RecordMeta reads the class body only).
DERIVED = {"type": "record", "name": "Derived", "fields": [{"name": "b", "type": ["null", "string"]}]}


SHAPES: list[tuple[type[Record], dict[str, Any]]] = [
    (Primitives, PRIMITIVES),
    (Requirements, REQUIREMENTS),
    (Enums, ENUMS),
    (Nested, NESTED),
    (Collections, COLLECTIONS),
    (Customer, CUSTOMER),
    (Sorted, SORTED),
    (Derived, DERIVED),
]
IDS = [cls.__name__ for cls, _ in SHAPES]


@pytest.mark.parametrize(("cls", "expected"), SHAPES, ids=IDS)
def test_schema_is_pulsars(cls: type[Record], expected: dict[str, Any]) -> None:
    # The text comparison also checks key order, which the registry's stored text depends on.
    assert cls.schema() == expected
    assert json.dumps(cls.schema(), indent=True) == json.dumps(expected, indent=True)


@pytest.mark.parametrize(("cls", "expected"), SHAPES, ids=IDS)
def test_fastavro_accepts_every_definition(cls: type[Record], expected: dict[str, Any]) -> None:
    parsed = fastavro.parse_schema(cls.schema())
    assert parsed["type"] == "record"


@pytest.mark.parametrize(("cls", "expected"), SHAPES, ids=IDS)
def test_schema_info_text_is_pulsars(cls: type[Record], expected: dict[str, Any]) -> None:
    for schema, stype, name in ((AvroSchema(cls), SchemaType.AVRO, "AVRO"), (JsonSchema(cls), SchemaType.JSON, "JSON")):
        info = schema.schema_info()
        assert (info.type, info.name, dict(info.properties)) == (stype, name, {})
        assert info.schema == json.dumps(expected, indent=True)
        assert info.definition() == expected


def test_array_of_enums_is_a_usable_schema() -> None:
    """The one deliberate difference: pulsar-client writes ``"items": "enum"`` (not Avro);
    Magnetar writes the enum's definition, so the schema can encode at all."""

    class Palette(Record):
        colors = Array(Color)

    assert Palette.schema()["fields"][0]["type"] == [
        "null",
        {"type": "array", "items": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
    ]
    schema = AvroSchema(Palette)
    assert schema.decode(schema.encode(Palette(colors=[Color.BLUE, Color.RED]))).colors == [Color.BLUE, Color.RED]


def test_field_schema_methods() -> None:
    assert String().schema() == "string"
    assert CustomEnum(Color).schema() == {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
    assert Array(Integer()).schema() == {"type": "array", "items": "int"}
    assert Map(Point()).schema()["values"]["name"] == "Point"


# ------------------------------------------------------------------------------ record behaviour


def test_defaults_of_a_new_record() -> None:
    r = Requirements()
    assert (r.id, r.qty, r.flag, r.note) == (None, 5, False, "x")
    p = Primitives()
    assert (p.b, p.i, p.s) == (False, None, None)
    n = Nested()
    assert isinstance(n.start, Point) and n.start.x is None  # an unset sub-record is an empty one, as Pulsar's
    assert n.start is not Nested().start  # ... but not shared between instances


def test_field_types_are_validated() -> None:
    p = Primitives(i=3, f=2, s=b"bytes", by="text")
    assert (p.i, p.f, p.s, p.by) == (3, 2, "bytes", b"text")  # Pulsar's coercions
    with pytest.raises(TypeError):
        Primitives(i="3")
    with pytest.raises(TypeError):
        p.d = "1.5"
    with pytest.raises(AttributeError, match="undeclared field"):
        p.nope = 1
    with pytest.raises(TypeError):
        Collections(tags=["a", 1])
    with pytest.raises(TypeError):
        Collections(counts={"a": "b"})
    with pytest.raises(TypeError):
        Nested(start=Address())


def test_enum_fields_take_members_names_and_values() -> None:
    assert Enums(color="BLUE").color is Color.BLUE
    assert Enums(color=2).color is Color.GREEN
    assert Enums().second is Color.GREEN
    with pytest.raises(TypeError):
        Enums(color="PURPLE")


def test_nested_records_from_dicts() -> None:
    c = Collections(points=[{"x": 1.0, "y": 2.0}], by_name={"a": {"x": 3.0, "y": 4.0}})
    assert c.points == [Point(x=1.0, y=2.0)]
    assert c.by_name == {"a": Point(x=3.0, y=4.0)}
    n = Nested(end={"x": 0.5, "y": 0.25})
    assert n.end == Point(x=0.5, y=0.25)
    assert n != Nested(end={"x": 0.5, "y": 0.0})
