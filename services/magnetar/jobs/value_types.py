"""The type of a topic's ``value`` column: Avro schemas as one tree of Spark/Arrow types, merged.

``avro_node`` turns a writer definition into a ``Node``; ``merge_nodes`` merges the nodes of the
versions as Parquet schema merging does (jobs/value_schema.py says which changes merge and why);
``spark_type`` and ``arrow_type`` name the result in Spark SQL and in Arrow. A ``Node`` is plain
data because it travels to the executors with the reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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

_AVRO_PRIMITIVES = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "binary",
}


class SchemaMergeError(ValueError):
    """Two schema versions give one field types that no Parquet merge reconciles."""


@dataclass(frozen=True)
class Node:
    """One Spark/Arrow type of the merged value (plain data: it is pickled to the executors).

    ``kind``: boolean, int, long, float, double, string, binary, date, timestamp, timestamp_ntz,
    decimal, struct, array, map, or json (a multi-type union, kept as JSON text). ``unit`` is
    "millis"/"micros" for timestamps and times (how a JSON number is read), "uuid" or "time" for
    values fastavro returns as objects Arrow cannot take as such.
    """

    kind: str
    fields: tuple[tuple[str, Node], ...] = ()
    item: Node | None = None
    precision: int = 0
    scale: int = 0
    unit: str = ""

    @property
    def plain(self) -> bool:
        """Whether a value fastavro decoded for this type goes to Arrow unchanged."""
        if self.kind == "json" or self.unit in ("uuid", "time"):
            return False
        if self.item is not None and not self.item.plain:
            return False
        return all(child.plain for _, child in self.fields)

    def describe(self) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.kind == "array" and self.item is not None:
            return f"array<{self.item.describe()}>"
        if self.kind == "map" and self.item is not None:
            return f"map<string,{self.item.describe()}>"
        return self.kind


# ------------------------------------------------------------------------------------ Avro -> Node


def avro_node(definition: Any) -> Node:
    """The type of an Avro schema (a parsed definition: dict, list or type name)."""
    return _AvroWalk().node(definition, "")


class _AvroWalk:
    """Walks one definition, remembering its named types (records, enums, fixed) by full name."""

    def __init__(self) -> None:
        self.named: dict[str, Node] = {}
        self.open: set[str] = set()  # records being walked: a reference to one is recursion

    def _full(self, name: str, namespace: str) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def _ref(self, name: str, namespace: str) -> Node:
        for full in (self._full(name, namespace), name):
            if full in self.open:
                raise ValueError(f"recursive Avro type {full} has no Spark counterpart")
            if full in self.named:
                return self.named[full]
        raise ValueError(f"unknown Avro type {name!r}")

    def node(self, schema: Any, namespace: str) -> Node:
        if isinstance(schema, str):
            if schema in _AVRO_PRIMITIVES:
                return Node(_AVRO_PRIMITIVES[schema])
            if schema == "null":
                return Node("string")  # a value that is always null; any nullable type will do
            return self._ref(schema, namespace)
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null" and not (isinstance(b, dict) and b.get("type") == "null")]
            if len(branches) == 1:
                return self.node(branches[0], namespace)
            if not branches:
                return Node("string")
            try:  # [int, long] and [float, double] unions merge like versions do
                merged = self.node(branches[0], namespace)
                for b in branches[1:]:
                    merged = merge_nodes(merged, self.node(b, namespace), "", "", "")
                if merged.kind not in ("struct",):
                    return merged
            except SchemaMergeError:
                pass
            return Node("json")
        if not isinstance(schema, dict):
            raise ValueError(f"not an Avro schema: {schema!r}")
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if kind in ("record", "error"):
            ns = str(schema.get("namespace", namespace) or "")
            name = str(schema.get("name", ""))
            full = self._full(name, ns) if name else ""
            if "." in name:
                ns = name.rsplit(".", 1)[0]
            self.open.add(full)
            children = tuple((str(f["name"]), self.node(f["type"], ns)) for f in schema.get("fields", []))
            self.open.discard(full)
            node = Node("struct", fields=children)
            if full:
                self.named[full] = node
            return node
        if kind == "enum":
            node = Node("string")
            self._name(schema, namespace, node)
            return node
        if kind == "fixed":
            node = _logical(logical, schema, Node("binary"))
            self._name(schema, namespace, node)
            return node
        if kind == "array":
            return Node("array", item=self.node(schema.get("items"), namespace))
        if kind == "map":
            return Node("map", item=self.node(schema.get("values"), namespace))
        if isinstance(kind, (dict, list)):
            return self.node(kind, namespace)
        if isinstance(kind, str):
            return _logical(logical, schema, self.node(kind, namespace))
        raise ValueError(f"not an Avro schema: {schema!r}")

    def _name(self, schema: Mapping[str, Any], namespace: str, node: Node) -> None:
        name = str(schema.get("name", ""))
        if name:
            self.named[self._full(name, str(schema.get("namespace", namespace) or ""))] = node


def _logical(logical: Any, schema: Mapping[str, Any], base: Node) -> Node:
    """The Spark type of an Avro logical type over ``base`` (``base`` itself when unknown, as Avro says)."""
    if logical == "date" and base.kind == "int":
        return Node("date")
    if logical in ("timestamp-millis", "timestamp-micros") and base.kind == "long":
        return Node("timestamp", unit=logical.split("-")[1])
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and base.kind == "long":
        return Node("timestamp_ntz", unit=logical.split("-")[2])
    if logical == "decimal" and base.kind == "binary":
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0) or 0)
        if 0 < precision <= 38:
            return Node("decimal", precision=precision, scale=scale)
    if logical == "uuid" and base.kind == "string":
        return Node("string", unit="uuid")
    if logical in ("time-millis", "time-micros") and base.kind in ("int", "long"):
        return Node(base.kind, unit="time")
    return base


# ------------------------------------------------------------------------------------ the merge

_WIDER = {frozenset({"int", "long"}): "long", frozenset({"float", "double"}): "double"}


def merge_nodes(old: Node, new: Node, path: str, old_label: str, new_label: str) -> Node:
    """``old`` and ``new`` as one type (Parquet's merge, see the module docstring)."""
    if old.kind == new.kind == "struct":
        fields = dict(old.fields)
        order = [name for name, _ in old.fields]
        for name, child in new.fields:
            if name in fields:
                fields[name] = merge_nodes(
                    fields[name], child, f"{path}.{name}" if path else name, old_label, new_label
                )
            else:
                fields[name] = child
                order.append(name)
        return Node("struct", fields=tuple((n, fields[n]) for n in order))
    if old.kind == new.kind and old.kind in ("array", "map"):
        assert old.item is not None and new.item is not None
        sub = f"{path}.element" if old.kind == "array" else f"{path}.value"
        return Node(old.kind, item=merge_nodes(old.item, new.item, sub, old_label, new_label))
    if old.kind == new.kind and (old.precision, old.scale) == (new.precision, new.scale):
        # Same type; a uuid or time unit on either side keeps its values converted.
        return old if old.unit == new.unit or not new.unit else new
    wider = _WIDER.get(frozenset({old.kind, new.kind}))
    if wider is not None:
        return Node(wider, unit=old.unit or new.unit)
    where = f"field '{path}'" if path else "the value"
    raise SchemaMergeError(
        f"{where} is {old.describe()} in {old_label} but {new.describe()} in {new_label}: the types cannot be merged "
        "(only int->long and float->double widen); read the topics apart or with .option('decodeSchema', 'false')"
    )


# ------------------------------------------------------------------------------------ Node -> types


def spark_type(node: Node) -> DataType:
    """The Spark SQL type of ``node`` (every struct field, array element and map value nullable)."""
    simple: dict[str, DataType] = {
        "boolean": BooleanType(),
        "int": IntegerType(),
        "long": LongType(),
        "float": FloatType(),
        "double": DoubleType(),
        "string": StringType(),
        "json": StringType(),
        "binary": BinaryType(),
        "date": DateType(),
        "timestamp": TimestampType(),
        "timestamp_ntz": TimestampNTZType(),
    }
    if node.kind in simple:
        return simple[node.kind]
    if node.kind == "decimal":
        return DecimalType(node.precision, node.scale)
    if node.kind == "struct":
        return StructType([StructField(name, spark_type(child), True) for name, child in node.fields])
    assert node.item is not None
    if node.kind == "array":
        return ArrayType(spark_type(node.item), True)
    return MapType(StringType(), spark_type(node.item), True)


def arrow_type(node: Node) -> Any:
    """The Arrow type Spark expects for ``spark_type(node)`` (timestamps in microseconds, UTC)."""
    simple = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "json": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "timestamp_ntz": pa.timestamp("us"),
    }
    if node.kind in simple:
        return simple[node.kind]
    if node.kind == "decimal":
        return pa.decimal128(node.precision, node.scale)
    if node.kind == "struct":
        return pa.struct([pa.field(name, arrow_type(child), True) for name, child in node.fields])
    assert node.item is not None
    if node.kind == "array":
        return pa.list_(pa.field("element", arrow_type(node.item), True))
    return pa.map_(pa.string(), arrow_type(node.item))
