"""The schema registry of a topic (WIRE.md R123): versioned ``SchemaInfo`` in the metadata store.

Why the metadata store and no cache: the registry must survive a broker killed with -9 and a
topic moving to another broker, and two brokers (an old owner still finishing an admission, the
new one) must never both create version N. So every read goes to the store and every write is a
compare-and-set on the record's version, retried on ``BadVersion`` with the check run again on
what is there now. One record per *base* topic (no domain, no ``-partition-N``): the partitions of
a topic share one schema, and ``persistent://`` and ``non-persistent://`` topics of one name share
it, as Pulsar's ``SchemaId`` does.

Deleting appends a tombstone rather than erasing: entries written earlier still name their
versions, and readers must still be able to fetch those definitions. The "live" versions, the
ones new schemas are checked against, are those after the last tombstone. ``remove`` (force)
drops the whole record, and numbering starts again at 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import BadVersion, NotFound
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import SchemaInfo, SchemaType

# Bounded so that a store that keeps refusing (it should not) ends in an error, not a spin.
_CAS_ATTEMPTS = 64


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One stored version: its number, the schema, when it was added (ms), and whether it is a
    tombstone (a delete marker, whose schema is empty)."""

    version: int
    info: SchemaInfo
    timestamp: int
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "type": self.info.type.name,
            "name": self.info.name,
            "schema": self.info.schema,
            "properties": dict(self.info.properties),
            "timestamp": self.timestamp,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SchemaVersion:
        info = SchemaInfo(
            SchemaType.parse(doc["type"]),
            str(doc.get("schema") or ""),
            str(doc.get("name") or ""),
            dict(doc.get("properties") or {}),
        )
        return cls(int(doc["version"]), info, int(doc.get("timestamp", 0)), bool(doc.get("deleted", False)))


def live_of(versions: Sequence[SchemaVersion]) -> list[SchemaVersion]:
    """The versions after the last tombstone, oldest first."""
    last_tombstone = max((i for i, v in enumerate(versions) if v.deleted), default=-1)
    return list(versions[last_tombstone + 1 :])


def schema_path(topic: TopicName) -> str:
    """The registry key of ``topic``: its base name without domain or partition suffix."""
    base = topic.partitioned_base
    return paths.schema(base.tenant, base.namespace, base.local_name)


def _encode(versions: Sequence[SchemaVersion]) -> bytes:
    return json.dumps({"versions": [v.to_json() for v in versions]}).encode()


class SchemaRegistry:
    """The registry over one metadata store; stateless, so a new one per use is fine."""

    def __init__(self, store: MetadataStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    async def _read(self, topic: TopicName) -> tuple[list[SchemaVersion], int]:
        """Every stored version (tombstones included) and the record's store version
        (``MUST_NOT_EXIST`` when there is no record)."""
        found = await self.store.get(schema_path(topic))
        if found is None:
            return [], MUST_NOT_EXIST
        doc = json.loads(found.value)
        return [SchemaVersion.from_json(v) for v in doc.get("versions", [])], found.version

    async def versions(self, topic: TopicName) -> list[SchemaVersion]:
        """Every stored version, tombstones included, oldest first."""
        return (await self._read(topic))[0]

    async def live(self, topic: TopicName) -> list[SchemaVersion]:
        return live_of(await self.versions(topic))

    async def get(self, topic: TopicName, version: int | None = None) -> SchemaVersion | None:
        """Version ``version`` (deleted ones stay readable by number; a tombstone is not a
        schema), or with None the newest live version; None when there is no such schema."""
        versions = await self.versions(topic)
        if version is None:
            live = live_of(versions)
            return live[-1] if live else None
        for v in versions:
            if v.version == version and not v.deleted:
                return v
        return None

    async def version_of(self, topic: TopicName, info: SchemaInfo) -> int | None:
        """The live version that is ``info`` (``SchemaInfo.same_schema``), if any."""
        for v in reversed(await self.live(topic)):
            if v.info.same_schema(info):
                return v.version
        return None

    async def add(
        self, topic: TopicName, info: SchemaInfo, check: Callable[[list[SchemaVersion]], None]
    ) -> tuple[int, bool]:
        """The version of ``info``: an equal live version if there is one (``check`` not run),
        else a new version after ``check(live)`` accepted it (it raises to refuse). Returns
        (version, created). A concurrent writer makes the compare-and-set fail: everything is
        read and decided again."""
        for _ in range(_CAS_ATTEMPTS):
            versions, stat_version = await self._read(topic)
            live = live_of(versions)
            for v in reversed(live):
                if v.info.same_schema(info):
                    return v.version, False
            check(live)
            number = versions[-1].version + 1 if versions else 0
            added = SchemaVersion(number, info, int(self.clock() * 1000))
            try:
                await self.store.put(schema_path(topic), _encode([*versions, added]), stat_version)
            except BadVersion:
                continue
            return number, True
        raise BadVersion(f"schema registry of {topic}: too many concurrent updates")

    async def delete(self, topic: TopicName) -> int | None:
        """Append a tombstone; returns its version, or None when there was no live schema
        (nothing to delete: nothing is written)."""
        for _ in range(_CAS_ATTEMPTS):
            versions, stat_version = await self._read(topic)
            if not live_of(versions):
                return None
            number = versions[-1].version + 1
            tombstone = SchemaVersion(number, SchemaInfo(SchemaType.NONE), int(self.clock() * 1000), deleted=True)
            try:
                await self.store.put(schema_path(topic), _encode([*versions, tombstone]), stat_version)
            except BadVersion:
                continue
            return number
        raise BadVersion(f"schema registry of {topic}: too many concurrent updates")

    async def remove(self, topic: TopicName) -> bool:
        """Drop the whole record (force delete, topic deletion); False when there was none."""
        try:
            await self.store.delete(schema_path(topic))
        except NotFound:
            return False
        return True
