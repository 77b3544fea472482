"""The broker's view of one connected consumer: its permits and its unacknowledged entries.

A consumer of a Shared or Key_Shared subscription that stops acknowledging would otherwise make
the broker remember every entry it was given, without bound. As in Pulsar, such a consumer is
*blocked* once it holds ``max_unacked`` unacknowledged messages (``maxUnackedMessagesPerConsumer``,
50,000 by default): it gets nothing more, whatever its permits, until its acknowledgements bring it
down to half the limit. The count is kept as entries come and go (``UnackedEntries``) because
dispatch checks it for every entry.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.managed_ledger import Position
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.errors import InvalidCommand

# R106: how many consumer properties a subscribe may carry, and how long each key and value may be.
MAX_CONSUMER_PROPERTIES = 64
MAX_CONSUMER_PROPERTY_CHARS = 1024


def consumer_metadata(raw: object) -> dict[str, str]:
    """A subscribe's ``properties`` (WIRE.md R106), checked: a map of short strings, or nothing."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_CONSUMER_PROPERTIES:
        raise InvalidCommand(f"properties must be a map of at most {MAX_CONSUMER_PROPERTIES} entries")
    for k, v in raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidCommand("properties must map strings to strings")
        if len(k) > MAX_CONSUMER_PROPERTY_CHARS or len(v) > MAX_CONSUMER_PROPERTY_CHARS:
            raise InvalidCommand(f"a property key or value is longer than {MAX_CONSUMER_PROPERTY_CHARS} characters")
    return dict(raw)


class MessageSink(Protocol):
    """Where a consumer's messages go: the client connection (kept abstract for tests)."""

    def send_message(
        self,
        consumer_id: int,
        pos: Position,
        meta: EntryMeta,
        payload: bytes,
        redelivery_count: int,
        acked: Sequence[int] | None = None,
    ) -> None:
        """Push one entry; ``acked`` lists the batch indexes the client must not hand out again."""

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        """Failover: tell the consumer it became (or stopped being) the active one."""


class UnackedCount:
    """A subscription's unacked-message total, kept by its consumers' ``UnackedEntries``: the
    subscription limit is checked for every entry dispatched, and summing every consumer's count
    there cost O(consumers) per entry."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages = 0


class UnackedEntries:
    """Entries delivered to one consumer and not yet acknowledged, each with how many of its
    messages are unacknowledged; ``messages`` is their sum, kept current on every change, and so
    is the ``UnackedCount`` of the subscription it is ``share``-d with."""

    __slots__ = ("_entries", "_shared", "messages")

    def __init__(self) -> None:
        self._entries: dict[Position, int] = {}
        self.messages = 0
        self._shared: UnackedCount | None = None

    def share(self, total: UnackedCount | None) -> None:
        """Count into ``total`` from now on (what is held now moves over); None detaches."""
        if self._shared is not None:
            self._shared.messages -= self.messages
        self._shared = total
        if total is not None:
            total.messages += self.messages

    def _add(self, delta: int) -> None:
        self.messages += delta
        if self._shared is not None:
            self._shared.messages += delta

    def __setitem__(self, pos: Position, count: int) -> None:
        self._add(count - self._entries.get(pos, 0))
        self._entries[pos] = count

    def __getitem__(self, pos: Position) -> int:
        return self._entries[pos]

    def pop(self, pos: Position, default: int | None = None) -> int | None:
        count = self._entries.pop(pos, None)
        if count is None:
            return default
        self._add(-count)
        return count

    def clear(self) -> None:
        self._entries.clear()
        self._add(-self.messages)

    def __contains__(self, pos: object) -> bool:
        return pos in self._entries

    def __iter__(self) -> Iterator[Position]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(eq=False, slots=True)
class ServerConsumer:
    consumer_id: int
    name: str
    sink: MessageSink
    permits: int = 0
    # Entries delivered and not yet acknowledged, with how many of their messages are unacked.
    unacked: UnackedEntries = field(default_factory=UnackedEntries)
    msg_out: int = 0
    # Failover and Shared: lower levels are served first (Pulsar's priorityLevel).
    priority_level: int = 0
    # Key_Shared: c.KEY_SHARED_AUTO_SPLIT (None means the same) or c.KEY_SHARED_STICKY with the
    # inclusive hash ranges the consumer declared.
    key_shared_mode: str | None = None
    key_ranges: list[tuple[int, int]] | None = None
    # Key_Shared: lift the recently-joined-consumers rule (the consumer accepts out-of-order keys).
    allow_out_of_order: bool = False
    # The properties the client subscribed with (WIRE.md R106), shown as ``metadata`` in stats.
    metadata: dict[str, str] = field(default_factory=dict)
    # maxUnackedMessagesPerConsumer for this consumer (0: no limit; set by Shared and Key_Shared
    # subscriptions only, as in Pulsar), and whether it is blocked by it now.
    max_unacked: int = 0
    blocked: bool = False

    @property
    def unacked_messages(self) -> int:
        return self.unacked.messages

    @property
    def can_take(self) -> bool:
        """Whether dispatch may give this consumer an entry now: it has permits and is not
        blocked on unacknowledged messages."""
        return self.permits > 0 and not self.blocked

    def check_unblocked(self) -> bool:
        """Lift the block once acknowledgements brought the consumer to half its limit (Pulsar's
        rule); True when it was lifted now."""
        if self.blocked and self.unacked.messages <= self.max_unacked // 2:
            self.blocked = False
            return True
        return False

    def deliver(
        self,
        pos: Position,
        meta: EntryMeta,
        payload: bytes,
        count: int,
        redeliveries: int,
        acked: frozenset[int] | None = None,
    ) -> None:
        """Send one entry. Messages of a batch already acknowledged by index (``acked``) are
        skipped by the client, so they cost no permit and do not count as unacknowledged."""
        pending = count - len(acked) if acked else count
        self.permits -= pending
        self.unacked[pos] = pending
        self.msg_out += pending
        if self.max_unacked > 0 and self.unacked.messages >= self.max_unacked:
            self.blocked = True
        self.sink.send_message(self.consumer_id, pos, meta, payload, redeliveries, sorted(acked) if acked else None)
