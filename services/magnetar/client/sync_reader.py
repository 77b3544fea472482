"""The blocking ``Reader`` (``magnetar.Reader``, made by ``Client.create_reader``), mirroring ``pulsar.Reader``.

A thin shell over the asyncio reader on the client's loop thread (``blocking.loop_thread``):
``read_next`` takes a message already queued without a round trip to the loop (the read
bookkeeping follows on the loop, in order), and waits on the delivery only when the queue is
empty. A ``reader_listener`` runs on the client's listener threads (``blocking.listener_pool``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from magnetar.client.blocking.listener_pool import ListenerPool, Pump
from magnetar.client.blocking.loop_thread import LoopThread
from magnetar.client.message import Message
from magnetar.client.readers.reader import Reader as AsyncReader
from magnetar.protocol.errors import AlreadyClosed, InvalidConfiguration
from magnetar.protocol.message_id import MessageId

__all__ = ["Reader"]


class Reader:
    """Blocking reader (``client.create_reader``), mirroring ``pulsar.Reader``."""

    def __init__(self, lt: LoopThread, reader: AsyncReader) -> None:
        self._lt = lt
        self._loop = lt.loop
        self._r = reader
        self._read: deque[Message] = deque()
        self._wakeup_pending = False
        self._listener: Pump | None = None
        self._closed = False
        lt.owned.add(self)

    def _client_closed(self) -> None:
        self._closed = True

    def topic(self) -> str:
        return self._r.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        if self._closed:
            raise AlreadyClosed("reader is already closed")
        if self._listener is not None:
            raise InvalidConfiguration("read_next() cannot be called on a reader with a reader_listener")
        return self._read_next(timeout_millis)

    def _read_next(self, timeout_millis: int | None = None) -> Message:
        try:
            # Fast path, as the consumer's: the read bookkeeping follows on the loop, in order.
            msg = self._r.consumer._queue.popleft()
        except IndexError:
            msg = self._lt.take(self._r.consumer, timeout_millis)
        self._read.append(msg)
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._loop.call_soon_threadsafe(self._drain)
        return msg

    def _drain(self) -> None:
        self._wakeup_pending = False
        read = self._read
        reader = self._r
        while read:
            reader._handed_out(read.popleft())

    def has_message_available(self) -> bool:
        """Whether a message can be read now from the current position."""
        return self._lt.run(self._r.has_message_available())

    def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id or a publish time (ms since the epoch)."""
        self._lt.run(self._r.seek(messageid))

    def is_connected(self) -> bool:
        return self._r.is_connected()

    def _start_listener(self, pool: ListenerPool, listener: Callable[[Reader, Message], Any]) -> None:
        self._listener = pool.start(self._r.read_next, lambda msg: listener(self, msg), self._r.queued)

    def close(self) -> None:
        """Close the reader (its non-durable subscription goes with it); ``AlreadyClosed`` if closed."""
        if self._closed:
            raise AlreadyClosed("reader is already closed")
        self._closed = True
        self._lt.run(self._r.close())
