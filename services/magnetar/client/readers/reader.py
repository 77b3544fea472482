"""Readers (``client.create_reader``): reading a topic from a chosen message id, without a subscription to keep.

A reader is what Pulsar makes it: an Exclusive consumer on a *non-durable* subscription
(``subscribe`` with ``durable: false``, WIRE.md R20f) named ``reader-<10 hex digits>`` (or
``<subscription_role_prefix>-<10 hex digits>``), whose cursor lives in the broker's memory and
starts at ``start_message_id``: ``MessageId.earliest``, ``MessageId.latest`` or any message id,
after it or, with ``start_message_id_inclusive``, at it. Each partition of a partitioned topic has
its own partition consumer, as in pulsar-client 3.2+ (which reads partitioned topics too). When a
partition consumer reconnects it subscribes again from the last message the application read, so
a broker restart neither skips nor repeats messages.

Every message read is acknowledged cumulatively at once, as Pulsar's reader does, so the broker's
cursor (and the mark-delete position ``has_message_available`` compares with) follows the reader.

``has_message_available`` is Pulsar's ``ConsumerImpl.hasMessageAvailable``, per partition: a
message already received and not yet read counts; otherwise the topic's last message id
(``get_last_message_id``) is compared with the last message read (or, before the first read, with
the start id: at or after it when inclusive, after it otherwise). A reader that starts at
``latest`` (or was moved by a publish-time seek) and has read nothing compares the broker's
mark-delete position with the last message id instead, since ``latest`` is no real position;
inclusive, it first seeks to the last message, so that ``read_next`` then returns it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from magnetar.client.consumer.consumer import Consumer, PartitionConsumer
from magnetar.client.message import Message, MessageOwner
from magnetar.protocol.errors import MagnetarError
from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId

log = logging.getLogger(__name__)


def reader_subscription_name(subscription_role_prefix: str | None) -> str:
    """``reader-<10 hex>``, or ``<prefix>-<10 hex>`` with a role prefix, as pulsar-client's ``ReaderImpl``."""
    suffix = secrets.token_hex(5)
    return f"{subscription_role_prefix}-{suffix}" if subscription_role_prefix else f"reader-{suffix}"


def start_for_partition(start: MessageId, partition: int) -> MessageId:
    """Where partition ``partition`` of a partitioned topic starts, for a reader started at ``start``.

    ``partition`` -1 stands for a topic that is not partitioned (or one partition named directly):
    it starts at ``start``. ``earliest`` and ``latest`` hold for every partition. A concrete message
    id belongs to one partition: that partition starts there and the others at ``latest`` (an id is
    no position in another partition's log); Pulsar's Java reader starts the others at ``latest`` too.
    """
    if partition < 0 or start == EARLIEST or start == LATEST or start.partition() == partition:
        return start
    return LATEST


class _PartitionState:
    """What ``has_message_available`` knows about one partition of the reader."""

    __slots__ = ("last_in_broker", "last_read", "sought_by_time", "start")

    def __init__(self, start: MessageId) -> None:
        self.start = start
        self.last_read: MessageId | None = None
        self.last_in_broker: MessageId | None = None
        self.sought_by_time = False


