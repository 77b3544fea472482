"""Turning stored entries into the data source's rows, column by column, as Arrow record batches.

One entry is one producer ``send``: a batch of messages (or one message) sharing the entry's
metadata (producer name, publish time, compression). Each message becomes one row, with the
fields a consumer would see (``client/message.py``): the key the producer gave (null, not "", when
none was given), its properties, its event time (null when 0, i.e. unset), its own sequence id, and
the batch index that its ``MessageId`` carries — ``i`` in a batch, ``-1`` for a message sent
without batching (``meta["b"]`` false), as in Pulsar. A null-value message (``producer.send(None)``,
``Message.has_null_value()``) has a null payload, not an empty one.

Chunks of a message too large for one entry (WIRE.md R41a) are *not* joined: each chunk is one
row whose payload is that slice of the message's (compressed) bytes, with the chunk's identity in
``properties`` (``CHUNK_*`` below) and no event time (it lives inside the whole message). Joining
them is left to a follow-up; here nothing is hidden and nothing is guessed.

An end-to-end encrypted entry (WIRE.md R114, R116) cannot be decoded without the consumers' private
keys, which Spark never has: it becomes one row (batch index -1, the entry's meta key) whose payload
is the ciphertext, still encrypted, with what a key holder needs to open it in ``properties``
(``ENCRYPTION_*`` below: key names, each wrapped data key and the nonce in base64, the algorithm,
the compression and the number of messages inside).

Rows are built as columns and handed to Spark as ``pyarrow.RecordBatch``es: several times faster
than Python tuples, which Spark would convert to Arrow itself, value by value.

A topic with an AVRO or JSON schema adds two columns after these: the entry's ``schema_version``
(meta ``sv``, WIRE.md R122; null when written without a schema) and the typed ``value`` decoded
with that version (null for a chunk, an encrypted entry, a null-value message, and a version the
registry no longer has). Decoding needs the schema registry, which lives far above this package:
the decoder is handed in as a ``ValueDecoding`` (the Spark jobs' ``value_schema.ValueDecoder`` is
one), so the rows are built here without knowing where the schemas come from.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from magnetar.protocol.batch import decode_batch
from magnetar.protocol.entry import (
    META_CHUNK_ID,
    META_CHUNK_UUID,
    META_ENCRYPTION_KEYS,
    META_NUM_CHUNKS,
    META_SCHEMA_VERSION,
    META_TOTAL_CHUNK_SIZE,
    EntryMeta,
)


@dataclass(frozen=True)
class StoredEntry:
    """One verified entry: its id, its metadata map and its (still compressed) payload."""

    entry_id: int
    meta: EntryMeta
    payload: bytes


class ValueDecoding(Protocol):
    """What the typed ``value`` column needs from a topic's schemas (``jobs.value_schema.ValueDecoder``)."""

    @property
    def value_type(self) -> Any:
        """The Arrow type of the ``value`` column (the merge of the topic's schema versions)."""

    def decode(self, sv: int | None, payloads: Sequence[bytes | None]) -> list[Any]:
        """The values of one entry's messages, written with schema version ``sv`` (null where none)."""


# The columns, in the order of the data source's schema (``source.SCHEMA_DDL``).
COLUMNS = (
    "topic",
    "partition",
    "ledger_id",
    "entry_id",
    "batch_index",
    "publish_time",
    "event_time",
    "key",
    "properties",
    "payload",
    "producer_name",
    "sequence_id",
)

# The two columns a topic with a schema adds after ``COLUMNS``.
SCHEMA_VERSION_COLUMN = "schema_version"
VALUE_COLUMN = "value"

# Properties that mark a row as one chunk of a chunked message (not joined, see above).
CHUNK_UUID = "magnetar.chunk.uuid"
CHUNK_ID = "magnetar.chunk.id"
CHUNK_COUNT = "magnetar.chunk.count"
CHUNK_TOTAL_SIZE = "magnetar.chunk.totalSize"

# Properties of a row that is a whole encrypted entry (not decrypted, see above); the wrapped data
# key of key ``name`` is under ``ENCRYPTION_KEY_PREFIX + name``.
ENCRYPTION_KEYS = "magnetar.encryption.keys"
ENCRYPTION_KEY_PREFIX = "magnetar.encryption.key."
ENCRYPTION_PARAM = "magnetar.encryption.param"
ENCRYPTION_ALGORITHM = "magnetar.encryption.algorithm"
ENCRYPTION_COMPRESSION = "magnetar.encryption.compression"
ENCRYPTION_BATCH_SIZE = "magnetar.encryption.batchSize"

