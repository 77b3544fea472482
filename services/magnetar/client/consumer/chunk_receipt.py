"""A partition consumer's receipt of chunked messages (``chunks`` reassembles them).

Each chunk's checksum is checked as it arrives, the chunk is handed to the consumer's
``ChunkAssembler``, and the message is delivered once its last chunk is in, by the last chunk's
position. ``_chunked`` remembers every chunk of each delivered message by that position, so that
an ack, a negative ack or a redelivery of the message covers all of its chunks (as Pulsar's).
"""

from __future__ import annotations

import logging
import time

from magnetar.client.consumer.acks import Position
from magnetar.client.consumer.chunks import ChunkedMessage
from magnetar.client.consumer.partition_state import PartitionConsumerState
from magnetar.client.message import EntryInfo
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import META_CRC, META_PUBLISH_TIME, decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import META_ENCRYPTION_KEYS, EntryMeta
from magnetar.protocol.message_id import MessageId

log = logging.getLogger(__name__)


class ChunkReceipt(PartitionConsumerState):
    """Buffers chunks until their message is whole, and expires incomplete ones."""

    def _on_chunk(self, frame: cmds.Message, meta: EntryMeta, position: Position) -> None:
        """One chunk of a chunked message (``chunks``): buffer it, deliver the message once whole.

        Every chunk but the one that completes a message gives its permit back at once (the
        application never sees it), as Pulsar's consumer does. Chunks before where this consumer
        starts are dropped; dead letter handling does not apply to chunked messages.
        """
        payload = frame["payload"]
        if not isinstance(payload, bytes) or crc32c(payload) != meta.get(META_CRC):
            log.warning("dropping chunk %s:%s of %s, asking for redelivery: checksum mismatch", *position, self.topic)
            self._redeliver_now.add(position)
            self._schedule_flush()
            self.return_permits(1)
            return
        skip = self._skip_before
        if skip is not None and (position < skip.position or (position == skip.position and not self._start_inclusive)):
            self.return_permits(1)
            return
        loop = self._loop
        redelivery_count = frame.get("redelivery_count", 0)
        out = self._chunks.add(meta, position, payload, loop.time(), int(time.time() * 1000))
        for p in out.ack:
            self.ack_entry(p)
        if out.untracked and self.ack_timeouts is not None:  # Pulsar's trackMessage: redelivered on timeout
            now = loop.time()
            for p in out.untracked:
                self.ack_timeouts.add(p, redelivery_count, now)
        self._arm_chunk_timer()
        assembled = out.message
        if assembled is None:
            self.return_permits(1)
            return
        try:
            if META_ENCRYPTION_KEYS in assembled.meta:  # encrypted before it was cut into chunks
                from magnetar.client.encryption.decryption import open_entry

                opened = open_entry(self, assembled.meta, assembled.payload, assembled.positions, verify=False)
                if opened is None:
                    return
                assembled.meta, records = opened
            else:
                records = decode_batch(assembled.meta, assembled.payload, verify=False)  # each chunk was verified
        except Exception as exc:  # undecodable behind good checksums: a producer bug; it would never decode
            log.error("dropping undecodable chunked message ending at %s:%s of %s: %s", *position, self.topic, exc)
            for p in assembled.positions:
                self.ack_entry(p)
            self.return_permits(1)
            return
        self._chunked[position] = assembled.positions
        ameta = assembled.meta
        info = EntryInfo(position, 1, ameta.get(META_PUBLISH_TIME, 0), redelivery_count, self, False, self.epoch, ameta)
        if not self._durable:
            self._last_received = MessageId(self.partition, position[0], position[1], -1)
        self._deliver([ChunkedMessage(records[0], info, assembled.positions[0])])

    def _arm_chunk_timer(self) -> None:
        if self._chunk_timer is not None:
            return
        when = self._chunks.next_expiry()
        if when is not None:
            self._chunk_timer = self._loop.call_at(when, self._on_chunk_timer)

    def _on_chunk_timer(self) -> None:
        """Drop (and acknowledge) the chunked messages still incomplete after their expiry time."""
        self._chunk_timer = None
        if self._closed is not None:
            return
        expired = self._chunks.expire(self._loop.time())
        if expired:
            log.info("acknowledging %d chunks of expired incomplete chunked messages of %s", len(expired), self.topic)
            for p in expired:
                self.ack_entry(p)
        self._arm_chunk_timer()
