"""Message ids, shaped like pulsar-client 3.x's ``pulsar.MessageId``: positions in a topic's log.

A program written for pulsar-client builds ids as ``MessageId(partition, ledger_id, entry_id,
batch_index)`` (every argument defaulting to -1) and reads them through the accessor *methods*
``ledger_id()``, ``entry_id()``, ``partition()`` and ``batch_index()``; this class keeps that
shape so that such a program runs unchanged. ``batch_index`` is -1 for a message that was not sent
in a batch, and ``partition`` -1 for a topic that is not partitioned, as in Pulsar.

Ids compare by (ledger, entry, batch index), as Pulsar's C++ ``MessageId::operator<`` does, so that
cumulative acknowledgement and "exactly once, in order" checks can use plain ordering; equality
(and the hash, which Pulsar does not offer but dict-keyed bookkeeping wants) also takes the
partition in. ``str()`` is Pulsar's ``(ledger,entry,partition,batch_index)``.

The id of a chunked message (WIRE.md R41b) is Pulsar's ``ChunkMessageIdImpl``: ledger and entry
are its *last* chunk's (what it compares, prints and equals by, as in pulsar-client), and
``first_chunk`` is the (ledger, entry) of its first chunk, which ``seek`` and an inclusive start
use. ``serialize`` keeps it (as newer pulsar-clients serialize ``first_chunk_message_id``).
"""

from __future__ import annotations

import re
from typing import ClassVar

# ``parse`` reads both Pulsar's ``str()`` form and the colon form Magnetar's tools print and accept.
_PULSAR_FORM = re.compile(r"^\((-?\d+),(-?\d+),(-?\d+),(-?\d+)\)$")


class MessageId:
    """The id of one message: ``MessageId(partition=-1, ledger_id=-1, entry_id=-1, batch_index=-1)``."""

    __slots__ = ("_batch", "_entry", "_first_chunk", "_ledger", "_partition", "_topic")

    # Pulsar's ``MessageId.earliest`` / ``MessageId.latest`` (readers and seeks start there); set
    # below the class, as they are instances of it.
    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1) -> None:
        self._partition = int(partition)
        self._ledger = int(ledger_id)
        self._entry = int(entry_id)
        self._batch = int(batch_index)
        # Chunked messages only: the (ledger, entry) of the first chunk (None for every other message).
        self._first_chunk: tuple[int, int] | None = None
        # Set by ``deserialize(..., topic=...)`` / ``topic_name(...)``: which topic of a consumer on
        # several topics the id belongs to.
        self._topic: str | None = None

    # ------------------------------------------------------------------ Pulsar's accessors

    def ledger_id(self) -> int:
        return self._ledger

    def entry_id(self) -> int:
        return self._entry

    def batch_index(self) -> int:
        return self._batch

    def partition(self) -> int:
        return self._partition

    def topic_name(self, topic: str) -> None:
        """Say which topic the id belongs to (as ``_pulsar.MessageId.topic_name``, a setter)."""
        self._topic = topic

    def serialize(self) -> bytes:
        """Bytes form, as Pulsar's ``MessageId.serialize``; a chunked id adds ``;ledger:entry`` of its first chunk."""
        text = f"{self._ledger}:{self._entry}:{self._partition}:{self._batch}"
        first = self._first_chunk
        if first is not None:
            text += f";{first[0]}:{first[1]}"
        return text.encode()

    @staticmethod
    def deserialize(message_id_bytes: bytes, topic: str | None = None) -> MessageId:
        """The id ``serialize`` gave; ``topic`` tells a consumer on several topics which topic it is from."""
        text = bytes(message_id_bytes).decode()
        last, sep, first = text.partition(";")
        mid = MessageId.parse(last)
        if sep:
            parts = first.split(":")
            if len(parts) != 2:
                raise ValueError(f"message id {text!r}: first chunk {first!r} is not ledger:entry")
            mid._first_chunk = (int(parts[0]), int(parts[1]))
        if topic is not None:
            mid._topic = topic
        return mid

    @classmethod
    def wrap(cls, msg_id: MessageId) -> MessageId:
        """Pulsar wraps its C extension's id in the Python class; here there is one class, so a copy."""
        if not isinstance(msg_id, MessageId):
            raise TypeError(f"cannot wrap {type(msg_id).__name__} as a MessageId")
        mid = cls(msg_id._partition, msg_id._ledger, msg_id._entry, msg_id._batch)
        mid._first_chunk = msg_id._first_chunk
        mid._topic = msg_id._topic
        return mid

    # ------------------------------------------------------------------ Magnetar's additions

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """An id from ``ledger:entry:partition:batch`` or Pulsar's ``(ledger,entry,partition,batch)``."""
        m = _PULSAR_FORM.match(text.strip())
        parts = list(m.groups()) if m is not None else text.split(":")
        if len(parts) != 4:
            raise ValueError(f"message id {text!r} is not ledger:entry:partition:batch")
        try:
            ledger, entry, partition, batch = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"message id {text!r} is not ledger:entry:partition:batch") from None
        return cls(partition, ledger, entry, batch)

    def with_first_chunk(self, ledger_id: int, entry_id: int) -> MessageId:
        """This id as a chunked message's, whose first chunk is at (ledger_id, entry_id)."""
        mid = MessageId.wrap(self)
        mid._first_chunk = (ledger_id, entry_id)
        return mid

    @property
    def first_chunk(self) -> tuple[int, int] | None:
        """A chunked message's first chunk (ledger, entry); None for every other message."""
        return self._first_chunk

    @property
    def position(self) -> tuple[int, int]:
        """The (ledger, entry) position of the entry that holds this message."""
        return (self._ledger, self._entry)

    @property
    def topic(self) -> str | None:
        """The topic ``deserialize``/``topic_name`` gave, else None."""
        return self._topic

    # ------------------------------------------------------------------ comparison, hashing, text

    def _key(self) -> tuple[int, int, int]:
        return (self._ledger, self._entry, self._batch)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self._partition == other._partition

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash((self._ledger, self._entry, self._partition, self._batch))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() < other._key() or self == other

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() > other._key() or self == other

    def __str__(self) -> str:
        return f"({self._ledger},{self._entry},{self._partition},{self._batch})"

    def __repr__(self) -> str:
        return (
            f"MessageId(partition={self._partition}, ledger_id={self._ledger}, "
            f"entry_id={self._entry}, batch_index={self._batch})"
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable (slots and no __dict__): through ``serialize``, so the first chunk and topic travel too.
        return (MessageId.deserialize, (self.serialize(), self._topic))


# Pulsar's MessageId.earliest / latest sentinels: before every message, after every message (the
# wire's ``start_message_id`` values of WIRE.md R20f, ``subscribe``).
EARLIEST = MessageId(-1, -1, -1, -1)
LATEST = MessageId(-1, 2**63 - 1, 2**63 - 1, -1)
MessageId.earliest = EARLIEST
MessageId.latest = LATEST
