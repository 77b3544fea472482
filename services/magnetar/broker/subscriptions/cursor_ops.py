"""Admin operations on a subscription's position: Pulsar's reset-cursor, skip, clear-backlog,
expire-messages and peek, run on the broker that owns the topic (the admin API forwards there).

Everything goes through the subscription, never around it, so that its dispatch state stays
right: moving the mark-delete position anywhere (reset, clear-backlog) is ``Subscription.reset``,
which also takes back what its consumers hold unacknowledged; acknowledging some entries (skip,
expire) is ``Subscription.ack_positions``, which acknowledges them on behalf of no consumer. The
one exception: when ``skip`` ends inside a batched entry, the messages it covers are acknowledged
by batch index on the cursor directly (``ManagedCursor.ack_batch_indexes``).

Choices, where Pulsar leaves room:

- ``skip N`` counts messages (a batched entry of n messages counts n; indexes already
  acknowledged do not count), where Pulsar's cursor skips entries.
- ``expire T`` acknowledges every entry whose publish time is older than now - T (found by
  ``managed_ledger.search``, as the publish-time seek): the mark-delete position moves forward
  and individual acknowledgements after it stay, as with Pulsar's expiry monitor.
- ``peek N`` returns the N-th unacknowledged *message* (Pulsar returns the whole N-th entry
  and leaves splitting the batch to the admin client): entries and batch indexes already
  acknowledged are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.policies.targets import PolicySubscription
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.managed_ledger.search import first_reaching
from magnetar.protocol.batch import decode_batch
from magnetar.protocol.entry import META_ENCRYPTION_KEYS, EntryMeta, decode_entry
from magnetar.protocol.errors import InvalidCommand, NotFound

if TYPE_CHECKING:
    from magnetar.broker.subscriptions.subscription import Subscription

# Pulsar's MessageId.latest: ledger and entry ids of Long.MAX_VALUE.
LATEST_ID = 2**63 - 1
# Positions acknowledged per call when skipping or expiring a long backlog.
ACK_CHUNK = 10_000


class SubscriptionNotFound(NotFound):
    """HTTP 404 with Pulsar's wording."""


class SubscribedTopic(Protocol):
    """A persistent topic as the verbs see it (``topics.PersistentTopic``; the topics package sits
    above this one)."""

    @property
    def name(self) -> str: ...
    @property
    def subscriptions(self) -> Mapping[str, Subscription]: ...


def subscription_of(topic: SubscribedTopic, name: str) -> Subscription:
    sub = topic.subscriptions.get(name)
    if sub is None:
        raise SubscriptionNotFound(f"Subscription {name} not found for topic {topic.name}")
    return sub


def publish_time(data: bytes) -> int:
    """The publish time (ms) of a stored entry; 0 when the producer recorded none."""
    meta, _ = decode_entry(data)
    return int(meta.get("pt", 0))


async def first_published_at_or_after(ml: ManagedLedger, timestamp_ms: int) -> Position | None:
    """The first entry published at or after ``timestamp_ms`` (see ``managed_ledger.search``)."""
    return await first_reaching(ml, publish_time, int(timestamp_ms))


def position_before(pos: Position) -> Position:
    """The mark-delete position that makes ``pos`` the next entry to deliver."""
    return Position(pos.ledger_id, pos.entry_id - 1)


async def mark_delete_for_publish_time(ml: ManagedLedger, timestamp_ms: int) -> Position:
    """Where to put the mark-delete position so that delivery starts at the first entry
    published at or after ``timestamp_ms`` (the end of the topic when there is none)."""
    first = await first_published_at_or_after(ml, timestamp_ms)
    return ml.last_confirmed if first is None else position_before(first)


# ---------------------------------------------------------------------------------- reset


async def reset_to_timestamp(sub: Subscription, timestamp_ms: int) -> Position:
    md = await mark_delete_for_publish_time(sub.ml, timestamp_ms)
    await sub.reset(md)
    return md


async def reset_to_message_id(sub: Subscription, ledger: int, entry: int, *, excluded: bool = False) -> Position:
    """Deliver again from message ``ledger:entry`` (after it when ``excluded``); ``-1:-1`` is
    the earliest message and Pulsar's ``MessageId.latest`` the end."""
    ml = sub.ml
    if ledger < 0:
        md = ml.first_position
    elif ledger >= LATEST_ID:
        md = ml.last_confirmed
    else:
        md = Position(ledger, entry) if excluded else position_before(Position(ledger, entry))
    await sub.reset(md)
    return md


# ---------------------------------------------------------------------------------- skip / expire


async def _ack_all(sub: PolicySubscription, positions: list[Position]) -> None:
    for i in range(0, len(positions), ACK_CHUNK):
        await sub.ack_positions(positions[i : i + ACK_CHUNK])


async def skip(sub: Subscription, messages: int) -> int:
    """Acknowledge the next ``messages`` unacknowledged messages; returns how many were."""
    if messages < 0:
        raise InvalidCommand(f"the number of messages to skip must not be negative, got {messages}")
    ml, cursor = sub.ml, sub.cursor
    remaining = messages
    pending: list[Position] = []
    pos = ml.next_position(cursor.mark_delete)
    while remaining > 0 and ml.is_readable(pos):
        if not cursor.is_acked(pos):
            total = ml.messages_of(pos)
            done = cursor.acked_indexes(pos) or frozenset()
            left = [i for i in range(total) if i not in done]
            if len(left) <= remaining:
                pending.append(pos)
                remaining -= len(left)
            else:
                cursor.ack_batch_indexes(pos, total, left[:remaining])
                remaining = 0
        if len(pending) >= ACK_CHUNK:
            await _ack_all(sub, pending)
            pending = []
        pos = ml.next_position(pos)
    await _ack_all(sub, pending)
    await cursor.ack([])  # durable, batch-index part included
    return messages - remaining


