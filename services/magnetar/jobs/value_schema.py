"""A topic's schema versions as one typed ``value`` column, and each message decoded into it.

A topic with an AVRO or JSON schema (both are defined by an Avro schema, WIRE.md R118) gets two
columns next to the raw ones: ``schema_version`` (the writer version its entry carries in meta
``sv``, WIRE.md R122) and ``value``, the message decoded with that writer version. One Spark
column has one type, but the versions differ, so the type is the *merge* of every live version,
the rule Parquet schema merging follows (Spark's ``mergeSchema``), so that the data source and a
``spark.read.option("mergeSchema", "true").parquet(export)`` see the same shape:

- records merge field by field, by name, in first-seen order (the oldest version's fields, then
  the fields each later version adds); every field is nullable, and a row of a version that lacks
  a field has null there;
- ``int`` and ``long`` merge to ``long``, ``float`` and ``double`` to ``double``; arrays merge
  their items, maps their values, records recursively;
- any other change of type cannot be merged: ``SchemaMergeError`` names the field and versions.

Avro -> Spark: boolean, int, long, float, double, string, bytes (binary), nested records
(structs), arrays, maps (string keys), enums (strings), fixed (binary), ``[null, T]`` unions
(a nullable T), logical types date, timestamp-millis/-micros (timestamps), local-timestamp-*
(timestamps without zone), decimal, uuid (string), time-millis/-micros (int/long: ms / us of the
day). A union of several non-null types has no Spark counterpart that survives a merge: it
becomes a string holding the value as JSON.

Decoding: an Avro payload is read with its writer's definition (``fastavro``, parsed once per
definition and worker process); a JSON payload is parsed with ``json``. Either is then fitted to
the merged type (``conform``): fields the merge lacks are dropped, missing ones are null, and a
JSON value of the wrong kind becomes null (a number for a string field becomes its JSON text,
as an enum the Python client wrote by its value) rather than failing the whole read. Entries of
a version deleted since (listed by the registry, but before a deletion) are decoded with it and
fitted to the merge of the live versions the same way; a version the registry no longer lists
(deleted with force) leaves the value null and says so in the log. Only values that
cannot be handed to Arrow as decoded are walked: an Avro record without uuid/time/multi-type
unions goes to Arrow as fastavro returned it (Arrow ignores extra keys and nulls missing ones).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import io
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import fastavro
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

from magnetar.jobs.admin_client import AdminClient
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import AVRO_DEFINED, SchemaType

log = logging.getLogger(__name__)

SCHEMA_VERSION_COLUMN = "schema_version"
VALUE_COLUMN = "value"
# Admin calls made at once when many topics are read (a namespace).
FETCH_CONCURRENCY = 8

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


# ------------------------------------------------------------------------------------ conform

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = datetime.date(1970, 1, 1)


def conform(value: Any, node: Node) -> Any:
    """``value`` (decoded by fastavro or ``json``) as a value Arrow takes for ``arrow_type(node)``;
    None for a value of another kind (a JSON payload that does not follow its schema)."""
    if value is None:
        return None
    kind = node.kind
    if kind == "struct":
        if not isinstance(value, Mapping):
            return None
        return {name: conform(value.get(name), child) for name, child in node.fields}
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            return None
        assert node.item is not None
        return [conform(x, node.item) for x in value]
    if kind == "map":
        if not isinstance(value, Mapping):
            return None
        assert node.item is not None
        return {str(k): conform(v, node.item) for k, v in value.items()}
    return _conform_scalar(value, node)


def _conform_scalar(value: Any, node: Node) -> Any:  # one case per type
    kind = node.kind
    if kind == "json":
        return json.dumps(value, default=_json_default, sort_keys=True)
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind in ("int", "long"):
        if isinstance(value, datetime.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            return micros // 1000 if kind == "int" else micros
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            return None
        limit = 1 << (31 if kind == "int" else 63)
        return value if -limit <= value < limit else None
    if kind in ("float", "double"):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)):  # a JSON enum written by its value, a number for a string
            return json.dumps(value)
        return str(value) if node.unit == "uuid" and not isinstance(value, (dict, list, bytes)) else None
    if kind == "binary":
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str):  # JSON carries bytes as base64 (Jackson's and the Python client's way)
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return None
        return None
    if kind == "date":
        if isinstance(value, datetime.date):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return _EPOCH_DAY + datetime.timedelta(days=value)
        return None
    if kind in ("timestamp", "timestamp_ntz"):
        if isinstance(value, datetime.datetime):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            micros = int(value) * (1000 if node.unit == "millis" else 1)
            stamp = _EPOCH + datetime.timedelta(microseconds=micros)
            return stamp if kind == "timestamp" else stamp.replace(tzinfo=None)
        return None
    if kind == "decimal":
        try:
            if isinstance(value, (int, float, str, decimal.Decimal)) and not isinstance(value, bool):
                return decimal.Decimal(str(value)).quantize(decimal.Decimal(1).scaleb(-node.scale))
        except decimal.InvalidOperation:
            return None
        return None
    return None


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    return str(value)


# ------------------------------------------------------------------------------------ versions


@dataclass(frozen=True)
class SchemaVersion:
    """One registry version of a topic's schema, as ``GET .../schemas`` lists it."""

    version: int
    type: SchemaType
    definition: str
    live: bool = True  # False: listed, but a deletion came after it


