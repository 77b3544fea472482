"""Seeking a partition consumer, and asking for its topic's last message id.

``seek`` (by message id or publish time) moves the subscription; messages that were queued or in
flight for the old position are dropped: the partition consumer ignores every entry pushed
between sending ``seek`` and the broker's answer (the answer arrives after all of them on the
same connection, and resolves the request future at once, before later frames are dispatched).
"""

from __future__ import annotations

import asyncio

from magnetar.client.consumer.partition_state import PartitionConsumerState
from magnetar.client.net.connection import Connection
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import AlreadyClosed, NotConnected, Timeout
from magnetar.protocol.message_id import MessageId


class Seeking(PartitionConsumerState):
    """Moves the subscription to a message id or a publish time."""

    async def _attached_connection(self, what: str) -> Connection:
        if self._closed is not None:
            raise AlreadyClosed(f"consumer on {self.topic} is closed")
        if not await self._wait_attached(self._resolver.operation_timeout) or self._conn is None:
            raise NotConnected(f"{what} on {self.topic}: not connected to its broker")
        return self._conn

    async def seek(self, target: MessageId | int) -> None:
        """Move the subscription to a message id or a publish time (ms).

        What was queued or in flight for the old position is dropped, with its permits given back;
        pending negative acks and ack timeouts are forgotten. As in pulsar-client, the broker moves
        the cursor to the id's entry and the id becomes this consumer's start: delivery resumes
        after that message, or at it with ``start_message_id_inclusive`` (what comes before it in
        its entry is dropped here). ``MessageId.latest`` is resolved by the broker when it seeks.
        """
        if isinstance(target, bool) or not isinstance(target, MessageId | int):
            raise ValueError(f"seek takes a MessageId or a publish time in ms, not {type(target).__name__}")
        conn = await self._attached_connection("seek")
        self.flush_acks()  # acks made before the seek reach the broker before it
        cmd: cmds.Request
        if isinstance(target, MessageId):
            ledger, entry = target.position
            if target.first_chunk is not None and self.config.start_message_id_inclusive:
                ledger, entry = target.first_chunk  # a chunked message is read again from its first chunk
            cmd = cmds.seek(self.consumer_id, [ledger, entry])
        else:
            cmd = cmds.seek_publish_time(self.consumer_id, target)
        dropped = self._discard_queued(self) or ()
        self.return_permits(sum(1 for m in dropped if m._info.epoch == self.epoch))
        self._dropped_by_seek = [m._info.position for m in dropped]
        # The new start holds from the broker's answer on, and entries pushed right behind it are
        # dispatched before this coroutine resumes: set it now (nothing is delivered until then).
        before = (self._start, self._start_inclusive, self._last_received)
        if isinstance(target, int):
            self._set_start(None, False)
        else:
            self._set_start(target, self.config.start_message_id_inclusive)
        self._last_received = None
        self._chunks.clear()  # what was being assembled comes again from the new position
        # Nacks and ack timeouts are of messages from before the seek: they are not due any more
        # (unless the seek fails: then they are redelivered at once, below).
        pending = [*self.nacks.positions(), *(self.ack_timeouts.positions() if self.ack_timeouts else ())]
        self._forget_redeliveries()
        fut = conn.request_future(cmd)
        self._seek_fut = fut
        try:
            done, _ = await asyncio.wait([fut], timeout=self._resolver.operation_timeout)
            if not done:
                fut.cancel()
                raise Timeout(f"seek on {self.topic} got no answer within {self._resolver.operation_timeout}s")
            fut.result()
        except BaseException:
            # The subscription did not move: what we dropped is still unacknowledged there.
            self._set_start(before[0], before[1])
            self._last_received = before[2]
            again = sorted({*self._dropped_by_seek, *pending})
            if again:
                self._redeliver_now.update(again)
                self._schedule_flush()
            raise
        finally:
            self._seek_fut = None
            self._dropped_by_seek = []

    async def get_last_message_id(self) -> tuple[MessageId, tuple[int, int]]:
        """The topic's last message id (all -1 when empty) and the subscription's mark-delete position."""
        conn = await self._attached_connection("get_last_message_id")
        answer: cmds.LastMessageIdResponse = await conn.request(cmds.get_last_message_id(self.consumer_id))
        last = MessageId(self.partition, int(answer["ledger"]), int(answer["entry"]), int(answer["batch"]))
        md = answer["mark_delete"]
        return last, (int(md[0]), int(md[1]))