async def skip_all(sub: Subscription) -> None:
    """Clear the backlog: everything published so far is acknowledged."""
    await sub.reset(sub.ml.last_confirmed)


async def expire(sub: PolicySubscription, expire_seconds: int, now_ms: int, *, count: bool = True) -> int:
    """Acknowledge every entry published more than ``expire_seconds`` before ``now_ms``;
    returns how many entries that acknowledged. The messages count in the subscription's
    expiry stats (``totalMsgExpired``) unless ``count`` is False (backlog quota eviction).

    It asks of ``sub`` only what the policies know of a subscription (``policies.targets``), since
    TTL and the backlog quota run it too, handed to them as an ``ExpireMessages``."""
    if expire_seconds < 0:
        raise InvalidCommand(f"the expiry time must not be negative, got {expire_seconds}")
    ml, cursor = sub.ml, sub.cursor
    upto = await mark_delete_for_publish_time(ml, now_ms - expire_seconds * 1000)
    pending: list[Position] = []
    acked = 0
    # Counted from what this call acknowledges (messages of each entry, less batch indexes already
    # acknowledged) and recorded as the acks are issued: the cursor applies an ack at once and
    # then persists it, so stats read meanwhile see the expiry together with the smaller backlog.
    messages = 0

    async def ack(positions: list[Position]) -> None:
        nonlocal messages
        if count:
            sub.expiry.record(messages, now_ms)
        messages = 0
        await _ack_all(sub, positions)

    pos = ml.next_position(cursor.mark_delete)
    while pos <= upto and ml.is_readable(pos):
        if not cursor.is_acked(pos):
            pending.append(pos)
            partial = cursor.partial.get(pos)
            messages += ml.messages_of(pos) - (len(partial[1]) if partial else 0)
        if len(pending) >= ACK_CHUNK:
            await ack(pending)
            acked += len(pending)
            pending = []
        pos = ml.next_position(pos)
    await ack(pending)
    return acked + len(pending)


# ---------------------------------------------------------------------------------- peek


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    position: Position
    batch_index: int  # -1 when the message was not sent in a batch
    meta: EntryMeta
    payload: bytes
    properties: dict[str, str]
    partition_key: str | None
    event_time: int
    sequence_id: int
    null_value: bool = False  # sent as ``producer.send(None)`` (WIRE.md R98); ``payload`` is then b""


async def peek(sub: Subscription, n: int) -> PeekedMessage:
    """The ``n``-th (1-based) unacknowledged message of the subscription."""
    if n < 1:
        raise InvalidCommand(f"the message position must be at least 1, got {n}")
    ml, cursor = sub.ml, sub.cursor
    seen = 0
    pos = ml.next_position(cursor.mark_delete)
    while ml.is_readable(pos):
        if not cursor.is_acked(pos):
            done = cursor.acked_indexes(pos) or frozenset()
            unacked = ml.messages_of(pos) - len(done)
            if seen + unacked >= n:
                return await _message_of(ml, pos, n - seen, done)
            seen += unacked
        pos = ml.next_position(pos)
    raise NotFound("Message not found")


async def _message_of(ml: ManagedLedger, pos: Position, k: int, done: frozenset[int]) -> PeekedMessage:
    """The ``k``-th (1-based) message of entry ``pos`` not among the ``done`` indexes."""
    got = await ml.read_entries(pos, 1)
    if not got or got[0][0] != pos:
        raise NotFound("Message not found")
    meta, payload = decode_entry(got[0][1])
    if int(meta.get("cn", 1)) > 1:
        # One chunk of a chunked message (WIRE.md R41a): a slice of the whole message's payload,
        # which no record decodes on its own. Peeked raw, as Pulsar returns chunks.
        if k > 1:
            raise NotFound("Message not found")
        key = meta.get("k")
        return PeekedMessage(pos, -1, meta, bytes(payload), {}, key, 0, int(meta.get("seq", 0)))
    if META_ENCRYPTION_KEYS in meta:
        # End-to-end encrypted (WIRE.md R116): the broker cannot split or read it; the whole entry
        # is peeked as one message, still encrypted, as Pulsar peeks an encrypted batch.
        key = meta.get("k")
        return PeekedMessage(pos, -1, meta, bytes(payload), {}, key, 0, int(meta.get("seq", 0)))
    records = decode_batch(meta, payload)
    live = [i for i in range(len(records)) if i not in done]
    if k > len(live):
        raise NotFound("Message not found")
    index = live[k - 1]
    body, properties, partition_key, event_time, sequence_id = records[index][:5]
    return PeekedMessage(
        pos,
        index if meta.get("b", True) else -1,
        meta,
        bytes(body) if body is not None else b"",
        {str(key): str(value) for key, value in (properties or {}).items()},
        partition_key,
        int(event_time or 0),
        int(sequence_id),
        body is None,
    )
