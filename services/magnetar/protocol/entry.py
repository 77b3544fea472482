"""The stored form of one message entry: what a topic's ledger holds for each ``send``.

Every entry of a topic's managed ledger is the msgpack array ``[meta, payload]``
(``use_bin_type=True``): ``meta`` is the producer's entry metadata map (``EntryMeta``, keys
below) exactly as the ``send`` command carried it, ``payload`` the producer's (compressed) batch
bytes exactly as sent, CRC32C ``meta["crc"]``. The broker writes it (``encode_entry``) and never
decodes ``payload``; the dispatcher reads it back (``decode_entry``) to push ``message`` frames.

This module is the one definition of that layout for everything that reads ledgers directly —
the broker, and offline readers such as a Spark job that scans a topic's ledgers from the
bookies: ``decode_entry`` gives ``(meta, payload)`` and ``batch.decode_batch(meta, payload)``
then gives the message records (it verifies ``crc`` first). WIRE.md, "Entry metadata", is the
specification.
"""

# No ``from __future__ import annotations`` here: TypedDict reads NotRequired[...] at runtime.

from typing import Any, Final, NotRequired, TypedDict

import msgpack


class EntryMeta(TypedDict):
    """The entry metadata map (``meta``), short keys because every entry carries them.

    ``batch.encode_batch`` (every producer) writes all of the keys. The broker requires only
    ``crc`` (it refuses a ``send`` whose ``crc`` does not match the payload), so a reader of
    stored entries falls back to the documented defaults for the others.
    """

    crc: int  # CRC32C of ``payload`` as sent (compressed)
    pn: NotRequired[str]  # producer name
    seq: NotRequired[int]  # sequence id of the first message
    n: NotRequired[int]  # number of messages (default 1)
    comp: NotRequired[int]  # ``CompressionType`` value (default 0, none)
    usize: NotRequired[int]  # uncompressed size of ``payload`` (default: its length)
    pt: NotRequired[int]  # publish time, milliseconds since the epoch
    b: NotRequired[bool]  # whether the messages were batched (batch index -1 in ids if not)
    k: NotRequired[str]  # the entry's key, for Key_Shared dispatch (see WIRE.md R29)
    dt: NotRequired[int]  # deliver-at time, ms since the epoch: a delayed message (one per entry)
    hs: NotRequired[int]  # highest sequence id, when not seq + n - 1 (custom ids, key-based batches; R40a)
    # A chunk of a message too large for one entry (WIRE.md R41a): every chunk of one message carries
    # the message's own meta (same ``seq``, ``pn``, ``k``, ``pt``, ``comp``, ``usize`` of the whole),
    # with ``crc`` of its own slice, ``n`` 1, and these four keys.
    uuid: NotRequired[str]  # "<producer name>-<sequence id>": which message the chunk belongs to
    cid: NotRequired[int]  # chunk id, 0 .. cn-1, in order of the message's bytes
    cn: NotRequired[int]  # number of chunks of the message
    ts: NotRequired[int]  # total size of the message's (compressed) payload, all chunks together
    cx: NotRequired[list[int]]  # batch indexes a compaction removed from this copy (WIRE.md R46c)
    # End-to-end encryption (WIRE.md R114): ``payload`` is then AES-256-GCM ciphertext that only
    # key holders open (``client.crypto``); ``crc`` covers the ciphertext.
    ek: NotRequired[list[list[Any]]]  # [key name, wrapped data key, key metadata] per public key
    ep: NotRequired[bytes]  # the AES-GCM nonce
    ea: NotRequired[str]  # the algorithm, "AES-256-GCM"
    # The version of the topic's schema the entry's messages were written with (WIRE.md R122);
    # absent: written without a schema (bytes).
    sv: NotRequired[int]


# The chunk keys of ``EntryMeta``: ``client.producer.chunking`` writes them, ``client.consumer.chunks``
# reads them, the broker leaves them alone.
META_CHUNK_UUID: Final = "uuid"
META_CHUNK_ID: Final = "cid"
META_NUM_CHUNKS: Final = "cn"
META_TOTAL_CHUNK_SIZE: Final = "ts"
# The key that marks an end-to-end encrypted entry (WIRE.md R114): its payload is ciphertext that
# no server-side reader (compaction, peek, Spark) can decode.
META_ENCRYPTION_KEYS: Final = "ek"
# The writer's schema version (WIRE.md R122): readers decode each entry with the version it carries.
META_SCHEMA_VERSION: Final = "sv"


def encode_entry(meta: EntryMeta, payload: bytes) -> bytes:
    """The ledger entry for one ``send``: msgpack ``[meta, payload]``."""
    data: bytes = msgpack.packb([meta, payload], use_bin_type=True)
    return data


def decode_entry(data: bytes) -> tuple[EntryMeta, bytes]:
    """``(meta, payload)`` of a stored entry; ``payload`` is returned undecoded.

    No validation beyond msgpack's (this runs for every dispatched entry): a value that is not a
    two-element array raises ``ValueError``/``TypeError``.
    """
    meta, payload = msgpack.unpackb(data, raw=False, strict_map_key=False)
    return meta, payload
