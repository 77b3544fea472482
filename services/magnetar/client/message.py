"""Received messages, shaped like ``pulsar.Message``.

A consumer may build hundreds of thousands of these per second, so a ``Message`` is three slots:
the decoded record list (as msgpack produced it, not copied), the ``EntryInfo`` shared by every
message of the same entry, and the batch index. The ``MessageId`` is only built when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.protocol.message_id import MessageId

if TYPE_CHECKING:
    from magnetar.client.consumer import PartitionConsumer


class EntryInfo:
    """What every message of one entry (one stored batch) has in common."""

    __slots__ = ("batched", "count", "epoch", "owner", "position", "publish_time", "redelivery_count", "unacked")

    def __init__(
        self,
        position: tuple[int, int],
        count: int,
        publish_time: int,
        redelivery_count: int,
        owner: PartitionConsumer | None,
        batched: bool,
        epoch: int = 0,
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


class Message:
    """One message as received by a consumer."""

    __slots__ = ("_index", "_info", "_record")

    def __init__(self, record: list[Any], info: EntryInfo, index: int) -> None:
        self._record = record
        self._info = info
        self._index = index

    def data(self) -> bytes:
        """The payload bytes."""
        payload: bytes = self._record[0]
        return payload

    def value(self) -> bytes:
        """The payload decoded by the schema; Magnetar only has the bytes schema, so ``data()``."""
        payload: bytes = self._record[0]
        return payload

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
        info = self._info
        ledger, entry = info.position
        partition = info.owner.partition if info.owner is not None else -1
        return MessageId(ledger, entry, partition, self._index)

    def topic_name(self) -> str:
        owner = self._info.owner
        return owner.topic if owner is not None else ""

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, {len(self.data())} bytes)"
