"""The index of an offloaded ledger object: what a reader needs before it touches the object.

Stored beside the object (``ledger_parquet`` writes both), small, and read first: per row group,
the entries it holds, their publish-time range, its byte range in the object and the CRC32C of
those bytes, so that a seek by entry id or publish time fetches one row group and checks it; and
for the object, its size and CRC32C (checked after an upload, and against damage at rest) and the
byte range of the Parquet footer. JSON, so that an operator can read it with any tool.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from magnetar.offload.errors import CorruptObject
from magnetar.protocol.checksum import crc32c

FORMAT = "magnetar-ledger-parquet"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class RowGroupInfo:
    """Where one row group is and what it holds: whole entries ``first_entry`` .. ``last_entry``."""

    first_entry: int
    last_entry: int
    min_publish_ms: int
    max_publish_ms: int
    offset: int  # of its first byte in the object
    length: int  # its bytes, contiguous
    rows: int
    crc32c: int  # of those bytes


@dataclass(frozen=True)
class LedgerIndex:
    """What a reader needs before touching the object: the row groups and the object's checksums."""

    topic: str
    partition: int
    ledger_id: int
    entry_count: int
    message_count: int
    size: int
    crc32c: int
    footer_offset: int  # the Parquet footer is the bytes from here to the end
    footer_crc32c: int
    row_groups: list[RowGroupInfo] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        doc = {"format": FORMAT, "version": FORMAT_VERSION, **asdict(self)}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerIndex:
        """The index as stored; ``CorruptObject`` when it is not one this version reads."""
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT or doc.get("version") != FORMAT_VERSION:
                raise ValueError(f"format {doc.get('format')!r} version {doc.get('version')!r}")
            del doc["format"], doc["version"]
            groups = [RowGroupInfo(**g) for g in doc.pop("row_groups")]
            return cls(**doc, row_groups=groups)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CorruptObject(f"ledger index unreadable: {exc}") from None

    def groups_for(self, first: int, last: int) -> list[int]:
        """The row groups holding entries ``first`` .. ``last`` (inclusive)."""
        return [i for i, g in enumerate(self.row_groups) if g.last_entry >= first and g.first_entry <= last]


def check_object(data: bytes, index: LedgerIndex) -> None:
    """``CorruptObject`` unless ``data`` is the whole object the index describes (size and CRC32C)."""
    if len(data) != index.size:
        raise CorruptObject(f"ledger {index.ledger_id} object: {len(data)} bytes, the index says {index.size}")
    crc = crc32c(data)
    if crc != index.crc32c:
        raise CorruptObject(f"ledger {index.ledger_id} object: CRC32C {crc:#010x}, the index says {index.crc32c:#010x}")
