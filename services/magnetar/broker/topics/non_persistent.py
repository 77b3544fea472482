"""A non-persistent topic (``non-persistent://tenant/ns/topic``): messages are never stored.

As Pulsar's ``NonPersistentTopic``: there is no managed ledger, no bookie write and no cursor. A
``send`` is answered at once with message id 0:0 (Pulsar's broker completes every non-persistent
publish with ledger 0, entry 0), then the entry is offered to each subscription of the moment,
and each subscription hands it to one of its consumers or drops it. Consumers therefore see every
message with id 0:0 (plus the batch index), and only the messages published while they were
connected.

Which consumer gets an entry follows the subscription type, with the same dispatchers as
persistent subscriptions (``dispatchers``): Exclusive and Failover the active consumer, Shared
round-robin by priority level among consumers that have permits, Key_Shared the owner of the
key's hash (``key_selectors``). A consumer is slow when it has no permits left (its receiver
queue is full): Pulsar does not queue for it, the entry is *dropped* for that subscription and
counted (``msgDropRate`` of the subscription, as Pulsar's ``NonPersistentSubscriptionStats``).
A Key_Shared entry whose key owner has no permits is dropped even if other consumers have
permits, as Pulsar's ``NonPersistentStickyKeyDispatcherMultipleConsumers`` does, so that key
order is never broken by a substitute consumer.

What a non-persistent subscription does not have, Pulsar does not have either: acknowledgements
are accepted and ignored, negative acks and redelivery requests do nothing, a seek succeeds and
changes nothing, there is no backlog, no delayed delivery (a deliver-at time is ignored: the
entry goes out now) and no get-last-message-id (refused with ``Unsupported``). A subscription
lives only while it has consumers: the last one leaving removes it, durable or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from magnetar.broker.policies.model import EffectivePolicies
from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.dispatchers import Dispatcher, check_joinable, dispatcher_for
from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash
from magnetar.broker.subscriptions.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.topics.producer import Rate, ServerProducer
from magnetar.broker.topics.producer_access import ProducerAccess
from magnetar.managed_ledger import Position
from magnetar.managed_ledger.ledger import settle
from magnetar.protocol import commands as c
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.errors import ConsumerBusy, InvalidCommand, InvalidTopicName, ProducerBusy, Unsupported
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

# The id of every non-persistent message, in receipts and in deliveries (Pulsar's 0:0).
NON_PERSISTENT_POSITION = Position(0, 0)

BatchAck = tuple[Position, int, Sequence[int]]


def _partition_index(topic_name: str) -> int:
    try:
        return TopicName.parse(topic_name).partition_index
    except InvalidTopicName:
        return -1


class NonPersistentSubscription:
    """Consumers of one subscription of a non-persistent topic, and the choice among them."""

    def __init__(self, topic_name: str, name: str, sub_type: str, *, durable: bool = True) -> None:
        self.topic_name = topic_name
        self.name = name
        self.durable = durable
        self.partition_index = _partition_index(topic_name)
        self.dispatcher: Dispatcher = dispatcher_for(sub_type, self.partition_index)
        # Called when the last consumer leaves: the topic drops the subscription (Pulsar does).
        self.on_last_consumer: Callable[[NonPersistentSubscription], None] | None = None
        self.msg_out = 0
        self.bytes_out = 0
        self.msg_drop = 0
        self.rate_out = Rate()
        self.drop_rate = Rate()
        # Told of each drop (the broker's drop counter): counted as it happens, not by walking the
        # topics each second.
        self.on_drop: Callable[[int], None] | None = None

    @property
    def sub_type(self) -> str:
        return self.dispatcher.sub_type

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: ServerConsumer, sub_type: str) -> None:
        check_joinable(self.dispatcher, sub_type, self.name)
        if not self.dispatcher.consumers and sub_type != self.dispatcher.sub_type:
            self.dispatcher = dispatcher_for(sub_type, self.partition_index)
        self.dispatcher.add(consumer)

    def remove_consumer(self, consumer: ServerConsumer) -> None:
        self.dispatcher.remove(consumer)
        if not self.dispatcher.consumers and self.on_last_consumer is not None:
            self.on_last_consumer(self)

    def flow(self, consumer: ServerConsumer, permits: int) -> None:
        consumer.permits += permits

    # ------------------------------------------------------------------ acks (ignored)
    def ack(
        self,
        consumer: ServerConsumer,
        kind: str,
        positions: list[Position],
        batch_acks: Sequence[BatchAck] = (),
    ) -> asyncio.Future[None]:
        """Accepted and ignored, as Pulsar's ``NonPersistentSubscription.acknowledgeMessage``;
        the same argument checks as a persistent subscription, so a client error shows here too."""
        if kind == c.ACK_CUMULATIVE and self.dispatcher.sub_type in (c.SUB_SHARED, c.SUB_KEY_SHARED):
            raise InvalidCommand(
                f"cumulative acknowledgement is not allowed on a {self.dispatcher.sub_type} subscription"
            )
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    def negative_ack(self, consumer: ServerConsumer, positions: list[Position] | None) -> None:
        """Nothing is kept, so nothing can be delivered again (Pulsar: a no-op)."""

    # ------------------------------------------------------------------ dispatch
    def dispatch(self, meta: EntryMeta, payload: bytes, count: int) -> bool:
        """Hand one entry to the consumer the type picks, or drop it; True when delivered."""
        dispatcher = self.dispatcher
        consumer: ServerConsumer | None
        if dispatcher.by_key:
            consumer = dispatcher.select(key_hash(meta.get("k") or ""))
            if consumer is not None and consumer.permits <= 0:
                consumer = None
        else:
            consumer = dispatcher.pick()
        if consumer is None:
            self.msg_drop += count
            if self.on_drop is not None:
                self.on_drop(count)
            return False
        consumer.permits -= count
        consumer.msg_out += count
        self.msg_out += count
        self.bytes_out += len(payload)
        consumer.sink.send_message(consumer.consumer_id, NON_PERSISTENT_POSITION, meta, payload, 0)
        return True

    # ------------------------------------------------------------------ stats and lifecycle
    def sample_rates(self) -> None:
        self.rate_out.sample(self.msg_out, self.bytes_out)
        self.drop_rate.sample(self.msg_drop, 0)

    def rebase_rates(self) -> None:
        self.rate_out.rebase(self.msg_out, self.bytes_out)
        self.drop_rate.rebase(self.msg_drop, 0)

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``NonPersistentSubscriptionStats`` (``msgDropCounter`` is ours: the count
        behind ``msgDropRate``, which a test or an operator can read without timing a rate)."""
        dispatcher = self.dispatcher
        active = dispatcher.active_consumer
        out: dict[str, Any] = {
            "type": dispatcher.sub_type,
            "msgBacklog": 0,
            "msgRateOut": self.rate_out.msg_rate,
            "msgThroughputOut": self.rate_out.bytes_rate,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "msgDropRate": self.drop_rate.msg_rate,
            "msgDropCounter": self.msg_drop,
            "unackedMessages": 0,
            "isDurable": self.durable,
            "activeConsumerName": active.name if active is not None else None,
            "consumers": dispatcher.consumers_stats(track_unacked=False),
        }
        if isinstance(dispatcher, KeySharedDispatcher):
            out["keySharedMode"] = dispatcher.mode
        return out

    def close(self) -> None:
        """Nothing to release: no cursor, no dispatch task."""