# The property of a row standing for an entry whose messages cannot be listed (``add_unreadable``).
UNREADABLE = "magnetar.entry.unreadable"


def encryption_properties(meta: EntryMeta) -> dict[str, str]:
    """The ``ENCRYPTION_*`` properties of an encrypted entry's row (empty when not encrypted)."""
    keys = meta.get(META_ENCRYPTION_KEYS)
    if keys is None:
        return {}
    props = {
        ENCRYPTION_KEYS: ",".join(str(k[0]) for k in keys),
        ENCRYPTION_PARAM: base64.b64encode(bytes(meta.get("ep", b""))).decode(),
        ENCRYPTION_ALGORITHM: str(meta.get("ea", "")),
        ENCRYPTION_COMPRESSION: str(meta.get("comp", 0)),
        ENCRYPTION_BATCH_SIZE: str(meta.get("n", 1)),
    }
    for k in keys:
        props[ENCRYPTION_KEY_PREFIX + str(k[0])] = base64.b64encode(bytes(k[1])).decode()
    return props


def is_chunk(meta: EntryMeta) -> bool:
    """Whether an entry is one chunk of a larger message (one opaque row, see above)."""
    return int(meta.get(META_NUM_CHUNKS, 1)) > 1


def is_opaque(meta: EntryMeta) -> bool:
    """Whether an entry becomes one row whose ``payload`` is the entry's payload as stored (a chunk
    or an encrypted entry), rather than one row per message of its batch."""
    return is_chunk(meta) or META_ENCRYPTION_KEYS in meta


# The Arrow types Spark expects for the schema (``to_arrow_schema`` of it, timezone UTC).
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("ledger_id", pa.int64()),
        ("entry_id", pa.int64()),
        ("batch_index", pa.int32()),
        ("publish_time", pa.timestamp("us", tz="UTC")),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("key", pa.string()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("payload", pa.binary()),
        ("producer_name", pa.string()),
        ("sequence_id", pa.int64()),
    ]
)


def typed_arrow_schema(value_type: Any) -> Any:
    """``ARROW_SCHEMA`` and the columns of a topic with a schema (``value_type``: the merged Arrow type)."""
    return ARROW_SCHEMA.append(pa.field(SCHEMA_VERSION_COLUMN, pa.int32())).append(pa.field(VALUE_COLUMN, value_type))


# A pushed-down filter on an entry: (entry id, publish time in ms) -> keep its messages?
EntryTest = Callable[[int, int], bool]


