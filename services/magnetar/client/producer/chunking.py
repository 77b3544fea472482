"""Message chunking on the producer side (Pulsar's PIP-37): cut a message too large for one entry.

Why it lives in the client only: the broker stores every chunk as an ordinary entry (each within
``max_message_size``) and never needs to know that several entries make one message, so a
producer with ``chunking_enabled=True`` can publish messages larger than the broker's limit and
every consumer and reader puts them back together (WIRE.md R41a, R41b; the consumer's side is
``consumer/chunks.py``).

``split_payload``: the message is encoded as a one-record, non-batched entry as usual (one
msgpack, one compression); its payload bytes are then cut into slices of at most
``max_message_size``, and each slice is sent as its own ``send`` with the message's meta plus the
chunk keys ``uuid`` ("<producer name>-<sequence id>", as Pulsar), ``cid``, ``cn`` and ``ts``, and
its own ``crc``. Every chunk carries the message's sequence id, as in Pulsar; the send completes
when the last chunk is stored, with a ``MessageId`` whose ledger and entry are the last chunk's
and whose ``first_chunk`` is the first chunk's (``ChunkBatch``, ``ChunkedSendReceipt``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from magnetar.client.options import Result
from magnetar.client.producer.batch_builder import Batch, SendReceipt, _call
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import META_CHUNK_ID, META_CHUNK_UUID, META_NUM_CHUNKS, META_TOTAL_CHUNK_SIZE, EntryMeta
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.message_id import MessageId


def chunk_uuid(producer_name: str, sequence_id: int) -> str:
    """Pulsar's chunked-message uuid: ``"<producer name>-<sequence id>"``."""
    return f"{producer_name}-{sequence_id}"


def split_payload(meta: EntryMeta, payload: bytes, chunk_size: int, uuid: str) -> list[tuple[EntryMeta, bytes]]:
    """Cut one encoded message into chunks of at most ``chunk_size`` bytes, each with its own meta.

    Each chunk's meta is ``meta`` (the whole message's: sequence id, key, compression, the
    uncompressed size of the whole) with ``n`` 1, ``crc`` of the slice, and the chunk keys. A
    payload that fits in one chunk is still split into one chunk: the caller decides whether to
    chunk at all.
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be positive")
    total = len(payload)
    count = max(1, -(-total // chunk_size))
    view = memoryview(payload)
    chunks: list[tuple[EntryMeta, bytes]] = []
    for cid in range(count):
        piece = bytes(view[cid * chunk_size : (cid + 1) * chunk_size])
        chunk_meta: EntryMeta = {**meta, "n": 1, "crc": crc32c(piece)}
        chunk_meta[META_CHUNK_UUID] = uuid
        chunk_meta[META_CHUNK_ID] = cid
        chunk_meta[META_NUM_CHUNKS] = count
        chunk_meta[META_TOTAL_CHUNK_SIZE] = total
        chunks.append((chunk_meta, piece))
    return chunks


class ChunkBatch(Batch):
    """One chunk of a chunked message, in the producer's in-flight queue like any sealed batch.

    Every chunk but the last counts no message (``count`` 0), so ``pending`` and the blocking
    producer's in-flight count see one message. The last chunk carries the message's callbacks and
    completes it: with the chunked id (its own position, and the first chunk's) when every chunk
    was stored, or with the first failure of an earlier chunk.
    """

    __slots__ = ("chunks",)

    def __init__(self, first_seq: int, opened_at: float, future: asyncio.Future[tuple[int, int, int]]) -> None:
        super().__init__(first_seq, opened_at, future, batched=False)
        # Set on the last chunk only: every chunk of the message, in order (itself last).
        self.chunks: list[ChunkBatch] | None = None

    def _earlier_failure(self) -> MagnetarError | None:
        for chunk in self.chunks or ():
            fut = chunk.future
            if chunk is not self and fut.done() and not fut.cancelled():
                exc = fut.exception()
                if exc is not None:
                    return exc if isinstance(exc, MagnetarError) else MagnetarError(repr(exc))
        return None

    def first_position(self) -> tuple[int, int] | None:
        chunks = self.chunks
        if not chunks:
            return None
        fut = chunks[0].future
        if not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        ledger, entry, _ = fut.result()
        return (ledger, entry)

    def resolve(self, ledger: int, entry: int, partition: int, batched: bool | None = None) -> None:
        if self.chunks is None:  # not the last chunk: only its own future (the last one reads it)
            if not self.future.done():
                self.future.set_result((ledger, entry, partition))
            return
        failure = self._earlier_failure()
        if failure is not None:
            self.fail(failure)
            return
        if not self.future.done():
            self.future.set_result((ledger, entry, partition))
        if self.callbacks:
            mid = MessageId(partition, ledger, entry, -1).with_first_chunk(*(self.first_position() or (ledger, entry)))
            for _, callback in self.callbacks:
                _call(callback, Result.Ok, mid)

    def fail(self, exc: MagnetarError) -> None:
        fut = self.future
        if not fut.done():
            fut.set_exception(exc)
            fut.exception()  # retrieved: the message's receipt reports it, not asyncio
        if self.chunks is not None and self.callbacks:
            for _, callback in self.callbacks:
                _call(callback, exc, None)


class ChunkedSendReceipt(SendReceipt):
    """The receipt of a chunked message: awaits its last chunk, answers the chunked ``MessageId``."""

    __slots__ = ()

    def _chunked_id(self, ledger: int, entry: int, partition: int) -> MessageId:
        batch = self._batch
        assert isinstance(batch, ChunkBatch)
        return MessageId(partition, ledger, entry, -1).with_first_chunk(*(batch.first_position() or (ledger, entry)))

    def __await__(self) -> Generator[Any, None, MessageId]:
        ledger, entry, partition = yield from self._batch.future.__await__()
        return self._chunked_id(ledger, entry, partition)

    def result(self) -> MessageId:
        ledger, entry, partition = self._batch.future.result()
        return self._chunked_id(ledger, entry, partition)


def make_chunk_batches(
    chunks: list[tuple[EntryMeta, bytes]], seq: int, opened_at: float, loop: asyncio.AbstractEventLoop
) -> list[ChunkBatch]:
    """The sealed in-flight batches of one chunked message (the last one counts the message)."""
    batches: list[ChunkBatch] = []
    for meta, payload in chunks:
        batch = ChunkBatch(seq, opened_at, loop.create_future())
        batch.meta = meta
        batch.payload = payload
        batches.append(batch)
    last = batches[-1]
    last.count = 1
    last.chunks = batches
    return batches
