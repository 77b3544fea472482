"""Received messages, shaped like ``pulsar.Message``.

A consumer may build hundreds of thousands of these per second, so a ``Message`` is three slots:
the decoded record list (as msgpack produced it, not copied), the ``EntryInfo`` shared by every
message of the same entry, and the batch index. The ``MessageId`` is only built when asked for.

A message knows the partition consumer that delivered it only as a ``MessageOwner``: what the
message itself needs (its topic and partition, its decoder) and where the code that hands it out
reports it consumed or acknowledged. The consumer imports this module, not the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from magnetar.client.schema_codec import NO_SCHEMA_VERSION, MessageDecoder, version_bytes
from magnetar.protocol.batch import META_PRODUCER
from magnetar.protocol.entry import META_SCHEMA_VERSION, EntryMeta
from magnetar.protocol.message_id import MessageId

if TYPE_CHECKING:
    from magnetar.client.encryption.crypto import EncryptionContext


class MessageOwner(Protocol):
    """The partition consumer a message came from (``consumer.partition.PartitionConsumer``), as seen
    from the message and from the code that hands messages out and acknowledges them."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def decoder(self) -> MessageDecoder | None:
        """Decodes ``value()`` by the consumer's schema; None for a bytes consumer."""
        ...

    def message_consumed(self, info: EntryInfo) -> None:
        """One message of ``info``'s entry was handed to the application."""
        ...

    def acknowledge(self, position: tuple[int, int], index: int) -> None: ...

    def acknowledge_cumulative(self, position: tuple[int, int], index: int) -> None: ...

    def negative_acknowledge(self, position: tuple[int, int], redelivery_count: int = 0) -> None: ...


class EntryInfo:
    """What every message of one entry (one stored batch) has in common."""

    __slots__ = (
        "batched",
        "count",
        "epoch",
        "meta",
        "owner",
        "position",
        "publish_time",
        "redelivery_count",
        "unacked",
    )

    def __init__(
        self,
        position: tuple[int, int],
        count: int,
        publish_time: int,
        redelivery_count: int,
        owner: MessageOwner | None,
        batched: bool,
        epoch: int = 0,
        meta: EntryMeta | None = None,
    ) -> None:
        self.position = position
        self.count = count
        self.publish_time = publish_time
        self.redelivery_count = redelivery_count
        self.owner = owner
        self.batched = batched
        # The owner's registration this entry arrived on: after a reconnect, consuming messages
        # of an earlier one must not grant permits to the new one (they were never charged there).
        self.epoch = epoch
        # The tracker's live set of this entry's unacknowledged batch indexes (None: one message).
        self.unacked: set[int] | None = None
        # The entry's metadata map as received (``EntryMeta``): producer name, encryption, ...
        self.meta = meta


class Message:
    """One message as received by a consumer."""

    __slots__ = ("_index", "_info", "_record")

    def __init__(self, record: list[Any], info: EntryInfo, index: int) -> None:
        self._record = record
        self._info = info
        self._index = index

    def data(self) -> bytes:
        """The payload bytes (``b""`` for a null value, as pulsar-client's ``data()``)."""
        payload: bytes | None = self._record[0]
        return payload if payload is not None else b""

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (``schema_codec``): for an ``AvroSchema``
        read with the version the message was written with, fetched before the message was handed
        out, so this never waits; the bytes themselves for a bytes consumer; None for a null value
        (``producer.send(None)``, see ``has_null_value``). A payload the schema cannot decode
        raises what the schema's decoding raises, as in pulsar-client."""
        payload: bytes | None = self._record[0]
        if payload is None:
            return None
        owner = self._info.owner
        decoder = owner.decoder if owner is not None else None
        if decoder is None:
            return payload
        return decoder.decode(payload, self._info.meta)

    def has_null_value(self) -> bool:
        """Whether the message was sent with a null value (a tombstone, distinct from ``b""``)."""
        return self._record[0] is None

    def ordering_key(self) -> str:
        """The ordering key the producer gave, or ``""`` when there was none (as Pulsar returns)."""
        record = self._record
        key = record[5] if len(record) > 5 else None
        return key if key is not None else ""

    def producer_name(self) -> str:
        """The name of the producer that sent the message (``""`` when unknown)."""
        meta = self._info.meta
        return str(meta.get(META_PRODUCER, "")) if meta is not None else ""

    def schema_version(self) -> str:
        """The writer's schema version as pulsar-client returns it: 8 big-endian bytes in a ``str``
        (``""`` for a message written without a schema); ``int_schema_version`` is the number."""
        meta = self._info.meta
        version = meta.get(META_SCHEMA_VERSION) if meta is not None else None
        return version_bytes(version)

    def int_schema_version(self) -> int:
        """The writer's schema version (WIRE.md R122), or -1 for a message written without a schema."""
        meta = self._info.meta
        version = meta.get(META_SCHEMA_VERSION) if meta is not None else None
        return int(version) if version is not None else NO_SCHEMA_VERSION

    def encryption_context(self) -> EncryptionContext | None:
        """How the message was encrypted (``client.crypto``), or None for a message sent in the clear."""
        from magnetar.client.encryption.crypto import encryption_context_of  # only encrypted topics need it loaded

        return encryption_context_of(self._info.meta)

    def properties(self) -> dict[str, str]:
        props: dict[str, str] = self._record[1]
        return props

    def partition_key(self) -> str:
        """The key the producer gave, or ``""`` (as Pulsar returns) when there was none."""
        key = self._record[2]
        return key if key is not None else ""

    def has_partition_key(self) -> bool:
        return self._record[2] is not None

    def event_timestamp(self) -> int:
        """The producer-given event time in ms, or 0 when none was given (as in Pulsar)."""
        return int(self._record[3])

    def sequence_id(self) -> int:
        return int(self._record[4])

    def publish_timestamp(self) -> int:
        """When the producer sealed the batch, in ms since the epoch."""
        return self._info.publish_time

    def redelivery_count(self) -> int:
        return self._info.redelivery_count

    def message_id(self) -> MessageId:
        """The message's id, carrying the (partition) topic it came from, as pulsar-client's ids do:
        a consumer of several topics acknowledges, negatively acknowledges or seeks by the id alone."""
        info = self._info
        ledger, entry = info.position
        owner = info.owner
        if owner is None:
            return MessageId(-1, ledger, entry, self._index)
        mid = MessageId(owner.partition, ledger, entry, self._index)
        mid.topic_name(owner.topic)
        return mid

    def topic_name(self) -> str:
        owner = self._info.owner
        return owner.topic if owner is not None else ""

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, {len(self.data())} bytes)"
