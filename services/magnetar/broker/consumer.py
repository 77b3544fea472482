"""The broker's view of one connected consumer: its permits and its unacknowledged entries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from magnetar.managed_ledger import Position
from magnetar.protocol.entry import EntryMeta


class MessageSink(Protocol):
    """Where a consumer's messages go: the client connection (kept abstract for tests)."""

    def send_message(
        self, consumer_id: int, pos: Position, meta: EntryMeta, payload: bytes, redelivery_count: int
    ) -> None: ...


@dataclass(eq=False, slots=True)
class ServerConsumer:
    consumer_id: int
    name: str
    sink: MessageSink
    permits: int = 0
    # Entries delivered and not yet acknowledged, with how many messages each holds.
    unacked: dict[Position, int] = field(default_factory=dict)
    msg_out: int = 0

    @property
    def unacked_messages(self) -> int:
        return sum(self.unacked.values())

    def deliver(self, pos: Position, meta: EntryMeta, payload: bytes, count: int, redeliveries: int) -> None:
        self.permits -= count
        self.unacked[pos] = count
        self.msg_out += count
        self.sink.send_message(self.consumer_id, pos, meta, payload, redeliveries)
