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

Where the parts live: the types and their merge in ``value_types``, ``conform`` in
``value_coercion``, the registry's versions in ``schema_versions``; this module assembles them
into the column of one read (``TypedValues``) and decodes each topic's entries (``ValueDecoder``).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import fastavro
from pyspark.sql.types import DataType

from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.schema_versions import SchemaVersion, fetch_versions, schema_key
from magnetar.jobs.value_coercion import conform
from magnetar.jobs.value_types import Node, SchemaMergeError, arrow_type, avro_node, merge_nodes, spark_type
from magnetar.schema.info import SchemaType

log = logging.getLogger(__name__)


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

    @property
    def value_type(self) -> Any:
        """The Arrow type of the ``value`` column, as ``columnar.message_rows.RowColumns`` builds it."""
        return arrow_type(self.node)

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