def listed_versions(response: Any) -> list[SchemaVersion]:
    """The AVRO/JSON versions of a ``GetAllVersionsSchemaResponse`` (``{getSchemaResponses: [...]}``),
    oldest first, each marked live or not. A deletion ends the live run before it: an entry marked
    ``deleted`` or with neither type nor definition, or a missing number (a deletion's tombstone
    takes the next version number, WIRE.md R123, and the list leaves tombstones out). Other types
    (STRING, PROTOBUF_NATIVE...) have no Avro definition and are left out."""
    out: list[SchemaVersion] = []
    items = response.get("getSchemaResponses", []) if isinstance(response, Mapping) else []
    previous: int | None = None
    for item in sorted(items, key=lambda x: int(x.get("version", 0))):
        number = int(item.get("version", 0))
        data = item.get("data") or item.get("schema") or ""
        try:
            stype = SchemaType.parse(item.get("type", "NONE"))
        except ValueError:
            stype = SchemaType.NONE
        tombstone = bool(item.get("deleted")) or (not data and stype in (SchemaType.NONE, *AVRO_DEFINED))
        if tombstone or (previous is not None and number > previous + 1):
            out = [SchemaVersion(v.version, v.type, v.definition, live=False) for v in out]
        previous = number
        if stype in AVRO_DEFINED and not tombstone:
            out.append(SchemaVersion(number, stype, str(data)))
    return out


def live_versions(response: Any) -> list[SchemaVersion]:
    """The live AVRO/JSON versions (``listed_versions`` after the last deletion), oldest first."""
    return [v for v in listed_versions(response) if v.live]


def schema_key(topic: str) -> str:
    """The registry key of a (partition) topic: its base topic (partitions share one schema)."""
    return str(TopicName.parse(topic).partitioned_base)


@lru_cache(maxsize=256)
def _parsed(definition: str) -> Any:
    """A writer definition parsed by fastavro, once per worker process."""
    return fastavro.parse_schema(json.loads(definition))


@lru_cache(maxsize=256)
def _version_node(definition: str) -> Node:
    return avro_node(json.loads(definition))


@dataclass(frozen=True)
class TypedValues:
    """The ``value`` column of one read: the merged type and every topic's live versions.

    Plain data (definitions as text), pickled to the executors with the reader.
    """

    node: Node
    versions: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)

    @classmethod
    def merge(cls, per_topic: Mapping[str, Sequence[SchemaVersion]]) -> TypedValues | None:
        """The merge of every live version of every topic (topics in the given order, versions
        oldest first); None when no topic has a live AVRO/JSON schema. Versions listed but not live
        (deleted) are kept to decode the entries that still carry them, into the same merge."""
        node: Node | None = None
        seen: list[str] = []
        for topic, versions in per_topic.items():
            for v in versions:
                if not v.live:
                    continue
                label = f"{topic} version {v.version}"
                try:
                    this = _version_node(v.definition)
                except (ValueError, TypeError, KeyError) as exc:
                    raise SchemaMergeError(f"{label}: unusable {v.type.name} definition: {exc}") from None
                if node is None:
                    node = this
                else:
                    node = merge_nodes(node, this, "", _versions_label(seen), label)
                seen.append(label)
        if node is None:
            return None
        return cls(node, {t: {v.version: v for v in vs} for t, vs in per_topic.items() if vs})

    def spark_type(self) -> DataType:
        return spark_type(self.node)

    def arrow_type(self) -> Any:
        return arrow_type(self.node)

    def for_topic(self, topic: str) -> ValueDecoder:
        """The decoder of one (partition) topic's entries."""
        key = schema_key(topic)
        return ValueDecoder(key, self.node, self.versions.get(key, {}))


