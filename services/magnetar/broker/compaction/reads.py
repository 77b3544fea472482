"""Read-compacted subscriptions: the compacted view first, then the topic after the horizon.

A subscription whose consumer subscribed with ``read_compacted`` (WIRE.md R46b; Exclusive or
Failover only, as Pulsar) gets a ``CompactedReads`` as ``Subscription.compacted``. While its read
position is at or before the horizon of the topic's current view, the dispatcher reads the
survivors at or after that position from the compacted ledger (``read``); past the last survivor
its read position jumps to just after the horizon and it reads the topic as usual. The read
position is an original position throughout, so acknowledgements, redeliveries (``read_positions``)
and seeks (``seek_mark_delete``) use the topic's ids. A survivor's ledger may have been trimmed
since it was compacted: the read position then points into a ledger that no longer exists, which
only the view is asked about.

Two rules make a compacted subscription's cursor behave:

* messages compacted away are not in its view, so they are treated as consumed: once every
  survivor up to some point is acknowledged the mark-delete position moves up to the next
  survivor, and to the horizon after the last one (``after_ack``), so a compacted subscription
  does not hold back trimming (nor show a backlog) for messages it will never receive;
* a subscription that starts from the earliest message and has consumed nothing starts before
  every survivor (mark-delete ``-1:-1``), also those whose ledgers were trimmed
  (``attach``; Pulsar's readFromEarliest).
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.broker.compaction.controller import CompactedTopic, TopicCompaction
from magnetar.broker.compaction.view import removed_indexes
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.managed_ledger import Position
from magnetar.managed_ledger.position import EARLIEST
from magnetar.protocol import commands as c
from magnetar.protocol.entry import decode_entry
from magnetar.protocol.errors import InvalidCommand
from magnetar.protocol.topic_name import TopicName

READ_COMPACTED_TYPES = (c.SUB_EXCLUSIVE, c.SUB_FAILOVER)


def check_read_compacted(name: TopicName, sub_type: str) -> None:
    """Pulsar allows ``readCompacted`` only on persistent topics, for Exclusive and Failover."""
    if not name.is_persistent or sub_type not in READ_COMPACTED_TYPES:
        raise InvalidCommand("Read compacted can only be used with exclusive or failover persistent subscriptions")


def _after(pos: Position) -> Position:
    return Position(pos.ledger_id, pos.entry_id + 1)


class CompactedReads:
    def __init__(self, compaction: TopicCompaction, sub: Subscription) -> None:
        self.compaction = compaction
        self.sub = sub

    def covers(self, pos: Position) -> bool:
        """Whether a read at ``pos`` is served from the compacted view."""
        view = self.compaction.view
        return view is not None and pos <= view.horizon

    async def read(self, start: Position, budget: int) -> tuple[list[tuple[Position, bytes]], Position]:
        """Survivors from ``start`` (without those acknowledged or already out) and the read
        position after them: past the last survivor, the topic entry after the horizon."""
        view = self.compaction.view
        if view is None:
            return [], start
        got = await view.read_from(start, budget)
        if not got:
            return [], max(start, self.sub.ml.next_position(view.horizon))
        sub = self.sub
        fresh = [
            (pos, data)
            for pos, data in got
            if not sub.cursor.is_acked(pos) and pos not in sub.owner and pos not in sub.redeliver
        ]
        return fresh, _after(got[-1][0])

    async def read_positions(self, positions: Sequence[Position]) -> list[tuple[Position, bytes]]:
        """Replays: survivors from the view, anything else (after the horizon, or delivered from
        the topic before a compaction) from the topic."""
        view = self.compaction.view
        found = await view.read_at(positions) if view is not None else {}
        ml = self.sub.ml
        for pos in positions:
            if pos not in found and ml.is_readable(pos):
                got = await ml.read_entries(pos, 1)
                if got and got[0][0] == pos:
                    found[pos] = got[0][1]
        return sorted(found.items())

    def after_ack(self) -> None:
        """Move the mark-delete position over what the view does not hold (module docstring)."""
        view = self.compaction.view
        if view is None or view.loaded_index is None:
            return
        cursor = self.sub.cursor
        while cursor.mark_delete < view.horizon:
            nxt = view.first_after(cursor.mark_delete)
            if nxt is None or nxt > view.horizon:
                cursor.ack_cumulative(view.horizon)
                return
            if nxt not in cursor.acked:
                return
            cursor.ack_cumulative(nxt)

    def rewound(self, mark_delete: Position) -> None:
        """After a seek: read again from just after ``mark_delete`` (maybe in a trimmed ledger)."""
        start = _after(mark_delete)
        if self.covers(start):
            self.sub.cursor.read_position = start


async def attach(topic: CompactedTopic, sub: Subscription, read_compacted: bool, from_earliest: bool) -> None:
    """A consumer joined ``sub``: give it the compacted view if it asked for it (module docstring)."""
    compaction = topic.compaction
    if not read_compacted or compaction is None:
        if len(sub.dispatcher.consumers) <= 1:
            sub.compacted = None
        return
    reads = CompactedReads(compaction, sub)
    sub.compacted = reads
    cursor = sub.cursor
    if not cursor.durable:
        # A reader still in the compacted view reads survivors from it even after the topic's
        # ledgers before the horizon are trimmed: trimming must not move it past them.
        cursor.keeps_position_on_trim = lambda: reads.covers(_after(cursor.mark_delete))
    if compaction.view is None:
        return
    if (
        from_earliest
        and cursor.mark_delete == topic.ml.first_position
        and not cursor.acked
        and not cursor.partial
        and not sub.owner
    ):
        await cursor.reset(EARLIEST)
    start = _after(cursor.mark_delete)
    if reads.covers(start) and start < cursor.read_position:
        cursor.read_position = start
    sub.schedule()


def seek_mark_delete(sub: Subscription, pos: Position) -> Position | None:
    """Where a seek to ``pos`` puts a compacted subscription's mark-delete position, when the
    view serves it (None: seek as usual)."""
    reads = sub.compacted
    if reads is None or not reads.covers(pos):
        return None
    return EARLIEST if pos.ledger_id < 0 else Position(pos.ledger_id, pos.entry_id - 1)


async def last_message_id(topic: CompactedTopic, sub: Subscription) -> tuple[int, int, int] | None:
    """``get_last_message_id`` for a compacted subscription when nothing follows the horizon:
    the last survivor (or none), since what the topic holds after it was compacted away
    (None: answer as usual)."""
    reads = sub.compacted
    view = topic.compaction.view if topic.compaction is not None else None
    if reads is None or view is None or topic.ml.last_confirmed > view.horizon:
        return None
    last = await view.last()
    if last is None:
        return -1, -1, -1
    pos, stored = last
    meta, _ = decode_entry(stored)
    batch = -1
    if meta.get("b"):
        dropped = removed_indexes(meta)
        batch = max(i for i in range(int(meta.get("n", 1))) if i not in dropped)
    return pos.ledger_id, pos.entry_id, batch
