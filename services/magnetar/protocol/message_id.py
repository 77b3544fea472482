"""Message ids: ``ledger:entry:partition:batch``, ordered as positions in a topic's log.

``batch`` is -1 for a message that was not sent in a batch, and ``partition`` is -1 for a topic
that is not partitioned, as in Pulsar. Ids compare by (ledger, entry, batch) so that cumulative
acknowledgement and "exactly once, in order" checks can use plain ordering.

The id of a chunked message (WIRE.md R41b) is Pulsar's ``ChunkMessageIdImpl``: ledger and entry
are its *last* chunk's (what it compares, prints and equals by, as in pulsar-client), and
``first_chunk`` is the (ledger, entry) of its first chunk, which ``seek`` and an inclusive start
use. ``serialize`` keeps it (as newer pulsar-clients serialize ``first_chunk_message_id``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import total_ordering
from typing import ClassVar


@total_ordering
@dataclass(frozen=True, slots=True)
class MessageId:
    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    # Chunked messages only: the (ledger, entry) of the first chunk (None for every other message).
    first_chunk: tuple[int, int] | None = field(default=None, compare=False)

    # Pulsar's ``MessageId.earliest`` / ``MessageId.latest`` (readers and seeks start there); set
    # below the class, as they are instances of it.
    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return (self.ledger_id, self.entry_id, self.batch_index) < (
            other.ledger_id,
            other.entry_id,
            other.batch_index,
        )

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.partition}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        parts = text.split(":")
        if len(parts) != 4:
            raise ValueError(f"message id {text!r} is not ledger:entry:partition:batch")
        ledger, entry, partition, batch = (int(p) for p in parts)
        return cls(ledger, entry, partition, batch)

    def serialize(self) -> bytes:
        """Bytes form, as Pulsar's ``MessageId.serialize``; a chunked id adds ``;ledger:entry`` of its first chunk."""
        first = self.first_chunk
        if first is None:
            return str(self).encode()
        return f"{self};{first[0]}:{first[1]}".encode()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        text = data.decode()
        last, sep, first = text.partition(";")
        if not sep:
            return cls.parse(text)
        mid = cls.parse(last)
        parts = first.split(":")
        if len(parts) != 2:
            raise ValueError(f"message id {text!r}: first chunk {first!r} is not ledger:entry")
        return cls(mid.ledger_id, mid.entry_id, mid.partition, mid.batch_index, (int(parts[0]), int(parts[1])))

    @property
    def position(self) -> tuple[int, int]:
        """The (ledger, entry) position of the entry that holds this message."""
        return (self.ledger_id, self.entry_id)


# Pulsar's MessageId.earliest / latest sentinels: before every message, after every message (the
# wire's ``start_message_id`` values of WIRE.md R20f, ``subscribe``).
EARLIEST = MessageId(-1, -1, -1, -1)
LATEST = MessageId(2**63 - 1, 2**63 - 1, -1, -1)
MessageId.earliest = EARLIEST
MessageId.latest = LATEST