class Reader:
    """A reader over one topic (every partition of it, if partitioned); see the module docstring."""

    def __init__(
        self,
        topic: str,
        consumer: Consumer,
        start_message_id: MessageId,
        inclusive: bool,
        *,
        partitioned: bool,
        on_close: Callable[[Consumer], None] | None = None,
    ) -> None:
        self._topic = topic
        self._on_close = on_close
        self._c = consumer
        self._inclusive = inclusive
        self._partitioned = partitioned
        self._state: dict[int, _PartitionState] = {
            p.partition: _PartitionState(self._start_of(start_message_id, p.partition)) for p in consumer.partitions
        }
        self._listener: asyncio.Task[None] | None = None

    def _start_of(self, start: MessageId, partition: int) -> MessageId:
        return start_for_partition(start, partition if self._partitioned else -1)

    def topic(self) -> str:
        return self._topic

    @property
    def consumer(self) -> Consumer:
        """The non-durable consumer underneath (its subscription name, its partitions)."""
        return self._c

    def _state_of(self, part: MessageOwner | None) -> _PartitionState | None:
        return None if part is None else self._state.get(part.partition)

    def _read(self, msg: Message) -> Message:
        """Bookkeeping for a message handed to the application: remember it, acknowledge it."""
        state = self._state_of(msg._info.owner)
        if state is not None:
            state.last_read = msg.message_id()
            state.sought_by_time = False
        self._ack(msg)
        return msg

    def _ack(self, msg: Message) -> None:
        owner = msg._info.owner
        if owner is None:
            return
        try:
            owner.acknowledge_cumulative(msg._info.position, msg._index)
        except MagnetarError as exc:  # closed meanwhile: nothing left to move
            log.debug("reader ack on %s: %s", self._topic, exc)

    def queued(self) -> int:
        """How many messages ``read_next`` would return without waiting (the listener pool's runs)."""
        return self._c.queued()

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` if none arrives within ``timeout_millis``."""
        return self._read(await self._c.receive(timeout_millis))

    def _handed_out(self, msg: Message) -> None:
        """Bookkeeping for a message the blocking reader took from the queue itself (on the loop)."""
        Consumer._handed_out(msg)
        self._read(msg)

    async def has_message_available(self) -> bool:
        """Whether ``read_next`` would return a message now (see the module docstring)."""
        if self._c._queue:
            return True
        for part in list(self._c.partitions):
            if await self._partition_has_more(part):
                return True
        return bool(self._c._queue)

    async def _partition_has_more(self, part: PartitionConsumer) -> bool:
        state = self._state.setdefault(part.partition, _PartitionState(LATEST))
        if state.last_read is None and (state.start == LATEST or state.sought_by_time):
            last, mark_delete = await part.get_last_message_id()
            state.last_in_broker = last
            if last.entry_id() < 0:
                return False
            if self._inclusive and not state.sought_by_time:
                # Pulsar's rule: an inclusive reader at `latest` reads the last message itself.
                await self._seek_part(part, last)
                state.start = last
                return True
            return mark_delete < last.position
        cached = state.last_in_broker
        if cached is not None and self._has_more(state, cached):
            return True
        last, _ = await part.get_last_message_id()
        state.last_in_broker = last
        return self._has_more(state, last)

    def _has_more(self, state: _PartitionState, last_in_broker: MessageId) -> bool:
        if last_in_broker.entry_id() < 0:
            return False
        if state.last_read is not None:
            return last_in_broker > state.last_read
        start = state.start
        return last_in_broker >= start if self._inclusive else last_in_broker > start

    async def _seek_part(self, part: PartitionConsumer, target: MessageId) -> None:
        """Move one partition of the reader to ``target`` (the whole consumer when it has one partition)."""
        if len(self._c.partitions) == 1:
            await self._c.seek(target)
        else:
            await part.seek(target)

    async def seek(self, messageid: MessageId | int) -> None:
        """Move the reader to a message id, or to a publish time (ms since the epoch, an ``int``).

        As for the start id, the reader then reads from after the id (at it when inclusive).
        """
        if isinstance(messageid, bool) or not isinstance(messageid, MessageId | int):
            raise ValueError(f"invalid seek_arg type {type(messageid)}")
        await self._c.seek(messageid)
        for partition, state in self._state.items():
            state.last_read = None
            state.last_in_broker = None
            if isinstance(messageid, MessageId):
                state.start = self._start_of(messageid, partition)
                state.sought_by_time = False
            else:
                state.sought_by_time = True

    def start_listener(self, listener: Callable[[Reader, Message], Any]) -> None:
        """Hand every message to ``listener(reader, message)`` on the loop (``reader_listener``)."""
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(listener), name=f"reader-listener {self._topic}"
        )

    async def _listen(self, listener: Callable[[Reader, Message], Any]) -> None:
        while True:
            try:
                msg = await self.read_next()
            except MagnetarError:  # closed
                return
            try:
                listener(self, msg)
            except Exception:
                log.exception("reader_listener raised")

    def is_connected(self) -> bool:
        return all(p.connected for p in self._c.partitions)

    async def close(self) -> None:
        """Close the reader; its non-durable subscription goes with it."""
        await self._c.close()
        if self._on_close is not None:
            self._on_close(self._c)
        task, self._listener = self._listener, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        return await self.read_next()
