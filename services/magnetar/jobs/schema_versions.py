"""The registry's versions of a topic's schema, as the ``value`` column needs them.

A read asks the admin API for every version of each topic's schema (``fetch_versions``), keeps the
AVRO and JSON ones (both are defined by an Avro schema) and marks which are still live: the merged
type is built from the live versions, while a version deleted since still decodes the entries
written with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from magnetar.jobs.admin_client import AdminClient
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import AVRO_DEFINED, SchemaType

# Admin calls made at once when many topics are read (a namespace).
FETCH_CONCURRENCY = 8


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


def fetch_versions(admin: AdminClient, topics: Iterable[str]) -> dict[str, list[SchemaVersion]]:
    """Every listed version of the topics' schemas, by registry key (a topic without schema: none)."""
    keys = list(dict.fromkeys(schema_key(t) for t in topics))
    with ThreadPoolExecutor(max_workers=FETCH_CONCURRENCY) as pool:
        docs = list(pool.map(admin.schemas, keys))
    return {k: listed_versions(d) for k, d in zip(keys, docs, strict=True)}
