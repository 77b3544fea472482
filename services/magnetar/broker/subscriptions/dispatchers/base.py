"""The dispatcher seam: consumer membership and the choice of consumer for each entry.

A dispatcher knows only its consumers and their permits; the subscription owns everything about
entries (reading, redelivery, acknowledgements). Two class attributes tell the subscription how to
treat entries for this type: ``delays_messages`` (entries with a deliver-at time wait for it,
WIRE.md R20e) and ``by_key`` (entries are routed by the hash of their key through ``select``,
Key_Shared, instead of ``pick``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from magnetar.broker.subscriptions.consumer import ServerConsumer


class Dispatcher(ABC):
    sub_type: str = ""
    delays_messages: bool = False
    by_key: bool = False

    def __init__(self, partition_index: int = -1) -> None:
        # The partition this subscription's topic is (-1: not a partition); Failover uses it.
        self.partition_index = partition_index
        self.consumers: list[ServerConsumer] = []

    def add(self, consumer: ServerConsumer) -> None:
        """Admit a consumer; raises (e.g. ConsumerBusy) when the type does not allow it."""
        self.consumers.append(consumer)

    def remove(self, consumer: ServerConsumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)

    @property
    def active_consumer(self) -> ServerConsumer | None:
        """The one consumer entries go to, for the single-active types (else None)."""
        return None

    def has_permits(self) -> bool:
        return any(c.can_take for c in self.consumers)

    def total_permits(self) -> int:
        return sum(max(0, c.permits) for c in self.consumers if c.can_take)

    @abstractmethod
    def pick(self) -> ServerConsumer | None:
        """The consumer that gets the next entry, or None when no consumer can take one."""

    def select(self, key_hash: int) -> ServerConsumer | None:
        """Key_Shared: the consumer owning ``key_hash``, with or without permits."""
        raise NotImplementedError(f"{self.sub_type} does not route by key")

    def consumer_stats(self, consumer: ServerConsumer) -> dict[str, object]:
        """Type-specific fields of a consumer's stats."""
        return {}

    def consumers_stats(self, *, track_unacked: bool = True) -> list[dict[str, object]]:
        """Pulsar's ``consumers`` list of subscription stats (``track_unacked`` False: a
        non-persistent subscription, which keeps no unacknowledged messages)."""
        return [
            {
                "consumerName": cons.name,
                "availablePermits": cons.permits,
                "blockedConsumerOnUnackedMsgs": cons.blocked,
                "unackedMessages": cons.unacked_messages if track_unacked else 0,
                "msgOutCounter": cons.msg_out,
                "priorityLevel": cons.priority_level,
                "metadata": dict(cons.metadata),
                **self.consumer_stats(cons),
            }
            for cons in self.consumers
        ]
