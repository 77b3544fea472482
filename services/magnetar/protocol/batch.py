"""The payload format a producer sends: a (possibly compressed) msgpack list of message records.

The broker never decodes it (DESIGN.md §4): it stores ``[meta, payload]`` as one ledger entry
(``entry.py``) and forwards both to consumers. Only producers encode and only consumers (and
Spark readers) decode.

A record is ``[payload: bin | nil, properties: map, partition_key: str | nil, event_time: int,
sequence_id: int, ordering_key?: str | nil]``; a nil payload is a null value (``producer.send(None)``, a
tombstone distinct from an empty payload; WIRE.md R98). A message sent without batching is a
one-record batch whose meta says ``b: false``, so that its id carries batch index -1 as in Pulsar.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from magnetar.protocol.checksum import crc32c
from magnetar.protocol.compression import CompressionType, compress, decompress
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.errors import ChecksumError

Record = list[Any]

# Keys of the entry metadata map ("meta", ``entry.EntryMeta``), kept short because every entry
# carries them.
META_PRODUCER: Final = "pn"
META_SEQUENCE: Final = "seq"
META_COUNT: Final = "n"
META_CRC: Final = "crc"
META_COMPRESSION: Final = "comp"
META_UNCOMPRESSED_SIZE: Final = "usize"
META_PUBLISH_TIME: Final = "pt"
META_BATCHED: Final = "b"
META_KEY: Final = "k"
META_DELIVER_AT: Final = "dt"


@dataclass(slots=True)
class DecodedRecord:
    payload: bytes | None
    properties: dict[str, str]
    partition_key: str | None
    event_time: int
    sequence_id: int


def make_record(
    payload: bytes | None,
    properties: dict[str, str] | None,
    partition_key: str | None,
    event_time: int,
    sequence_id: int,
) -> Record:
    return [payload, properties or {}, partition_key, event_time, sequence_id]


def encode_batch(
    records: list[Record],
    *,
    producer_name: str,
    first_sequence_id: int,
    compression: CompressionType | int = CompressionType.NONE,
    batched: bool = True,
    key: str | None = None,
    deliver_at: int | None = None,
) -> tuple[EntryMeta, bytes]:
    """Return (meta, payload) for a batch of records; the CRC covers the payload as sent.

    ``key`` goes into ``meta`` so a Key_Shared broker can route the entry without decoding the
    payload; ``deliver_at`` marks a delayed message (the broker holds it until then on Shared
    and Key_Shared subscriptions).
    """
    raw = msgpack.packb(records, use_bin_type=True)
    payload = compress(compression, raw)
    meta: EntryMeta = {
        META_PRODUCER: producer_name,
        META_SEQUENCE: first_sequence_id,
        META_COUNT: len(records),
        META_CRC: crc32c(payload),
        META_COMPRESSION: int(compression),
        META_UNCOMPRESSED_SIZE: len(raw),
        META_PUBLISH_TIME: int(time.time() * 1000),
        META_BATCHED: batched,
    }
    if key is not None:
        meta[META_KEY] = key
    if deliver_at is not None:
        meta[META_DELIVER_AT] = deliver_at
    return meta, payload


def decode_batch(meta: EntryMeta, payload: bytes, *, verify: bool = True) -> list[Record]:
    """Check the CRC, decompress and decode a batch into its raw records."""
    if verify and crc32c(payload) != meta[META_CRC]:
        raise ChecksumError("entry payload checksum mismatch (corrupted in storage or transit)")
    raw = decompress(meta.get(META_COMPRESSION, 0), payload, meta.get(META_UNCOMPRESSED_SIZE, len(payload)))
    records: list[Record] = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    return records
