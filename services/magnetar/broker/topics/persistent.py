"""A persistent topic served by this broker: its managed ledger, producers and subscriptions.

Subscriptions are durable (their cursor is stored and they outlive their consumers) or, for
readers, non-durable: the cursor lives in the managed ledger's memory only and the subscription
goes away with its last consumer (WIRE.md R20f).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

from magnetar.broker.compaction.controller import TopicCompaction, compaction_stats
from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.backlog_quota import BacklogQuotaGuard
from magnetar.broker.policies.model import EffectivePolicies
from magnetar.broker.policies.rate_limit import TopicRateLimits
from magnetar.broker.subscriptions import cursor_ops
from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.topics.dedup import Deduplication
from magnetar.broker.topics.producer import Rate, ServerProducer
from magnetar.broker.topics.producer_access import ProducerAccess
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.managed_ledger.ledger import settle
from magnetar.protocol import commands as c
from magnetar.protocol.entry import EntryMeta, encode_entry
from magnetar.protocol.errors import AlreadyClosed, ConsumerBusy, ProducerBusy


class PersistentTopic:
    def __init__(
        self,
        name: str,
        ml: ManagedLedger,
        *,
        policies: EffectivePolicies | None = None,
        config: BrokerConfig | None = None,
    ) -> None:
        self.name = name
        self.ml = ml
        self.producers: dict[tuple[int, int], ServerProducer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.policies = policies or EffectivePolicies(1, 1, 1, None, None)
        self.max_producers = self.policies.max_producers
        self.max_consumers = self.policies.max_consumers
        # Called with the new policies after each ``apply_policies``: features that keep state
        # derived from a policy (rate limiters, expiry, quotas) re-read it here.
        self.policy_listeners: list[Callable[[EffectivePolicies], None]] = []
        self.msg_in = 0
        self.bytes_in = 0
        self.rate_in = Rate()
        self.rate_out = Rate()
        # The broker samples the rates of topics with traffic only (rate_sampler.py): the first
        # publish or subscription after an idle spell calls ``on_traffic`` to join its set again.
        self.on_traffic: Callable[[PersistentTopic], None] | None = None
        self._sampled = False
        # Topic compaction (compaction/controller.py): set by the service once its record is loaded.
        self.compaction: TopicCompaction | None = None
        # Publish and dispatch rate limits (rate_limit.py), re-read whenever the policies change.
        self.rate_limits = TopicRateLimits(self.policies, lambda: list(self.subscriptions.values()))
        self.policy_listeners.append(self.rate_limits.apply)
        # Message deduplication (dedup.py): on or off with the policy, live.
        self.config = config or BrokerConfig()
        self.dedup = Deduplication(name, ml, self.config, self.policies)
        self.policy_listeners.append(self.dedup.apply)
        # Backlog quotas (backlog_quota.py): checked periodically and at producer creation; an age
        # quota's eviction expires messages as the admin verb does.
        self.backlog_quota = BacklogQuotaGuard(self, cursor_ops.expire)
        self.policy_listeners.append(self.backlog_quota.apply)
        # Producer access modes and the topic epoch (producer_access.py).
        self.access = ProducerAccess(name, lambda: list(self.producers.values()), ml)
        for cursor in ml.cursors.values():
            # Durable subscriptions come back with their cursor; their type is set by the first
            # consumer that joins (Exclusive until then, as in Pulsar).
            self.subscriptions[cursor.name] = Subscription(name, ml, cursor, c.SUB_EXCLUSIVE)
            self.rate_limits.attach(self.subscriptions[cursor.name])

    # ------------------------------------------------------------------ policies
    def apply_policies(self, eff: EffectivePolicies) -> None:
        """Run with ``eff`` from now on (a namespace or topic policy changed).

        Limits apply to what comes next: producers and consumers already over a lowered limit
        stay, as in Pulsar. Retention changes reach the managed ledger, which trims at once if
        it now may. The ensemble and quorums apply from the next ledger.
        """
        self.policies = eff
        self.max_producers = eff.max_producers
        self.max_consumers = eff.max_consumers
        self.ml.config = dataclasses.replace(
            self.ml.config,
            ensemble_size=eff.ensemble_size,
            write_quorum=eff.write_quorum,
            ack_quorum=eff.ack_quorum,
            retention_minutes=eff.retention_minutes,
            retention_mb=eff.retention_mb,
        )
        self.ml.schedule_trim()
        for listener in list(self.policy_listeners):
            listener(eff)

    # ------------------------------------------------------------------ producers
    def add_producer(self, producer: ServerProducer) -> None:
        if self.max_producers is not None and len(self.producers) >= self.max_producers:
            raise ProducerBusy(f"topic {self.name} already has the maximum of {self.max_producers} producers")
        if any(p.name == producer.name for p in self.producers.values()):  # names are unique, as in Pulsar
            raise ProducerBusy(f"Producer with name '{producer.name}' is already connected to topic")
        self.producers[(producer.connection_id, producer.producer_id)] = producer
        self.dedup.producer_added(producer.name)

    def remove_producer(self, producer: ServerProducer) -> None:
        if self.producers.pop((producer.connection_id, producer.producer_id), None) is not None:
            self.dedup.producer_removed(producer.name)
        self.access.removed(producer)

    def publish(self, producer: ServerProducer, meta: EntryMeta, payload: bytes) -> asyncio.Future[Position]:
        """``publish_with`` as a future (tests and callers that await the outcome)."""
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.publish_with(producer, meta, payload, partial(settle, fut))
        return fut

    def publish_with(self, producer: ServerProducer, meta: EntryMeta, payload: bytes, on_done: Published) -> None:
        """Store ``[meta, payload]`` (``entry.encode_entry``) as one entry; ``on_done(position,
        None)`` once it is durable, or at once with -1:-1 for a duplicate that is not stored
        (dedup.py), or ``on_done(None, error)``. Called directly from the managed ledger's
        delivery (no task, no future callback in between): the connection writes the receipt in
        the turn of the loop in which the bookie answered. Never raises."""
        ticket = self.dedup.admit(meta) if producer.fenced is None else None
        if isinstance(ticket, asyncio.Future):
            if ticket.done() and not ticket.cancelled() and ticket.exception() is not None:
                # Refused: the client resends from this message on, so nothing after it from this
                # registration may be stored before that (the same fence as a failed write).
                producer.fenced = ticket.exception()
            ticket.add_done_callback(partial(_outcome, on_done))
            return
        count = int(meta.get("n", 1))
        if not self._sampled:
            self._traffic()
        producer.msg_in += count
        self.msg_in += count
        self.bytes_in += len(payload)
        entry = encode_entry(meta, payload)
        dedup = self.dedup
        original: asyncio.Future[Position] | None = None
        if ticket is not None:  # a resend of the same ids while this is in flight waits for this outcome
            original = ticket.future = asyncio.get_running_loop().create_future()

        def refused() -> BaseException | None:
            return producer.fenced or (dedup.guard(ticket) if ticket is not None else None)

        def stored(pos: Position | None, exc: BaseException | None) -> None:
            if exc is not None:
                if producer.fenced is None:
                    producer.fenced = exc
                if ticket is not None:
                    dedup.failed(ticket)
            elif ticket is not None:
                assert pos is not None
                dedup.stored(ticket, pos)
            if original is not None:
                settle(original, pos, exc)
                if exc is not None:
                    original.exception()  # retrieved: only a resend waits on it, and it may never come
            on_done(pos, exc)

        try:
            self.ml.add_entry_with(entry, stored, precondition=refused, messages=count)
        except Exception as exc:  # refused at once (closed, a failed roll-over, the producer's fence)
            stored(None, exc)

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
    ) -> Subscription:
        """Add ``consumer`` to subscription ``sub_name``, creating it if needed. A non-durable one
        (a reader) starts with mark-delete ``start`` (else the start ``earliest`` says)."""
        if self.max_consumers is not None:
            total = sum(len(s.dispatcher.consumers) for s in self.subscriptions.values())
            if total >= self.max_consumers:
                raise ConsumerBusy(f"topic {self.name} already has the maximum of {self.max_consumers} consumers")
        sub = self.subscriptions.get(sub_name)
        if sub is None and not durable:
            if start is None:
                start = self.ml.first_position if earliest else self.ml.last_confirmed
            cursor = self.ml.open_non_durable_cursor(sub_name, start)
            sub = Subscription(self.name, self.ml, cursor, sub_type, durable=False)
            sub.on_last_consumer = self._drop_non_durable
            self.subscriptions[sub_name] = sub
        elif sub is None:
            cursor = await self.ml.open_cursor(sub_name, start_at_earliest=earliest)
            sub = self.subscriptions.get(sub_name) or Subscription(self.name, self.ml, cursor, sub_type)
            self.subscriptions[sub_name] = sub
        if not self._sampled:
            self._traffic()
        self.rate_limits.attach(sub)
        sub.set_unacked_limits(
            self.config.max_unacked_messages_per_consumer, self.config.max_unacked_messages_per_subscription
        )
        try:
            sub.add_consumer(consumer, sub_type)
        except BaseException:
            if not sub.durable and not sub.dispatcher.consumers:
                self._drop_non_durable(sub)
            raise
        return sub

    def _drop_non_durable(self, sub: Subscription) -> None:
        """A reader's subscription lost its last consumer: it and its in-memory cursor go."""
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
        sub.close()
        self.ml.close_non_durable_cursor(sub.name)

    async def unsubscribe(self, sub_name: str) -> None:
        sub = self.subscriptions.pop(sub_name, None)
        if sub is not None:
            sub.close()
        await self.ml.delete_cursor(sub_name)

    # ------------------------------------------------------------------ stats
    def _out_counts(self) -> tuple[int, int]:
        subs = self.subscriptions.values()
        return sum(s.msg_out for s in subs), sum(s.bytes_out for s in subs)

    def _traffic(self) -> None:
        """Traffic after an idle spell: rebase the rates on the counts before it and rejoin the
        broker's sampled set."""
        self._sampled = True
        self.rate_in.rebase(self.msg_in, self.bytes_in)
        self.rate_out.rebase(*self._out_counts())
        if self.on_traffic is not None:
            self.on_traffic(self)

    def sample_rates(self) -> bool:
        """Sample the rates over the last interval; False once the topic is idle (both rates 0 and
        no consumer connected) or closed, when the broker stops sampling it until its next traffic."""
        self.rate_in.sample(self.msg_in, self.bytes_in)
        self.rate_out.sample(*self._out_counts())
        self.rate_limits.publish_rates(self.rate_in.msg_rate, self.rate_in.bytes_rate)
        busy = not self.ml.closed and (
            bool(self.rate_in.msg_rate or self.rate_out.msg_rate)
            or any(s.dispatcher.consumers for s in self.subscriptions.values())
        )
        self._sampled = busy
        return busy

    def stats(self) -> dict[str, Any]:
        return {
            "msgRateIn": self.rate_in.msg_rate,
            "msgThroughputIn": self.rate_in.bytes_rate,
            "msgRateOut": self.rate_out.msg_rate,
            "msgThroughputOut": self.rate_out.bytes_rate,
            "msgInCounter": self.msg_in,
            "bytesInCounter": self.bytes_in,
            "msgOutCounter": sum(s.msg_out for s in self.subscriptions.values()),
            "publishRateLimitedTimes": self.rate_limits.publish.limited_times,
            **self.dedup.stats(),
            **self.backlog_quota.stats(),
            "compaction": compaction_stats(self.compaction),
            "storageSize": self.ml.total_size,
            "entries": self.ml.total_entries,
            "ledgers": [{"ledgerId": lid, "entries": self.ml.entries_in(lid)} for lid in self.ml.ledger_ids],
            "publishers": [
                {
                    "producerName": p.name,
                    "producerId": p.producer_id,
                    "msgInCounter": p.msg_in,
                    "accessMode": p.access_mode,
                    "metadata": dict(p.metadata),
                }
                for p in self.producers.values()
            ],
            "subscriptions": {name: sub.stats() for name, sub in self.subscriptions.items()},
        }

    async def close(self) -> None:
        self.access.close()
        self.backlog_quota.close()
        if self.compaction is not None:
            await self.compaction.close()
        for sub in self.subscriptions.values():
            sub.close()
        await self.ml.close()
        await self.dedup.close()


#: ``on_done(position, None)`` once a publish is durable (or -1:-1 for a dropped duplicate),
#: ``on_done(None, error)`` if it failed.
Published = Callable[[Position | None, BaseException | None], None]


def _outcome(on_done: Published, fut: asyncio.Future[Position]) -> None:
    """A duplicate's outcome is its original's (a future from dedup.py)."""
    if fut.cancelled():
        on_done(None, AlreadyClosed("send cancelled: topic closed"))
    elif fut.exception() is not None:
        on_done(None, fut.exception())
    else:
        on_done(fut.result(), None)
