"""Outcomes of what a partition producer sent: receipts, send errors, send timeouts, failing all.

The broker answers ``send`` receipts in ``seq`` order, so matching one is a ``popleft`` of the
in-flight queue; a batch older than the receipt's was lost by the broker and fails. Each batch
completes exactly once (``_complete``): its callbacks and receipt learn the outcome, its messages
leave ``pending``, and senders waiting for room under ``max_pending_messages`` are let in.
"""

from __future__ import annotations

from magnetar.client.producer.batch_builder import Batch
from magnetar.client.producer.partition_state import PartitionProducerState
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, RetryableError, Timeout


class Receipts(PartitionProducerState):
    """Completes in-flight batches, in order, by receipt, error or timeout."""

    def _complete(self, batch: Batch, exc: MagnetarError | None, ledger: int = -1, entry: int = -1) -> None:
        batch.payload = None  # receipts may be held long after; the bytes are not needed any more
        batch.meta = None
        if exc is None:
            batch.resolve(ledger, entry, self.partition)
        else:
            batch.fail(exc)
        self.pending -= batch.count
        if self.completion_listener is not None:
            self.completion_listener(batch.count)
        if self._capacity_waiters and self.pending < self.max_pending:
            waiters, self._capacity_waiters = self._capacity_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _on_receipt(self, seq: int, ledger: int, entry: int) -> None:
        inflight = self._inflight
        while inflight:
            head = inflight[0]
            if head.first_seq > seq:
                return  # a late receipt for a batch that already timed out
            inflight.popleft()
            self._last_refusal = None
            if head.first_seq == seq:
                # The last message's id as sent, custom ids included: after custom ids 0, 1, 2 and
                # 1, 2 again it is 2, as in Pulsar, while the frames' own counter goes on to 4.
                self.last_sequence_id = head.last_seq
                self._complete(head, None, ledger, entry)
                return
            # Receipts come in seq order, so an older batch without one was lost by the broker.
            self._complete(head, MagnetarError(f"broker skipped the receipt for seq {head.first_seq}"))

    def _on_send_error(self, seq: int, exc: MagnetarError) -> None:
        if isinstance(exc, RetryableError | AlreadyClosed):
            self._last_refusal = exc
            self._registration_broken(exc)
            return
        inflight = self._inflight
        while inflight and inflight[0].first_seq <= seq:
            head = inflight.popleft()
            self._complete(head, exc if head.first_seq == seq else MagnetarError("send lost"))
            if head.first_seq == seq:
                return

    def _check_timeouts(self) -> None:
        self._timeout_handle = None
        now = self._loop.time()
        inflight = self._inflight
        if inflight and inflight[0].opened_at + self._timeout <= now:
            state = "" if self._conn is not None else " (the producer is disconnected and reconnecting)"
            refusal = self._last_refusal
            # Why it kept being resent, such as bookies whose disks are full: a timeout alone does not say.
            why = f"; the broker's last answer: {refusal.code}: {refusal}" if refusal is not None else ""
            exc = Timeout(
                f"message to {self.topic} not acknowledged within {self._cfg.send_timeout_millis} ms"
                f" (send_timeout_millis){state}{why}"
            )
            while inflight and inflight[0].opened_at + self._timeout <= now:
                self._complete(inflight.popleft(), exc)
        if inflight:
            self._timeout_handle = self._loop.call_at(inflight[0].opened_at + self._timeout, self._check_timeouts)

    def _fail_all(self, exc: MagnetarError) -> None:
        if self._batch is not None:
            batch, self._batch = self._batch, None
            self._complete(batch, exc)
        if self._keyed is not None:
            for batch in self._keyed.take():
                self._complete(batch, exc)
        while self._inflight:
            self._complete(self._inflight.popleft(), exc)
        if self._timeout_handle is not None:
            self._timeout_handle.cancel()
            self._timeout_handle = None
        waiters, self._capacity_waiters = self._capacity_waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(exc)
                w.exception()
