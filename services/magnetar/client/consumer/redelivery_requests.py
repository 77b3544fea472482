"""Redelivery of a partition consumer's messages: negative acks, ack timeouts, dead letters.

Redelivery follows Pulsar's client (``redelivery``, whose trackers this drives):
``negative_acknowledge`` redelivers after ``negative_ack_redelivery_delay_ms`` (or a back-off),
``unacked_messages_timeout_ms`` redelivers what was handed out and not acked in time, and both send
``redeliver`` with the entries' positions (on every subscription type: Pulsar redelivers
*everything* unacknowledged on Exclusive and Failover to keep order; we redeliver what is due, and
say so in the package docstring). With a ``dead_letter_policy`` or ``retry_enable``, entries past
``max_redeliver_count`` go to the dead letter topic instead (``dead_letter``), and
``reconsume_later`` goes through the retry topic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from magnetar.client.consumer.acks import Position
from magnetar.client.consumer.dead_letter import DeadLetters, letter_properties
from magnetar.client.consumer.partition_state import PartitionConsumerState
from magnetar.protocol import commands as cmds

log = logging.getLogger(__name__)


class RedeliveryRequests(PartitionConsumerState):
    """Asks the broker for entries again when they are due, or sends them to the dead letter topic."""

    def _forget_redeliveries(self) -> None:
        """Everything unacknowledged comes back (re-subscribe, seek): no nack, timeout or candidate is due."""
        self._redeliver_now.clear()
        self.nacks.clear()
        if self._nack_timer is not None:
            self._nack_timer.cancel()
            self._nack_timer = None
        if self.ack_timeouts is not None:
            self.ack_timeouts.clear()
        self._dlq_candidates.clear()

    def negative_acknowledge(self, position: Position, redelivery_count: int = 0) -> None:
        """Redeliver the entry at ``position`` once its delay has passed (see ``redelivery``)."""
        if self.ack_timeouts is not None:
            self.ack_timeouts.discard(position)
        self.nacks.add(position, redelivery_count, self._loop.time())
        self._schedule_nack_timer()

    def _schedule_nack_timer(self) -> None:
        deadline = self.nacks.next_deadline()
        timer = self._nack_timer
        if deadline is None:
            if timer is not None:
                timer.cancel()
                self._nack_timer = None
            return
        when = deadline + self.nacks.grouping
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._nack_timer = self._loop.call_at(when, self._on_nack_timer)

    def _on_nack_timer(self) -> None:
        self._nack_timer = None
        due = self.nacks.due(self._loop.time())
        if due:
            self.redeliver(due)
        self._schedule_nack_timer()

    def _on_tick(self) -> None:
        """Every ``ack_timeout_tick_time_ms``: redeliver what was handed out and not acked in time."""
        self._tick = None
        timeouts = self.ack_timeouts
        if self._closed is not None or timeouts is None:
            return
        due = timeouts.due(self._loop.time())
        if due:
            log.debug("%d entries of %s not acknowledged in time: redelivering", len(due), self.topic)
            self.redeliver(due)
        self._tick = self._loop.call_later(self.config.ack_timeout_tick_time_ms / 1000.0, self._on_tick)

    def redeliver(self, positions: Sequence[Position]) -> None:
        """Ask for these entries again, except dead letter candidates, which go to the dead letter topic.

        A chunked message's last chunk stands for every chunk of it.
        """
        chunked = self._chunked
        if chunked:
            positions = [q for p in positions for q in chunked.get(p, (p,))]
        timeouts = self.ack_timeouts
        again: list[Position] = []
        for p in positions:
            if timeouts is not None:
                timeouts.discard(p)
            if p in self._dlq_sending:
                continue
            if p in self._dlq_candidates:
                self._start_dead_letter(p)
            else:
                again.append(p)
        if again:
            self._redeliver_now.update(again)
            self._schedule_flush()

    def redeliver_unacknowledged(self) -> None:
        """Redeliver every unacknowledged entry of this consumer (Pulsar's ``redeliverUnacknowledgedMessages``).

        The messages still queued are dropped here (they come again), so their permits go back.
        """
        self._forget_redeliveries()
        dropped = self._discard_queued(self) or ()
        self.return_permits(sum(1 for m in dropped if m._info.epoch == self.epoch))
        self.flush_acks()  # acks made before it reach the broker first: those are not redelivered
        self._send(cmds.redeliver(self.consumer_id))

    # ---------------------------------------------------------------- dead letters

    def _use_dead_letters(self, letters: DeadLetters, first_topic: Callable[[], str | None]) -> None:
        self._letters = letters
        self._first_topic = first_topic
        self._max_redeliver = letters.max_redeliver_count

    def _start_dead_letter(self, position: Position) -> None:
        if position in self._dlq_sending:
            return
        self._dlq_sending.add(position)
        task = self._loop.create_task(self._dead_letter(position), name=f"magnetar-dlq {self.topic}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _dead_letter(self, position: Position) -> None:
        """Publish the entry's unacknowledged messages to the dead letter topic, then ack the entry.

        If publishing fails the entry is redelivered instead, as Pulsar's client does.
        """
        letters = self._letters
        try:
            messages = self._dlq_candidates.get(position, [])
            unacked = self.tracker.get(position)
            if unacked is not None:
                messages = [m for m in messages if m._index in unacked]
            if letters is None or not messages:
                return
            topic = letters.dead_letter_topic(self.topic, self._first_topic())
            try:
                for m in messages:
                    await letters.publish_dead_letter(topic, m, letter_properties(m))
            except Exception as exc:
                log.warning("dead letter of %s:%s (%s) failed, redelivering: %s", *position, self.topic, exc)
                self._dlq_candidates.pop(position, None)
                self._redeliver_now.add(position)
                self._schedule_flush()
                return
            self.tracker.forget(position)
            self.ack_entry(position)
        finally:
            self._dlq_sending.discard(position)
            self._dlq_candidates.pop(position, None)
