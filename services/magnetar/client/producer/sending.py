"""The send path of a partition producer: batching, sealing, the in-flight queue, back-pressure.

Hot path per message (``send_nowait``): a size check, ``[payload, props, key, ts, seq]`` appended
to the open batch, and a two-slot ``SendReceipt``. No task and no future per message. A batch is
sealed (one msgpack, compression, CRC, encryption) when it is full by count or bytes, when its
delay has passed, or when something must go after it in order; sealed, it joins the in-flight
queue and is written if the producer is attached (``receipts.py`` takes it off again).

Entry keys and delayed messages (WIRE.md R29, R20e): each entry's ``meta.k`` is the key a
Key_Shared subscription routes it by — the ordering key of a message if it has one, else its
partition key; for a default batch of mixed keys the first key in it (so the batch goes whole to one
consumer, as Pulsar's default batcher does), and with ``BatchingType.KeyBased`` every batch holds
one key (``batch_builder.KeyedBatches``). A message with ``deliver_at`` / ``deliver_after`` goes
alone in its entry (``meta.dt``), after the open batch is sealed so that send order is kept. With
chunking, a message too large for one entry is cut into chunks (``chunking.py``).
"""

from __future__ import annotations

import asyncio

from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.producer.batch_builder import RECORD_OVERHEAD, Batch, KeyedBatches, SendCallback, SendReceipt
from magnetar.client.producer.chunking import ChunkedSendReceipt, chunk_uuid, make_chunk_batches, split_payload
from magnetar.client.producer.config import MessageOptions
from magnetar.client.producer.partition_state import PartitionProducerState
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.errors import MagnetarError, MessageTooLarge

# Shared by every record sent without properties (records are packed, never mutated).
_NO_PROPERTIES: dict[str, str] = {}


