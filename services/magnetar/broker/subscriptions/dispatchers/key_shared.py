"""Key_Shared: each entry goes to the consumer that owns the hash of its key.

The hash is Murmur3-32 of the key (``meta.k``, empty when absent) modulo 65536 (``key_hash``); the
owner comes from the selector of the subscription's mode (``key_selectors``). All consumers of one
subscription must use the same mode: a consumer asking for the other one is refused with
ConsumerBusy, as long as the subscription has consumers.

The dispatcher only answers "who owns this hash"; the subscription decides what to do when that
consumer has no permits, has recently joined, or a key is still held by its previous owner.
"""

from __future__ import annotations

from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers.base import Dispatcher
from magnetar.broker.subscriptions.dispatchers.key_selectors import AutoSplitSelector, StickySelector
from magnetar.protocol import commands as c
from magnetar.protocol.errors import ConsumerBusy, InvalidCommand

MODES = (c.KEY_SHARED_AUTO_SPLIT, c.KEY_SHARED_STICKY)


class KeySharedDispatcher(Dispatcher):
    sub_type = c.SUB_KEY_SHARED
    delays_messages = True
    by_key = True

    def __init__(self, partition_index: int = -1) -> None:
        super().__init__(partition_index)
        self.mode = c.KEY_SHARED_AUTO_SPLIT
        self._selector: AutoSplitSelector | StickySelector = AutoSplitSelector()

    def add(self, consumer: ServerConsumer) -> None:
        mode = consumer.key_shared_mode or c.KEY_SHARED_AUTO_SPLIT
        if mode not in MODES:
            raise InvalidCommand(f"unknown Key_Shared mode {mode!r}: expected one of {', '.join(MODES)}")
        if self.consumers and mode != self.mode:
            raise ConsumerBusy(f"Key_Shared subscription is in {self.mode} mode; cannot join it in {mode} mode")
        if not self.consumers and mode != self.mode:
            self.mode = mode
            self._selector = StickySelector() if mode == c.KEY_SHARED_STICKY else AutoSplitSelector()
        self._selector.add(consumer)
        super().add(consumer)

    def remove(self, consumer: ServerConsumer) -> None:
        if consumer in self.consumers:
            self._selector.remove(consumer)
        super().remove(consumer)

    def pick(self) -> ServerConsumer | None:
        raise NotImplementedError("Key_Shared routes by key: use select()")

    def select(self, key_hash: int) -> ServerConsumer | None:
        return self._selector.select(key_hash)

    def ranges(self, consumer: ServerConsumer) -> list[tuple[int, int]]:
        return self._selector.ranges(consumer)

    def consumer_stats(self, consumer: ServerConsumer) -> dict[str, object]:
        return {"keyHashRanges": [f"[{start}, {end}]" for start, end in self.ranges(consumer)]}
