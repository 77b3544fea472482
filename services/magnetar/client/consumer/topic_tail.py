"""Reading topics to their end with non-durable partition consumers: the dead letter index's reader."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence

from magnetar.client.config.consumer import ConsumerConfig
from magnetar.client.consumer.acks import Position
from magnetar.client.consumer.partition import PartitionConsumer
from magnetar.client.message import Message
from magnetar.client.net.reconnect import Resolver
from magnetar.protocol.errors import MagnetarError, Timeout
from magnetar.protocol.message_id import EARLIEST
from magnetar.protocol.topic_name import TopicName


class TopicTail:
    """Reads topics from their earliest message with non-durable partition consumers, on demand.

    The dead letter index (``dead_letter.TopicScanner``): ``catch_up`` asks each partition for its
    last message id and returns the properties of everything read up to there.
    """

    def __init__(self, resolver: Resolver, topics: Sequence[str]) -> None:
        self._resolver = resolver
        self._topics = list(topics)
        self._parts: list[PartitionConsumer] | None = None
        self._read: list[dict[str, str]] = []
        self._upto: dict[int, Position] = {}
        self._changed = asyncio.Event()
        self._error: MagnetarError | None = None

    async def _open(self) -> list[PartitionConsumer]:
        config = ConsumerConfig(subscription_name=f"reader-{secrets.token_hex(5)}")
        parts: list[PartitionConsumer] = []
        try:
            for topic in self._topics:
                part = PartitionConsumer(
                    self._resolver,
                    topic,
                    TopicName.parse(topic).partition_index,
                    config,
                    deliver=self._on_messages,
                    on_closed=self._on_closed,
                    discard_queued=lambda part: None,
                    durable=False,
                    start_message_id=EARLIEST,
                )
                await part.attach_first()
                parts.append(part)
        except BaseException:
            await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
            raise
        return parts

    def _on_messages(self, messages: list[Message]) -> None:
        for m in messages:
            self._read.append(dict(m.properties()))
        info = messages[-1]._info
        owner: PartitionConsumer | None = info.owner  # type: ignore[assignment]  # every MessageOwner is one
        if owner is not None:
            key = id(owner)
            if info.position > self._upto.get(key, (-1, -1)):
                self._upto[key] = info.position
            owner.return_permits(len(messages))
        self._changed.set()

    def _on_closed(self, exc: MagnetarError) -> None:
        self._error = exc
        self._changed.set()

    async def catch_up(self) -> list[dict[str, str]]:
        if self._parts is None:
            self._parts = await self._open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._resolver.operation_timeout
        for part in self._parts:
            last, _ = await part.get_last_message_id()
            if last.entry_id() < 0:
                continue
            target = last.position
            while self._upto.get(id(part), (-1, -1)) < target:
                if self._error is not None:
                    raise self._error
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise Timeout(f"reading {part.topic} up to {last} took longer than the operation timeout")
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    pass
        out, self._read = self._read, []
        return out

    async def close(self) -> None:
        parts, self._parts = self._parts or [], None
        await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
