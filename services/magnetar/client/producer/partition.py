"""A producer on one (partition) topic, registered with the broker that owns it.

``PartitionProducer`` owns the send path (``sending.py``: batching, sequence ids, back-pressure
through ``max_pending_messages``), the in-flight queue matched against receipts (``receipts.py``:
the send timeout too), and (through ``reconnect.Attachment``) staying attached to the topic's
owner, resending what is unacknowledged; here it registers, flushes and closes.
"""

from __future__ import annotations

import asyncio
import logging

from magnetar.client.net.connection import Connection
from magnetar.client.options import ProducerAccessMode
from magnetar.client.producer.batch_builder import Batch
from magnetar.client.producer.receipts import Receipts
from magnetar.client.producer.sending import Sending
from magnetar.client.producer.start import access_wait_limit
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, NotConnected, Timeout

log = logging.getLogger(__name__)


class PartitionProducer(Sending, Receipts):
    """Producer on one (non-partitioned, or single partition) topic, attached to its owner's connection.

    Unacknowledged batches stay in ``_inflight`` (in ``seq`` order, sealed payload kept) whether or
    not the producer is attached. While detached, sealed batches just join that queue; on every
    (re)attach the whole queue is written again, in order, with the same sequence ids and the same
    producer name, before any newer batch: the broker sees one gap-free, ordered stream per
    producer name, and may deduplicate by (producer name, seq). Each batch completes exactly once —
    by its receipt, a non-retryable ``send_error``, its send timeout, or close — because whichever
    comes first pops it from the queue.
    """

    # ---------------------------------------------------------------- attaching

    async def _attach(self, conn: Connection) -> None:
        """Register as a producer on ``conn``; on success resend every unacknowledged batch in order."""
        pid = self._resolver.next_id()
        # After the first attach the broker-assigned name is kept: deduplication is keyed by it.
        # The access mode, the topic epoch got on an earlier attach and the properties: R102-R104.
        cmd = cmds.producer(
            self.topic,
            pid,
            self.producer_name or self._cfg.producer_name,
            access_mode=self._cfg.access_mode.name,
            epoch=self.topic_epoch,
            metadata=self._cfg.properties,
            schema=self._schema.wire if self._schema is not None else None,
        )
        conn.register_producer(pid, self)
        try:
            answer: cmds.ProducerSuccess = await conn.request(cmd, access_wait_limit(self._cfg.access_mode))
        except BaseException as exc:
            conn.unregister_producer(pid)
            if isinstance(exc, Timeout):  # it may still be created late: do not leave it behind
                conn.request_nowait(cmds.close_producer(pid))
            raise
        if self._closed is not None:  # closed while we were waiting
            conn.unregister_producer(pid)
            conn.request_nowait(cmds.close_producer(pid))
            return
        if not conn.holds_producer(pid, self):  # the topic moved again before this task resumed
            raise NotConnected(f"broker {conn.url} closed the producer on {self.topic} as it was registered")
        self.producer_id = pid
        self.producer_name = str(answer.get("producer_name") or self.producer_name)
        if self._schema is not None and answer.get("schema_version") is not None:
            self._schema.version = int(answer["schema_version"])  # R119: the version it was found under
        if self._cfg.access_mode is not ProducerAccessMode.Shared and answer.get("topic_epoch") is not None:
            self.topic_epoch = int(answer["topic_epoch"])
        if not self._ever_attached:
            self._ever_attached = True
            last = answer.get("last_sequence_id")
            if self._cfg.initial_sequence_id is not None:  # given: it wins over the broker's (as in Pulsar)
                last = self._cfg.initial_sequence_id
            if self.pending == 0:  # (a lazily started one may have numbered messages already: keep them)
                self.last_sequence_id = int(last) if last is not None else -1
                self._next_seq = self.last_sequence_id + 1
        self._max_message_size = conn.max_message_size
        self._max_bytes = min(self._cfg.batching_max_allowed_size_in_bytes, conn.max_message_size)
        try:
            for batch in self._inflight:
                if self._schema is not None and batch.meta is not None and "sv" not in batch.meta:
                    self._schema.stamp(batch.meta)  # sealed before any partition had registered (lazy start)
                conn.write(self._send_cmd(batch))
        except MagnetarError as exc:  # the connection died under us: its loss was not ours to see
            conn.unregister_producer(pid)
            raise NotConnected(f"connection to {conn.url} lost while resending: {exc}") from exc
        self._conn = conn
        self._attached.set()

    def _send_cmd(self, batch: Batch) -> cmds.Send:
        meta, payload = batch.meta, batch.payload
        assert meta is not None and payload is not None  # sealed: every batch in _inflight is
        return cmds.send(self.producer_id, batch.first_seq, meta, payload)

    def start_lazily(self) -> None:
        """Register now (``lazy_start_partitioned_producers``: the first batch routed here was just
        sealed; ``producer_start``). It waits in ``_inflight`` meanwhile, as during a reconnection."""
        self.lazy = False
        if self._closed is None and self._conn is None and self._reattach_task is None:
            self._reattach_task = self._loop.create_task(self._reattach(), name=f"magnetar-start {self.topic}")

    def _connection_lost(self, conn: Connection, exc: MagnetarError) -> None:
        if conn is self._conn:
            self._detach(exc)

    def _closed_by_broker(self, conn: Connection) -> None:
        if conn is self._conn:
            self._detach(NotConnected(f"broker {conn.url} closed the producer on {self.topic}"))

    def _registration_broken(self, exc: MagnetarError) -> None:
        """A retryable ``send_error``: drop this registration (telling the broker) and re-attach.

        The broker said the message could not be stored *now* (topic moving, ledger fenced, not
        enough bookies) or that it no longer knows this producer; the message is not failed but
        resent, with everything after it, once the producer is attached again.
        """
        conn = self._conn
        if conn is None:
            return
        conn.unregister_producer(self.producer_id)
        conn.request_nowait(cmds.close_producer(self.producer_id))
        self._detach(exc)

    def _give_up(self, exc: MagnetarError) -> None:
        self._closed = exc
        self._fail_all(exc)

    # ---------------------------------------------------------------- flush / close

    def seal_open_batch(self) -> None:
        self._seal()

    async def flush(self) -> None:
        """Send the open batch now and wait until every pending message has an outcome."""
        self._seal()
        if self._inflight:
            await asyncio.wait([self._inflight[-1].future])

    async def close(self) -> None:
        """Flush (while attached, for at most the operation timeout), then close on the broker.

        With the broker gone and ``send_timeout_millis=0`` a flush could wait forever, so close
        waits at most the operation timeout, and not at all when the producer is already
        detached (as Pulsar's close, which never waits for a reconnection). Whatever is still
        unacknowledged then fails with ``AlreadyClosed``: its outcome is unknown, it may have
        been stored.
        """
        if self._closed is not None:
            return
        limit = self._resolver.operation_timeout
        deadline = self._loop.time() + limit
        self._seal()
        if self._inflight and self._conn is not None:
            await asyncio.wait([self._inflight[-1].future], timeout=limit)
        self._closed = AlreadyClosed(f"producer on {self.topic} is closed")
        await self._stop_reattaching()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if not conn.closed:
                    remaining = max(deadline - self._loop.time(), 0.001)
                    await conn.request(cmds.close_producer(self.producer_id), remaining)
            except (NotConnected, Timeout) as exc:
                log.debug("close_producer on %s: %s", self.topic, exc)
            finally:
                conn.unregister_producer(self.producer_id)
        unacknowledged = bool(self._inflight) or self._batch is not None or bool(self._keyed and self._keyed.batches)
        self._fail_all(
            AlreadyClosed(f"producer on {self.topic} closed before the message was acknowledged")
            if unacknowledged
            else self._closed
        )