class RowColumns:
    """The rows of one ledger range, accumulated as one list per column."""

    def __init__(
        self,
        topic: str,
        partition: int,
        ledger_id: int,
        *,
        keep: EntryTest | None = None,
        values: ValueDecoding | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.ledger_id = ledger_id
        self.keep = keep  # pushed-down entry-id / publish-time filters, applied per entry
        self.values = values  # the typed columns' decoder (None: a read without them)
        self.schema = ARROW_SCHEMA if values is None else typed_arrow_schema(values.value_type)
        self.skipped_entries = 0
        self._clear()

    def _clear(self) -> None:
        self.entry_id: list[int] = []
        self.batch_index: list[int] = []
        self.publish_us: list[int] = []
        self.event_us: list[int | None] = []
        self.key: list[str | None] = []
        self.properties: list[Any] = []
        self.payload: list[bytes | None] = []  # None: a null-value message (``producer.send(None)``)
        self.producer: list[str | None] = []
        self.sequence_id: list[int] = []
        self.schema_version: list[int | None] = []
        self.value: list[Any] = []

    def __len__(self) -> int:
        return len(self.entry_id)

    def add(self, entry: StoredEntry) -> None:
        """The rows of one verified entry (its CRCs were checked by the reader)."""
        meta = entry.meta
        publish_ms = int(meta.get("pt", 0))
        if self.keep is not None and not self.keep(entry.entry_id, publish_ms):
            self.skipped_entries += 1
            return
        producer = meta.get("pn")
        if is_chunk(meta):
            self._add_chunk(entry, publish_ms, producer)
            return
        if META_ENCRYPTION_KEYS in meta:
            self._add_opaque(entry, publish_ms, producer, encryption_properties(meta))
            return
        try:
            records = decode_batch(meta, entry.payload, verify=False)  # verified by the reader
        except Exception as exc:  # a good CRC over undecodable bytes: a producer bug, say where
            raise ValueError(
                f"topic {self.topic} ledger {self.ledger_id} entry {entry.entry_id}: undecodable batch: {exc}"
            ) from exc
        batched = bool(meta.get("b", True))
        publish_us = publish_ms * 1000
        for i, record in enumerate(records):
            payload, props, key, event_time, sequence_id = record[:5]
            self.entry_id.append(entry.entry_id)
            self.batch_index.append(i if batched else -1)
            self.publish_us.append(publish_us)
            self.event_us.append(int(event_time) * 1000 if event_time else None)
            self.key.append(key)
            self.properties.append(props or {})
            self.payload.append(payload)
            self.producer.append(producer)
            self.sequence_id.append(int(sequence_id))
        if self.values is not None:
            sv = meta.get(META_SCHEMA_VERSION)
            self.schema_version.extend([sv] * len(records))
            self.value.extend(self.values.decode(sv, [r[0] for r in records]))

    def _add_chunk(self, entry: StoredEntry, publish_ms: int, producer: str | None) -> None:
        meta = entry.meta
        chunk = {
            CHUNK_UUID: str(meta.get(META_CHUNK_UUID, "")),
            CHUNK_ID: str(meta.get(META_CHUNK_ID, 0)),
            CHUNK_COUNT: str(meta.get(META_NUM_CHUNKS, 1)),
            CHUNK_TOTAL_SIZE: str(meta.get(META_TOTAL_CHUNK_SIZE, 0)),
        }
        self._add_opaque(entry, publish_ms, producer, {**chunk, **encryption_properties(meta)})

    def add_unreadable(self, entry: StoredEntry, reason: str) -> None:
        """One row standing for an entry whose messages cannot be listed (a batch that does not
        decode, or a batch of none): its payload as stored, ``UNREADABLE`` and the reason in its
        properties. For a copy of a ledger that must keep every entry (an offloaded ledger)."""
        meta = entry.meta
        self._add_opaque(entry, int(meta.get("pt", 0)), meta.get("pn"), {UNREADABLE: reason})

    def truncate(self, rows: int) -> None:
        """Keep only the first ``rows`` rows (drops those of an entry whose ``add`` failed half-way)."""
        for column in (
            self.entry_id,
            self.batch_index,
            self.publish_us,
            self.event_us,
            self.key,
            self.properties,
            self.payload,
            self.producer,
            self.sequence_id,
            self.schema_version,
            self.value,
        ):
            del column[rows:]

    def _add_opaque(self, entry: StoredEntry, publish_ms: int, producer: str | None, props: dict[str, str]) -> None:
        """One row for a whole entry whose payload stays as stored (a chunk, an encrypted entry)."""
        meta = entry.meta
        self.entry_id.append(entry.entry_id)
        self.batch_index.append(-1)
        self.publish_us.append(publish_ms * 1000)
        self.event_us.append(None)
        self.key.append(meta.get("k"))
        self.properties.append(props)
        self.payload.append(entry.payload)
        self.producer.append(producer)
        self.sequence_id.append(int(meta.get("seq", 0)))
        if self.values is not None:  # a slice or ciphertext: no value to decode
            self.schema_version.append(meta.get(META_SCHEMA_VERSION))
            self.value.append(None)

    def flush(self) -> Any:
        """The rows so far as one ``pyarrow.RecordBatch`` (in ``ARROW_SCHEMA``); starts afresh."""
        n = len(self)
        arrays = [
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array([self.ledger_id] * n, pa.int64()),
            pa.array(self.entry_id, pa.int64()),
            pa.array(self.batch_index, pa.int32()),
            pa.array(self.publish_us, pa.timestamp("us", tz="UTC")),
            pa.array(self.event_us, pa.timestamp("us", tz="UTC")),
            pa.array(self.key, pa.string()),
            pa.array(self.properties, pa.map_(pa.string(), pa.string())),
            pa.array(self.payload, pa.binary()),
            pa.array(self.producer, pa.string()),
            pa.array(self.sequence_id, pa.int64()),
        ]
        if self.values is not None:
            arrays.append(pa.array(self.schema_version, pa.int32()))
            arrays.append(pa.array(self.value, self.schema.field(VALUE_COLUMN).type))
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def entry_rows(
    topic: str, partition: int, ledger_id: int, entry: StoredEntry, values: ValueDecoding | None = None
) -> list[dict[str, Any]]:
    """The rows of one entry as dicts (tools and tests; the data source uses ``RowColumns``)."""
    cols = RowColumns(topic, partition, ledger_id, values=values)
    cols.add(entry)
    out: list[dict[str, Any]] = cols.flush().to_pylist()
    return out