class Sending(PartitionProducerState):
    """Takes messages into batches, seals them and puts them in flight."""

    def send_nowait(
        self,
        content: bytes | None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
        callback: SendCallback | None = None,
        *,
        options: MessageOptions | None = None,
        check_capacity: bool = True,
    ) -> SendReceipt:
        """Add a message to the open batch without waiting; raises if refused.

        ``options`` (``message_options``) carries the rarely used ordering key, custom sequence id
        and deliver-at time; a message with any of them, and every message of a key-based batching
        producer, takes ``_send_special``.

        This is the per-message hot path: keep it to checks, one list append and counters.
        """
        if self._closed is not None:
            raise self._closed
        # check_content, inlined: this runs once per message. None is a null value (``has_null_value``).
        if type(content) is not bytes and content is not None and not isinstance(content, bytearray | memoryview):
            raise TypeError(f"Invalid record obj of type {type(content)} - expected type is {bytes}")
        if callback is not None and not callable(callback):
            raise TypeError(f"send callback must be callable(result, msg_id), not {type(callback).__name__}")
        size = len(content) if content is not None else 0
        if size > self._max_message_size and not self._chunking:
            raise MessageTooLarge(
                f"message of {size} bytes exceeds the broker's max_message_size of {self._max_message_size}"
            )
        if check_capacity and self.pending >= self.max_pending:
            raise ProducerQueueIsFull(f"{self.pending} messages pending (max_pending_messages)")
        size += RECORD_OVERHEAD
        if properties:
            for k, v in properties.items():
                size += len(k) + len(v) + 2
        else:
            properties = _NO_PROPERTIES
        # With chunking, a message that may not fit one entry (even compressed) is encoded now and
        # sent whole or in chunks; the margin covers compression that grows incompressible bytes.
        if self._chunking and size + (size >> 7) + 64 > self._max_message_size:
            return self._send_chunked(content, properties, partition_key, event_timestamp, callback, options)
        if options is not None or self._keyed is not None:
            return self._send_special(content, properties, partition_key, event_timestamp, callback, size, options)
        batch = self._batch
        if batch is None:
            batch = self._open_batch()
        elif batch.nbytes + size > self._max_bytes:  # (a full batch by count was sealed already)
            self._seal()
            batch = self._open_batch()
        if partition_key is not None and batch.key is None:
            batch.key = partition_key  # the first key of the batch routes it (WIRE.md R29)
        seq = self._next_seq
        self._next_seq = seq + 1
        records = batch.records
        records.append([content, properties, partition_key, event_timestamp or 0, seq])
        batch.count = n = len(records)
        batch.nbytes += size
        self.pending += 1
        if callback is not None:
            batch.add_callback(n - 1, callback)
        if n >= self._max_messages or batch.nbytes >= self._max_bytes:
            self._seal()
        return SendReceipt(batch, n - 1 if self._batching else -1)

    def _send_special(
        self,
        content: bytes | None,
        properties: dict[str, str],
        partition_key: str | None,
        event_timestamp: int | None,
        callback: SendCallback | None,
        size: int,
        options: MessageOptions | None,
    ) -> SendReceipt:
        """``send_nowait`` for a message with options, or under key-based batching (checks done).

        The key is the ordering key, else the partition key. A delayed message goes alone in its
        entry (sealed at once, after what was open); under key-based batching the message joins its
        key's batch; otherwise the open batch, as on the hot path. A custom sequence id goes in the
        record (what consumers see); the producer's own counter still numbers the ``send`` frames,
        by which receipts are matched. The ordering key, when given, is the record's sixth item.
        """
        ordering_key, sequence_id, deliver_at = options if options is not None else (None, None, None)
        key = partition_key if ordering_key is None else ordering_key
        keyed = self._keyed
        if deliver_at is not None:
            batch = self._open_delayed(key, deliver_at)
        elif keyed is not None:
            batch = self._open_keyed(keyed, key, size)
        else:
            open_batch = self._batch
            if open_batch is None:
                batch = self._open_batch()
            elif open_batch.nbytes + size > self._max_bytes:
                self._seal()
                batch = self._open_batch()
            else:
                batch = open_batch
            if key is not None and batch.key is None:
                batch.key = key
        seq = self._next_seq
        self._next_seq = seq + 1
        record = [content, properties, partition_key, event_timestamp or 0, seq if sequence_id is None else sequence_id]
        if ordering_key is not None:
            record.append(ordering_key)
        records = batch.records
        records.append(record)
        batch.count = n = len(records)
        batch.nbytes += size
        batch.last_seq = seq if sequence_id is None else sequence_id  # a custom id is the one dedup sees
        self.pending += 1
        if callback is not None:
            batch.add_callback(n - 1, callback)
        if deliver_at is not None:
            self._seal_batch(batch)
            return SendReceipt(batch, -1)
        if keyed is not None:
            keyed.count += 1
            keyed.nbytes += size
            if keyed.count >= self._max_messages or keyed.nbytes >= self._max_bytes:
                self._seal()
        elif n >= self._max_messages or batch.nbytes >= self._max_bytes:
            self._seal()
        return SendReceipt(batch, n - 1 if self._batching else -1)

    def _send_chunked(
        self,
        content: bytes | None,
        properties: dict[str, str],
        partition_key: str | None,
        event_timestamp: int | None,
        callback: SendCallback | None,
        options: MessageOptions | None,
    ) -> SendReceipt:
        """A message that may exceed ``max_message_size``, with chunking on (checks done).

        Encoded at once as a one-record entry (the producer does not batch); if the payload fits it
        goes as that one entry, otherwise as chunks (``chunking.split_payload``) that share its
        sequence id and count as one pending message. Whatever was open is sealed first, so send
        order is kept. The receipt answers the chunked ``MessageId`` (last chunk, and first chunk).
        """
        ordering_key, sequence_id, deliver_at = options if options is not None else (None, None, None)
        key = partition_key if ordering_key is None else ordering_key
        self._seal()
        seq = self._next_seq
        record = [content, properties, partition_key, event_timestamp or 0, seq if sequence_id is None else sequence_id]
        if ordering_key is not None:
            record.append(ordering_key)
        try:
            meta, payload = encode_batch(
                [record],
                producer_name=self.producer_name,
                first_sequence_id=seq,
                compression=self._compression,
                batched=False,
                key=key,
                deliver_at=deliver_at,
            )
        except (TypeError, ValueError) as exc:  # e.g. a property value msgpack cannot encode
            raise MagnetarError(f"cannot encode message: {exc}") from exc
        if self._schema is not None:  # every chunk copies it from here (R122)
            self._schema.stamp(meta)
        if self._cfg.encryptor is not None:  # the whole message, before it is cut into chunks
            payload = self._cfg.encryptor.seal(meta, payload)
        if sequence_id is not None:  # the message's own sequence id, for deduplication (as ``Batch.encode``)
            meta["seq"] = sequence_id
        self._next_seq = seq + 1
        now = self._loop.time()
        batches: list[Batch]
        if len(payload) <= self._max_message_size:
            whole = Batch(seq, now, self._loop.create_future(), batched=False, key=key, deliver_at=deliver_at)
            whole.count = 1
            whole.meta = meta
            whole.payload = payload
            batches = [whole]
            receipt = SendReceipt(whole, -1)
        else:
            uuid = chunk_uuid(self.producer_name, seq if sequence_id is None else sequence_id)
            chunks = split_payload(meta, payload, self._max_message_size, uuid)
            batches = list(make_chunk_batches(chunks, seq, now, self._loop))
            receipt = ChunkedSendReceipt(batches[-1], -1)
        for batch in batches:  # the message's own id, custom or not (``last_sequence_id()``)
            batch.last_seq = seq if sequence_id is None else sequence_id
        if callback is not None:
            batches[-1].add_callback(-1, callback)
        self.pending += 1
        if self.seal_listener is not None:
            self.seal_listener(self.partition)
        for batch in batches:
            self._queue_sealed(batch)
        return receipt

    def _queue_sealed(self, batch: Batch) -> None:
        """Put a sealed batch in flight: queued for receipts, written when attached, timed out."""
        self._inflight.append(batch)
        if self.lazy:
            self.start_lazily()
        conn = self._conn
        if conn is not None:
            meta, payload = batch.meta, batch.payload
            assert meta is not None and payload is not None
            try:
                conn.write(cmds.send(self.producer_id, batch.first_seq, meta, payload))
            except MagnetarError as exc:  # closed, and we were not told yet: keep it for the resend
                self._detach(exc)
        if self._timeout_handle is None and self._timeout > 0:
            self._timeout_handle = self._loop.call_at(batch.opened_at + self._timeout, self._check_timeouts)

    async def wait_for_capacity(self) -> None:
        """Return once fewer than ``max_pending_messages`` are pending."""
        while self.pending >= self.max_pending:
            if self._closed is not None:
                raise self._closed
            fut: asyncio.Future[None] = self._loop.create_future()
            self._capacity_waiters.append(fut)
            await fut

    async def wait_for_capacity_or_raise(self) -> None:
        """Wait for room if the producer blocks when full; otherwise refuse at once."""
        if not self._cfg.block_if_queue_full:
            raise ProducerQueueIsFull(f"{self.pending} messages pending (max_pending_messages)")
        await self.wait_for_capacity()

    def _open_batch(self) -> Batch:
        now = self._loop.time()
        batch = self._batch = Batch(self._next_seq, now, self._loop.create_future(), batched=self._batching)
        if self._batching:
            self._loop.call_at(now + self._delay, self._on_batch_timer, batch)
        return batch

    def _on_batch_timer(self, batch: Batch) -> None:
        if self._batch is batch:
            self._seal()

    def _open_keyed(self, keyed: KeyedBatches, key: str | None, size: int) -> Batch:
        """The open batch of ``key`` under key-based batching (sealing them all first if this would overflow)."""
        if keyed.count and keyed.nbytes + size > self._max_bytes:
            self._seal()
        batches = keyed.batches
        batch = batches.get(key)
        if batch is None:
            now = self._loop.time()
            if not batches:  # the delay runs from the first message of the whole container
                self._loop.call_at(now + self._delay, self._on_keyed_timer, batches)
            batch = batches[key] = Batch(self._next_seq, now, self._loop.create_future(), key=key)
        return batch

    def _on_keyed_timer(self, batches: dict[str | None, Batch]) -> None:
        keyed = self._keyed
        if keyed is not None and keyed.batches is batches and batches:
            self._seal()

    def _open_delayed(self, key: str | None, deliver_at: int) -> Batch:
        """A batch of its own for a delayed message, after sealing what is open (send order is kept)."""
        self._seal()
        future = self._loop.create_future()
        return Batch(self._next_seq, self._loop.time(), future, batched=False, key=key, deliver_at=deliver_at)

    def _seal(self) -> None:
        """Seal every open batch (the default one, or each key's under key-based batching)."""
        batch = self._batch
        if batch is not None:
            self._batch = None
            self._seal_batch(batch)
        keyed = self._keyed
        if keyed is not None and keyed.batches:
            for batch in keyed.take():
                self._seal_batch(batch)

    def _seal_batch(self, batch: Batch) -> None:
        """Encode one batch (one msgpack + compress + CRC) and queue its ``send`` frame.

        Detached, the sealed batch only joins ``_inflight``; the next attach sends it.
        """
        try:
            meta, payload = batch.encode(producer_name=self.producer_name, compression=self._compression)
            if self._schema is not None:
                self._schema.stamp(meta)  # R122, before encryption seals the entry
            if self._cfg.encryptor is not None:  # after compression, as Pulsar (``client.crypto``)
                payload = self._cfg.encryptor.seal(meta, payload)
        except (TypeError, ValueError) as exc:  # e.g. a property value msgpack cannot encode
            self._complete(batch, MagnetarError(f"cannot encode batch: {exc}"))
            return
        except MagnetarError as exc:  # CryptoError: a key file became unreadable at a data key refresh
            self._complete(batch, exc)
            return
        if self.seal_listener is not None:
            self.seal_listener(self.partition)
        if len(payload) > self._max_message_size:
            self._complete(
                batch,
                MessageTooLarge(
                    f"batch of {len(payload)} bytes exceeds the broker's max_message_size of {self._max_message_size}"
                ),
            )
            return
        batch.meta = meta
        batch.payload = payload
        self._inflight.append(batch)
        if self.lazy:
            self.start_lazily()
        conn = self._conn
        if conn is not None:
            try:
                conn.write(cmds.send(self.producer_id, batch.first_seq, meta, payload))
            except MagnetarError as exc:  # closed, and we were not told yet: keep it for the resend
                self._detach(exc)
        if self._timeout_handle is None and self._timeout > 0:
            self._timeout_handle = self._loop.call_at(batch.opened_at + self._timeout, self._check_timeouts)
