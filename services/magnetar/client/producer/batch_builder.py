"""The producer's batch container: records accumulate here until the batch is sealed and sent.

A batch is sealed when it holds ``max_messages`` records, when the next record would take it past
``max_bytes``, or when its delay timer fires (the producer owns the timer). The per-message work is
deliberately tiny — build the record list, append it, add to a byte count — because it runs once
per message at hundreds of thousands of messages per second; everything per batch (msgpack,
compression, CRC) happens once in ``encode``.

Every message of a batch shares the batch's future: the broker answers one ``send_receipt`` per
batch, and a ``SendReceipt`` is just (batch, index), so the client makes no future per message.

A batch also carries what its entry's ``meta`` says about all of its messages (WIRE.md R29): ``key``,
the key a Key_Shared subscription routes the whole entry by, and ``deliver_at``, set only on the
one-message entry of a delayed message (R20e), which is never batched with others (``batched``
False, so its id has batch index -1, as in Pulsar).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any

from magnetar.client.options import Result
from magnetar.protocol.batch import Record, encode_batch
from magnetar.protocol.compression import CompressionType
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.message_id import MessageId

log = logging.getLogger(__name__)

# msgpack overhead of one record besides its payload, at most: list header, bin header (≤5), empty map,
# nil key, two 64-bit ints (9 each). An upper bound keeps batches under max_bytes.
RECORD_OVERHEAD = 24

SendCallback = Callable[[Any, MessageId | None], None]


class Batch:
    """One batch of records, open (accumulating) or in flight (sent, awaiting its receipt)."""

    __slots__ = (
        "batched",
        "callbacks",
        "count",
        "deliver_at",
        "first_seq",
        "future",
        "key",
        "last_seq",
        "meta",
        "nbytes",
        "opened_at",
        "payload",
        "records",
    )

    def __init__(
        self,
        first_seq: int,
        opened_at: float,
        future: asyncio.Future[tuple[int, int, int]],
        *,
        batched: bool = True,
        key: str | None = None,
        deliver_at: int | None = None,
    ) -> None:
        self.records: list[Record] = []
        self.nbytes = 0
        self.count = 0
        self.first_seq = first_seq
        # The sequence id of the last message, as the application sees it: its custom id if it was
        # sent with one (``last_sequence_id()`` follows those, as Pulsar's does), and with
        # key-based batching a batch holds every n-th message, so first_seq + count - 1 is not it.
        # Set as records are added on the special path and when the batch is sealed (``encode``).
        self.last_seq = first_seq
        self.opened_at = opened_at
        self.future = future
        self.callbacks: list[tuple[int, SendCallback]] | None = None
        self.batched = batched
        self.key = key
        self.deliver_at = deliver_at
        # The sealed form, kept until the receipt so the batch can be resent after a reconnect.
        self.meta: EntryMeta | None = None
        self.payload: bytes | None = None

    def add(self, record: Record, size: int) -> int:
        """Append a record; return its index in the batch."""
        records = self.records
        records.append(record)
        self.nbytes += size
        self.count = n = len(records)
        return n - 1

    def has_room(self, size: int, max_messages: int, max_bytes: int) -> bool:
        """Pulsar's rule: a record that would overflow a non-empty batch starts the next batch."""
        return self.count == 0 or (self.count < max_messages and self.nbytes + size <= max_bytes)

    def is_full(self, max_messages: int, max_bytes: int) -> bool:
        return self.count >= max_messages or self.nbytes >= max_bytes

    def encode(
        self, *, producer_name: str, compression: CompressionType, batched: bool | None = None
    ) -> tuple[EntryMeta, bytes]:
        """Seal: msgpack, compress and checksum the records once for the whole batch.

        ``batched`` overrides the batch's own flag (kept for callers that encode a bare batch).
        """
        if batched is not None:
            self.batched = batched
        records = self.records
        meta, payload = encode_batch(
            records,
            producer_name=producer_name,
            first_sequence_id=self.first_seq,
            compression=compression,
            batched=self.batched,
            key=self.key,
            deliver_at=self.deliver_at,
        )
        # Deduplication reads the messages' own sequence ids (custom ones included) from the meta:
        # ``seq`` the first's and, when it is not ``seq + n - 1``, ``hs`` the last's (WIRE.md R40a).
        if records:
            first, last = records[0][4], records[-1][4]
            if first != self.first_seq:
                meta["seq"] = first
            if last != first + len(records) - 1:
                meta["hs"] = last
            self.last_seq = last
        self.records = []  # the payload holds the data now; drop the per-record objects early
        return meta, payload

    def add_callback(self, index: int, callback: SendCallback) -> None:
        if self.callbacks is None:
            self.callbacks = []
        self.callbacks.append((index, callback))

    def resolve(self, ledger: int, entry: int, partition: int, batched: bool | None = None) -> None:
        """Complete every message of the batch; ``batched`` overrides the batch's own flag."""
        if batched is not None:
            self.batched = batched
        if not self.future.done():
            self.future.set_result((ledger, entry, partition))
        if self.callbacks:
            batched = self.batched
            for index, callback in self.callbacks:
                _call(callback, Result.Ok, MessageId(partition, ledger, entry, index if batched else -1))

    def fail(self, exc: MagnetarError) -> None:
        fut = self.future
        if not fut.done():
            fut.set_exception(exc)
            # Mark it retrieved: a fire-and-forget sender that never awaits its receipts has chosen
            # not to hear about failures, and asyncio's "never retrieved" warning would be noise.
            fut.exception()
        if self.callbacks:
            for _, callback in self.callbacks:
                _call(callback, exc, None)


def _call(callback: SendCallback, result: Any, msg_id: MessageId | None) -> None:
    try:
        callback(result, msg_id)
    except Exception:
        log.exception("send callback raised")


class SendReceipt:
    """Awaitable outcome of one pipelined send: ``msg_id = await receipt``.

    Costs one small object per message; the future it waits on belongs to the whole batch.
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.future.done()

    def batch_future(self) -> asyncio.Future[tuple[int, int, int]]:
        """The future of the whole batch this message went out in: ``(ledger, entry, partition)``.

        Waiting on it costs nothing per message (no ``MessageId`` is built), which is what a
        benchmark that tracks the latency of every message wants.
        """
        return self._batch.future

    def __await__(self) -> Generator[Any, None, MessageId]:
        ledger, entry, partition = yield from self._batch.future.__await__()
        return MessageId(partition, ledger, entry, self._index)

    def result(self) -> MessageId:
        """The message id, once ``done()``; raises the send's error if it failed."""
        ledger, entry, partition = self._batch.future.result()
        return MessageId(partition, ledger, entry, self._index)


class KeyedBatches:
    """The open batches of key-based batching (Pulsar's ``BatchingType.KeyBased``): one per key.

    Messages are grouped by key (ordering key, else partition key; the messages without one form
    one more group), so each sealed entry holds one key and a Key_Shared subscription can route
    every message by it. The limits (``batching_max_messages``, bytes, delay) apply to all the
    groups together, as in Pulsar's ``BatchMessageKeyBasedContainer``: when they are reached every
    group is sealed, in the order of its first message, which is also sequence-id order, the order
    the broker's receipts come back in.
    """

    __slots__ = ("batches", "count", "nbytes")

    def __init__(self) -> None:
        self.batches: dict[str | None, Batch] = {}
        self.count = 0
        self.nbytes = 0

    def take(self) -> list[Batch]:
        """Every open batch, oldest first (a dict keeps the order keys first arrived in); then empty."""
        batches = list(self.batches.values())
        self.batches = {}
        self.count = 0
        self.nbytes = 0
        return batches