def _versions_label(seen: list[str]) -> str:
    if len(seen) == 1:
        return seen[0]
    topics = {s.rsplit(" version ", 1)[0] for s in seen}
    if len(topics) == 1:
        return f"{next(iter(topics))} versions {', '.join(s.rsplit(' ', 1)[1] for s in seen)}"
    return ", ".join(seen)


def fetch_versions(admin: AdminClient, topics: Iterable[str]) -> dict[str, list[SchemaVersion]]:
    """Every listed version of the topics' schemas, by registry key (a topic without schema: none)."""
    keys = list(dict.fromkeys(schema_key(t) for t in topics))
    with ThreadPoolExecutor(max_workers=FETCH_CONCURRENCY) as pool:
        docs = list(pool.map(admin.schemas, keys))
    return {k: listed_versions(d) for k, d in zip(keys, docs, strict=True)}


def typed_values(admin: AdminClient, topics: Iterable[str]) -> TypedValues | None:
    """The ``value`` column for reading ``topics``, None when none of them has an AVRO/JSON schema."""
    return TypedValues.merge(fetch_versions(admin, topics))


class ValueDecoder:
    """Decodes one topic's payloads into the merged type, with the writer version of each entry."""

    def __init__(self, topic: str, node: Node, versions: Mapping[int, SchemaVersion]) -> None:
        self.topic = topic
        self.node = node
        self.plain = node.plain
        self.versions = dict(versions)
        self.unknown: dict[int, int] = {}  # sv -> messages left null because the version is unknown
        self.failed = 0
        self._readers: dict[int, Callable[[bytes], Any]] = {}

    def _reader(self, sv: int) -> Callable[[bytes], Any] | None:
        reader = self._readers.get(sv)
        if reader is not None:
            return reader
        version = self.versions.get(sv)
        if version is None:
            return None
        node = self.node
        if version.type is SchemaType.JSON:

            def read_json(payload: bytes) -> Any:
                return conform(json.loads(payload), node)

            reader = read_json
        else:
            writer = _parsed(version.definition)
            plain = self.plain and version.live  # a deleted version's types may differ: conform them

            def read_avro(payload: bytes) -> Any:
                value = fastavro.schemaless_reader(io.BytesIO(payload), writer, None)
                return value if plain else conform(value, node)

            reader = read_avro
        self._readers[sv] = reader
        return reader

    def decode(self, sv: int | None, payloads: Sequence[bytes | None]) -> list[Any]:
        """The values of one entry's messages (null for a null-value message, for an entry written
        without a schema, and for a version the registry no longer has)."""
        if sv is None:
            return [None] * len(payloads)
        reader = self._reader(int(sv))
        if reader is None:
            if int(sv) not in self.unknown:
                log.warning(
                    "%s: schema version %s is not among the registry's versions %s (deleted with force?): value null",
                    self.topic,
                    sv,
                    sorted(self.versions),
                )
            self.unknown[int(sv)] = self.unknown.get(int(sv), 0) + len(payloads)
            return [None] * len(payloads)
        out: list[Any] = []
        for p in payloads:
            if p is None:
                out.append(None)
                continue
            try:
                out.append(reader(p))
            except Exception as exc:  # a payload that is not what its version says
                if not self.failed:
                    log.warning(
                        "%s: a message of schema version %s does not decode (%s): value null", self.topic, sv, exc
                    )
                self.failed += 1
                out.append(None)
        return out
