"""Message chunking on the consumer side (Pulsar's PIP-37): put a chunked message back together.

A producer with ``chunking_enabled=True`` cuts a message too large for one entry into chunks, each
stored as an ordinary entry (``producer/chunking.py``, WIRE.md R41a, R41b); every consumer and
reader reassembles them here. ``ChunkAssembler`` is pure and loop-free; the partition consumer
drives it (``chunk_receipt.py``). Chunks are buffered per ``uuid`` until the last one arrives, so
chunks of several producers may interleave. The rules are the Pulsar client's
(``ConsumerImpl.processMessageChunk``):

- at most ``max_pending_chunked_message`` incomplete messages are buffered (0: no limit); a new
  one beyond that drops the oldest, whose chunks are acknowledged when
  ``auto_ack_oldest_chunked_message_on_queue_full`` is set and otherwise left unacknowledged (the
  broker redelivers them: on reconnect, or at once with an ack timeout);
- an incomplete message older than ``expire_time_of_incomplete_chunked_message_ms`` (its first
  chunk's arrival) is dropped and its chunks acknowledged, so a producer that died half way
  leaves nothing behind and the consumer carries on;
- a chunk 0 for a message already being assembled restarts it: a redelivery (same position) keeps
  the earlier chunks unacknowledged, a producer's resend after a reconnect (another position)
  acknowledges the abandoned copies (Pulsar's Java client does the same);
- a chunk already seen (a resend stored twice) is acknowledged and skipped, also once its message
  was completed (the last ``_COMPLETED_MEMORY`` message uuids are remembered for that);
- a chunk with no message being assembled (its first chunk was lost, or skipped before a start
  position) is dropped: acknowledged when its publish time is older than the expiry, otherwise
  left unacknowledged to be redelivered, as Pulsar's client does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from magnetar.client.message import EntryInfo, Message
from magnetar.protocol.entry import META_CHUNK_ID, META_CHUNK_UUID, META_NUM_CHUNKS, META_TOTAL_CHUNK_SIZE, EntryMeta
from magnetar.protocol.message_id import MessageId

Position = tuple[int, int]

# How many completed message uuids the assembler remembers, to recognise their stray duplicate chunks.
_COMPLETED_MEMORY = 1024


class ChunkedMessage(Message):
    """A reassembled message: ``data()`` is the whole payload, its id a chunked ``MessageId``.

    ``_info.position`` is the last chunk's (acks, nacks and ack timeouts go by it; the consumer
    expands it to every chunk); ``_first`` is the first chunk's.
    """

    __slots__ = ("_first",)

    def __init__(self, record: list[Any], info: EntryInfo, first: Position) -> None:
        super().__init__(record, info, -1)
        self._first = first

    def message_id(self) -> MessageId:
        return super().message_id().with_first_chunk(*self._first)


@dataclass(slots=True)
class AssembledMessage:
    """A message whose every chunk arrived: the first chunk's meta, the whole payload, the chunks' positions."""

    meta: EntryMeta
    payload: bytes
    positions: list[Position]


@dataclass(slots=True)
class ChunkOutcome:
    """What the consumer does after one chunk: deliver ``message``, acknowledge ``ack``, and leave
    ``untracked`` unacknowledged (to be redelivered: Pulsar's ``trackMessage``)."""

    message: AssembledMessage | None = None
    ack: list[Position] = field(default_factory=list)
    untracked: list[Position] = field(default_factory=list)


class _Pending:
    """One message being assembled."""

    __slots__ = ("meta", "num_chunks", "parts", "positions", "received_at", "total_size")

    def __init__(self, meta: EntryMeta, num_chunks: int, total_size: int | None, received_at: float) -> None:
        self.meta = meta
        self.num_chunks = num_chunks
        self.total_size = total_size
        self.received_at = received_at
        self.parts: list[bytes] = []
        self.positions: list[Position] = []


def is_chunk(meta: EntryMeta) -> bool:
    """Whether an entry is a chunk of a larger message (a one-chunk message is not)."""
    return int(meta.get(META_NUM_CHUNKS, 1)) > 1


class ChunkAssembler:
    """Buffers chunks per message uuid until complete (see the module docstring for the rules).

    ``now`` is the caller's monotonic clock in seconds (the consumer's loop time), ``wall_ms`` the
    wall clock in ms (compared with a chunk's publish time). Nothing here does I/O.
    """

    def __init__(self, max_pending: int = 10, expire_ms: int = 60_000, auto_ack_oldest: bool = False) -> None:
        self.max_pending = max_pending
        self.expire_ms = expire_ms
        self.auto_ack_oldest = auto_ack_oldest
        self._pending: dict[str, _Pending] = {}  # oldest first (insertion order)
        self._completed: dict[str, None] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def clear(self) -> None:
        """Forget every incomplete message (after a seek: everything comes again from the new position)."""
        self._pending.clear()

    def add(self, meta: EntryMeta, position: Position, payload: bytes, now: float, wall_ms: int) -> ChunkOutcome:
        """Take one chunk (its crc already checked); the outcome says what to deliver, ack and leave."""
        out = ChunkOutcome()
        uuid = str(meta[META_CHUNK_UUID])
        cid = int(meta[META_CHUNK_ID])
        pending = self._pending.get(uuid)
        if cid == 0:
            if pending is not None:
                del self._pending[uuid]
                if pending.positions and pending.positions[0] != position:
                    out.ack.extend(pending.positions)  # a resent copy supersedes the abandoned one
            self._make_room(out)
            total = meta.get(META_TOTAL_CHUNK_SIZE)
            pending = _Pending(meta, int(meta[META_NUM_CHUNKS]), None if total is None else int(total), now)
            self._pending[uuid] = pending
        elif pending is None:
            if uuid in self._completed:
                out.ack.append(position)  # a stray copy of a chunk of a message already assembled
            elif self.expire_ms > 0 and wall_ms > int(meta.get("pt", 0)) + self.expire_ms:
                out.ack.append(position)
            else:
                out.untracked.append(position)
            return out
        elif cid != len(pending.parts):
            if cid < len(pending.parts):
                if pending.positions[cid] != position:
                    out.ack.append(position)  # the same chunk stored twice: drop the copy
                return out
            # A gap: a chunk went missing. The message cannot be completed from here.
            del self._pending[uuid]
            out.untracked.extend(pending.positions)
            out.untracked.append(position)
            return out
        pending.parts.append(payload)
        pending.positions.append(position)
        if len(pending.parts) < pending.num_chunks:
            return out
        del self._pending[uuid]
        self._remember(uuid)
        whole = b"".join(pending.parts)
        if pending.total_size is not None and len(whole) != pending.total_size:
            out.untracked.extend(pending.positions)  # inconsistent: have it delivered again
            return out
        out.message = AssembledMessage(pending.meta, whole, pending.positions)
        return out

    def _make_room(self, out: ChunkOutcome) -> None:
        """Drop the oldest incomplete messages so that one more fits under ``max_pending``."""
        limit = self.max_pending
        if limit <= 0:
            return
        pending = self._pending
        target = out.ack if self.auto_ack_oldest else out.untracked
        while len(pending) >= limit:
            oldest = next(iter(pending))
            target.extend(pending.pop(oldest).positions)

    def _remember(self, uuid: str) -> None:
        completed = self._completed
        completed[uuid] = None
        if len(completed) > _COMPLETED_MEMORY:
            del completed[next(iter(completed))]

    def expire(self, now: float) -> list[Position]:
        """Drop the incomplete messages whose first chunk came ``expire_ms`` or more ago; their chunks, to ack."""
        if self.expire_ms <= 0:
            return []
        limit = now - self.expire_ms / 1000.0
        out: list[Position] = []
        pending = self._pending
        while pending:
            uuid = next(iter(pending))
            if pending[uuid].received_at > limit:
                break
            out.extend(pending.pop(uuid).positions)
        return out

    def next_expiry(self) -> float | None:
        """When the oldest incomplete message expires (None: nothing pending, or no expiry)."""
        if self.expire_ms <= 0 or not self._pending:
            return None
        oldest = next(iter(self._pending.values()))
        return oldest.received_at + self.expire_ms / 1000.0