class NonPersistentTopic:
    """Producers and subscriptions of one non-persistent topic; see the module docstring."""

    def __init__(
        self,
        name: str,
        *,
        max_producers: int | None = None,
        max_consumers: int | None = None,
        policies: EffectivePolicies | None = None,
    ) -> None:
        self.name = name
        self.producers: dict[tuple[int, int], ServerProducer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.max_producers = max_producers
        self.max_consumers = max_consumers
        self.policies = policies
        self.policy_listeners: list[Callable[[EffectivePolicies], None]] = []
        self.msg_in = 0
        self.bytes_in = 0
        self.entries_added = 0
        self.rate_in = Rate()
        self.rate_out = Rate()
        self.drop_rate = Rate()
        # Out counters of subscriptions that went away (their last consumer left), kept so the
        # topic's counters never go backwards, as Pulsar's msgOutFromRemovedSubscriptions.
        self._msg_out_removed = 0
        self._bytes_out_removed = 0
        self._msg_drop_removed = 0
        # Producer access modes; the epoch lives in memory, as the topic does (producer_access.py).
        self.access = ProducerAccess(name, lambda: list(self.producers.values()))
        # The broker samples rates of the topics with traffic only (rate_sampler.py): the first
        # publish or subscription after an idle spell calls ``on_traffic`` to join its set again.
        self.on_traffic: Callable[[NonPersistentTopic], None] | None = None
        self.on_drop: Callable[[int], None] | None = None  # given to each subscription
        self._sampled = False
        self.closed = False

    # ------------------------------------------------------------------ policies
    def apply_policies(self, eff: EffectivePolicies) -> None:
        """A namespace policy changed: take the producer and consumer limits (the only policies
        that mean anything without storage), then tell the listeners."""
        self.policies = eff
        self.max_producers = eff.max_producers
        self.max_consumers = eff.max_consumers
        for listener in list(self.policy_listeners):
            listener(eff)

    # ------------------------------------------------------------------ producers
    def add_producer(self, producer: ServerProducer) -> None:
        if self.max_producers is not None and len(self.producers) >= self.max_producers:
            raise ProducerBusy(f"topic {self.name} already has the maximum of {self.max_producers} producers")
        self.producers[(producer.connection_id, producer.producer_id)] = producer

    def remove_producer(self, producer: ServerProducer) -> None:
        self.producers.pop((producer.connection_id, producer.producer_id), None)
        self.access.removed(producer)

    def publish(self, producer: ServerProducer, meta: EntryMeta, payload: bytes) -> asyncio.Future[Position]:
        """``publish_with`` as a future, already resolved to 0:0."""
        receipt: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.publish_with(producer, meta, payload, partial(settle, receipt))
        return receipt

    def publish_with(
        self,
        producer: ServerProducer,
        meta: EntryMeta,
        payload: bytes,
        on_done: Callable[[Position | None, BaseException | None], None],
    ) -> None:
        """Offer the entry to every subscription now, then ``on_done(0:0, None)`` (the connection
        writes the receipt from it, as for a persistent topic's)."""
        count = int(meta.get("n", 1))
        if not self._sampled:
            self._traffic()
        producer.msg_in += count
        self.msg_in += count
        self.bytes_in += len(payload)
        self.entries_added += 1
        for sub in list(self.subscriptions.values()):
            sub.dispatch(meta, payload, count)
        on_done(NON_PERSISTENT_POSITION, None)

    # ------------------------------------------------------------------ subscriptions
    async def subscribe(
        self,
        sub_name: str,
        sub_type: str,
        consumer: ServerConsumer,
        *,
        earliest: bool,
        durable: bool = True,
        start: Position | None = None,
        read_compacted: bool = False,
    ) -> NonPersistentSubscription:
        """Add ``consumer`` to ``sub_name``; the start position (``earliest``, a reader's
        ``start``) means nothing here: there is nothing before now to deliver. A compacted view
        needs a stored topic: ``read_compacted`` is refused, with Pulsar's words."""
        if read_compacted:
            raise Unsupported("readCompacted only valid on persistent topics")
        if self.max_consumers is not None:
            total = sum(len(s.dispatcher.consumers) for s in self.subscriptions.values())
            if total >= self.max_consumers:
                raise ConsumerBusy(f"topic {self.name} already has the maximum of {self.max_consumers} consumers")
        sub = self.subscriptions.get(sub_name)
        created = sub is None
        if sub is None:
            sub = NonPersistentSubscription(self.name, sub_name, sub_type, durable=durable)
            sub.on_last_consumer = self._drop_subscription
            sub.on_drop = self.on_drop
            self.subscriptions[sub_name] = sub
        try:
            sub.add_consumer(consumer, sub_type)
        except BaseException:
            if created and not sub.dispatcher.consumers:
                self._drop_subscription(sub)
            raise
        if not self._sampled:
            self._traffic()
        return sub

    def _drop_subscription(self, sub: NonPersistentSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            self._msg_out_removed += sub.msg_out
            self._bytes_out_removed += sub.bytes_out
            self._msg_drop_removed += sub.msg_drop
        sub.close()

    async def unsubscribe(self, sub_name: str) -> None:
        sub = self.subscriptions.get(sub_name)
        if sub is not None:
            self._drop_subscription(sub)

    # ------------------------------------------------------------------ stats
    @property
    def msg_out(self) -> int:
        return self._msg_out_removed + sum(s.msg_out for s in self.subscriptions.values())

    @property
    def bytes_out(self) -> int:
        return self._bytes_out_removed + sum(s.bytes_out for s in self.subscriptions.values())

    @property
    def msg_drop(self) -> int:
        """Entries dropped for slow or absent consumers, over every subscription ever."""
        return self._msg_drop_removed + sum(s.msg_drop for s in self.subscriptions.values())

    def _traffic(self) -> None:
        """Traffic after an idle spell: rebase the rates on the counts before it and rejoin the
        broker's sampled set."""
        self._sampled = True
        self.rate_in.rebase(self.msg_in, self.bytes_in)
        self.rate_out.rebase(self.msg_out, self.bytes_out)
        self.drop_rate.rebase(self.msg_drop, 0)
        for sub in self.subscriptions.values():
            sub.rebase_rates()
        if self.on_traffic is not None:
            self.on_traffic(self)

    def sample_rates(self) -> bool:
        """Sample the rates over the last interval; False once the topic is idle (every rate 0 and
        no consumer connected) or closed, when the broker stops sampling it until its next traffic."""
        self.rate_in.sample(self.msg_in, self.bytes_in)
        self.rate_out.sample(self.msg_out, self.bytes_out)
        self.drop_rate.sample(self.msg_drop, 0)
        for sub in self.subscriptions.values():
            sub.sample_rates()
        busy = not self.closed and (
            bool(self.rate_in.msg_rate or self.rate_out.msg_rate or self.drop_rate.msg_rate)
            or any(s.dispatcher.consumers for s in self.subscriptions.values())
        )
        self._sampled = busy
        return busy

    def stats(self) -> dict[str, Any]:
        """Pulsar's ``NonPersistentTopicStats``: its ``TopicStats`` fields (nothing is stored, so
        ``storageSize`` and the backlog are 0) plus ``msgDropRate``. Publishers carry Pulsar's
        ``NonPersistentPublisherStats.msgDropRate``, which is always 0 here: Pulsar drops a
        publish when a connection has more than ``maxConcurrentNonPersistentMessagePerConnection``
        non-persistent messages in flight, and this broker never holds one in flight (it offers
        the entry to the subscriptions before it reads the next frame)."""
        rate_in = self.rate_in.msg_rate
        return {
            "msgRateIn": rate_in,
            "msgThroughputIn": self.rate_in.bytes_rate,
            "msgRateOut": self.rate_out.msg_rate,
            "msgThroughputOut": self.rate_out.bytes_rate,
            "averageMsgSize": self.rate_in.bytes_rate / rate_in if rate_in else 0.0,
            "msgInCounter": self.msg_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "msgDropRate": self.drop_rate.msg_rate,
            "msgDropCounter": self.msg_drop,
            "storageSize": 0,
            "backlogSize": 0,
            "publishers": [
                {
                    "producerName": p.name,
                    "producerId": p.producer_id,
                    "msgInCounter": p.msg_in,
                    "msgDropRate": 0.0,
                    "accessMode": p.access_mode,
                    "metadata": dict(p.metadata),
                }
                for p in self.producers.values()
            ],
            "subscriptions": {name: sub.stats() for name, sub in self.subscriptions.items()},
            "replication": {},
        }

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's internal stats of a non-persistent topic: the entries added and one empty
        cursor per subscription (there is no ledger)."""
        return {
            "entriesAddedCounter": self.entries_added,
            "numberOfEntries": 0,
            "totalSize": 0,
            "ledgers": [],
            "cursors": {name: {} for name in self.subscriptions},
        }

    @property
    def has_clients(self) -> bool:
        return bool(self.producers) or any(s.dispatcher.consumers for s in self.subscriptions.values())

    async def close(self) -> None:
        self.closed = True
        self.access.close()
        for sub in list(self.subscriptions.values()):
            sub.close()
        self.subscriptions.clear()
