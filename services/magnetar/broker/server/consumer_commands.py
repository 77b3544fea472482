"""The consumer commands of a client connection: subscribe, flow, ack, redeliver, seek, close.

Fields are checked (``protocol.fields``) before anything reaches a subscription: Key_Shared
ranges, batch-index acks, reader start ids and seek positions. The connection is also the
consumers' message sink: ``send_message`` and ``send_active_consumer_change`` are what a
``ServerConsumer`` calls to push to its client.

Readers (``subscribe`` with ``durable: false``, WIRE.md R20f) start from ``start_message_id``
([ledger, entry, batch]); ``reader_start`` turns it into the mark-delete position of their
in-memory cursor: [-1, -1, -1] is the earliest message, Pulsar's ``MessageId.latest`` (ledger
2**63-1) the end of the topic, and any other id starts at that entry when ``start_inclusive``
or when it names a batch index (the client drops the batch's messages before the index itself),
else just after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from magnetar.broker.authz import binary as authz
from magnetar.broker.compaction import reads as compaction_reads
from magnetar.broker.schema import admission as schema_admission
from magnetar.broker.server.transport import ConnectionTransport
from magnetar.broker.subscriptions.consumer import ServerConsumer, consumer_metadata
from magnetar.broker.subscriptions.cursor_ops import LATEST_ID, mark_delete_for_publish_time
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.topics.kinds import AnySubscription, AnyTopic
from magnetar.broker.topics.non_persistent import NonPersistentSubscription, NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol import fields
from magnetar.protocol.entry import EntryMeta, decode_entry
from magnetar.protocol.errors import AlreadyClosed, InvalidCommand, Unsupported
from magnetar.protocol.topic_name import TopicName, valid_subscription


def reader_start(ml: ManagedLedger, start: tuple[int, int, int] | None, inclusive: bool, earliest: bool) -> Position:
    """The mark-delete position of a reader's cursor (module docstring)."""
    if start is None:
        return ml.first_position if earliest else ml.last_confirmed
    ledger, entry, batch = start
    if ledger < 0:
        return ml.first_position
    if ledger >= LATEST_ID:
        last = ml.last_confirmed
        if inclusive and ml.is_readable(last):
            return Position(last.ledger_id, last.entry_id - 1)
        return last
    if inclusive or batch >= 0:
        return Position(ledger, entry - 1)
    return Position(ledger, entry)


class ConsumerCommands(ConnectionTransport):
    """``subscribe`` and the commands on an open consumer (a mixin of ``ServerConnection``)."""

    def _subscribe(self, cmd: c.Subscribe) -> None:
        name = TopicName.parse(cmd["topic"])
        cid = int(cmd["consumer_id"])
        sub_name = str(cmd["subscription"])
        sub_type = str(cmd["sub_type"])
        if not valid_subscription(sub_name):  # R92: a metadata key segment
            raise InvalidCommand(
                "subscription name must be 1-1024 printable characters without '/', "
                f"not '.' or '..': {sub_name[:100]!r}"
            )
        priority_level = fields.integer(cmd.get("priority_level", 0), "priority_level")
        key_shared_mode = cmd.get("key_shared_mode")
        if key_shared_mode is not None and key_shared_mode not in (c.KEY_SHARED_AUTO_SPLIT, c.KEY_SHARED_STICKY):
            raise InvalidCommand(f"key_shared_mode must be AUTO_SPLIT or STICKY, got {key_shared_mode!r}")
        key_ranges = fields.key_ranges_of(cmd.get("key_ranges"))
        if key_shared_mode == c.KEY_SHARED_STICKY and not key_ranges:
            raise InvalidCommand("a STICKY Key_Shared consumer must declare key_ranges")
        durable = bool(cmd.get("durable", True))
        start = fields.message_id_of(cmd.get("start_message_id"))
        inclusive = bool(cmd.get("start_inclusive", False))
        earliest = cmd.get("initial_position", "Latest") == "Earliest"
        read_compacted = bool(cmd.get("read_compacted", False))
        metadata = consumer_metadata(cmd.get("properties"))  # R106
        schema = schema_admission.schema_of(cmd.get("schema"))  # R118
        if read_compacted:  # R46b: persistent topics, Exclusive and Failover only
            compaction_reads.check_read_compacted(name, sub_type)

        async def run() -> None:
            if cid in self.consumers:
                raise InvalidCommand(f"consumer id {cid} is already in use on this connection")
            await authz.check_subscribe(self.service, name, self.auth_role, sub_name)  # R72
            topic = await self.service.get_any_topic(name)
            service = self.service  # R120: before the consumer joins (it is not "another consumer")
            await schema_admission.admit_consumer(service.store, service.resources, service.config, name, topic, schema)
            consumer = ServerConsumer(
                cid,
                str(cmd.get("consumer_name") or f"consumer-{self.id}-{cid}"),
                self,
                priority_level=priority_level,
                key_shared_mode=key_shared_mode,
                key_ranges=key_ranges,
                allow_out_of_order=bool(cmd.get("allow_out_of_order", False)),
                metadata=metadata,
            )
            if durable:
                sub = await topic.subscribe(sub_name, sub_type, consumer, earliest=earliest)
            elif isinstance(topic, NonPersistentTopic):  # R43b: a reader gets what comes from now on
                sub = await topic.subscribe(sub_name, sub_type, consumer, earliest=earliest, durable=False)
            else:
                sub = await topic.subscribe(
                    sub_name,
                    sub_type,
                    consumer,
                    earliest=earliest,
                    durable=False,
                    start=reader_start(topic.ml, start, inclusive, earliest),
                )
            if isinstance(topic, PersistentTopic) and isinstance(sub, Subscription):
                from_earliest = earliest if durable or start is None else start[0] < 0
                await compaction_reads.attach(topic, sub, read_compacted, from_earliest)
            if ("consumer", cid) in self._closed_while_creating:
                sub.remove_consumer(consumer)
                raise AlreadyClosed(f"consumer {cid} was closed before its creation was complete")
            self.consumers[cid] = (consumer, sub, topic)
            self.write(c.success(cmd["rid"]))

        self.guard.check_consumer(len(self.consumers))  # R88: maxConsumersPerConnection
        if cid in self.consumers or ("consumer", cid) in self._creating:
            raise InvalidCommand(f"consumer id {cid} is already in use on this connection")
        self._spawn(cmd["rid"], self._reserving(("consumer", cid), self.guard.counting_consumer(run())))

    def send_message(
        self,
        consumer_id: int,
        pos: Position,
        meta: EntryMeta,
        payload: bytes,
        redelivery_count: int,
        acked: Sequence[int] | None = None,
    ) -> None:
        self.service.metrics.msgs_out.inc(int(meta.get("n", 1)) - (len(acked) if acked else 0))
        self.write(
            c.message(
                consumer_id,
                pos.ledger_id,
                pos.entry_id,
                meta,
                payload,
                redelivery_count,
                sorted(acked) if acked else None,
            )
        )

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.write(c.active_consumer_change(consumer_id, is_active))

    def _consumer(self, consumer_id: int) -> tuple[ServerConsumer, AnySubscription, AnyTopic]:
        entry = self.consumers.get(int(consumer_id))
        if entry is None:
            raise AlreadyClosed(f"consumer {consumer_id} is not open on this connection")
        return entry

    def _flow(self, cmd: c.Flow) -> None:
        consumer, sub, _ = self._consumer(cmd["consumer_id"])
        sub.flow(consumer, int(cmd["permits"]))

    def _ack(self, cmd: c.Ack) -> None:
        consumer, sub, _ = self._consumer(cmd["consumer_id"])
        kind = str(cmd["kind"])
        if kind not in (c.ACK_INDIVIDUAL, c.ACK_CUMULATIVE):
            raise InvalidCommand(f"ack kind must be individual or cumulative, got {kind!r}")
        positions = fields.positions_of(cmd["positions"], Position)
        batch_acks = fields.batch_acks_of(cmd.get("batch_acks"), Position)
        fut = sub.ack(consumer, kind, positions, batch_acks)
        rid = cmd.get("rid")
        if rid is None:
            return

        def done(f: asyncio.Future[None]) -> None:
            exc = f.exception()
            if exc is not None:
                self.write(c.error_frame(rid, "PersistenceError", f"ack not persisted: {exc}"))
            else:
                self.write(c.ack_response(rid))

        fut.add_done_callback(done)

    def _redeliver(self, cmd: c.Redeliver) -> None:
        consumer, sub, _ = self._consumer(cmd["consumer_id"])
        raw = cmd.get("positions")
        positions = None if raw is None else fields.positions_of(raw, Position)
        sub.negative_ack(consumer, positions)

    def _close_consumer(self, cmd: c.CloseConsumer) -> None:
        cid = int(cmd["consumer_id"])
        entry = self.consumers.pop(cid, None)
        if entry is not None:
            entry[1].remove_consumer(entry[0])
        elif ("consumer", cid) in self._creating:
            self._closed_while_creating.add(("consumer", cid))
        self.write(c.success(cmd["rid"]))

    def _unsubscribe(self, cmd: c.Unsubscribe) -> None:
        consumer, sub, topic = self._consumer(cmd["consumer_id"])

        async def run() -> None:
            entry = self.consumers.get(consumer.consumer_id)
            if entry is None or entry[0] is not consumer:  # a pipelined close or unsubscribe got there first
                raise AlreadyClosed(f"consumer {consumer.consumer_id} is not open on this connection")
            others = [x for x in sub.dispatcher.consumers if x is not consumer]
            if others:
                raise InvalidCommand(f"subscription {sub.name} has other connected consumers")
            self.consumers.pop(consumer.consumer_id, None)
            sub.remove_consumer(consumer)
            await topic.unsubscribe(sub.name)
            self.write(c.success(cmd["rid"]))

        self._spawn(cmd["rid"], run())

    def _seek(self, cmd: c.Seek) -> None:
        _consumer, sub, _ = self._consumer(cmd["consumer_id"])
        lid, eid = fields.seek_position_of(cmd["position"])
        if isinstance(sub, NonPersistentSubscription):  # R43b: nothing stored, nothing to rewind
            self.write(c.success(cmd["rid"]))
            return

        async def run() -> None:
            if lid >= LATEST_ID:
                # MessageId.latest: the end of the topic as it is now, as Pulsar's cursor resolves it,
                # so that what is published after the seek is delivered.
                await sub.reset(sub.ml.last_confirmed)
                self.write(c.success(cmd["rid"]))
                return
            target = sub.ml.first_readable(Position(lid, eid))
            before = Position(lid, eid - 1) if target is None else Position(target.ledger_id, target.entry_id - 1)
            before = compaction_reads.seek_mark_delete(sub, Position(lid, eid)) or before  # R46b
            await sub.reset(before)
            self.write(c.success(cmd["rid"]))

        self._spawn(cmd["rid"], run())

    def _seek_publish_time(self, cmd: c.SeekPublishTime) -> None:
        """R20a: deliver again from the first entry published at or after ``publish_time``
        (binary search on publish times, then a bounded walk back: managed_ledger/search.py)."""
        _consumer, sub, _ = self._consumer(cmd["consumer_id"])
        publish_time = fields.integer(cmd["publish_time"], "publish_time")
        if isinstance(sub, NonPersistentSubscription):  # R43b, as seek
            self.write(c.success(cmd["rid"]))
            return

        async def run() -> None:
            await sub.reset(await mark_delete_for_publish_time(sub.ml, publish_time))
            self.write(c.success(cmd["rid"]))

        self._spawn(cmd["rid"], run())

    def _get_last_message_id(self, cmd: c.GetLastMessageId) -> None:
        """R20f: the topic's last message id and the subscription's mark-delete position."""
        _consumer, sub, topic = self._consumer(cmd["consumer_id"])
        if not isinstance(sub, Subscription) or not isinstance(topic, PersistentTopic):
            raise Unsupported("getLastMessageId is not supported on non-persistent topic")  # R43b

        async def run() -> None:
            compacted = await compaction_reads.last_message_id(topic, sub)  # R46b
            if compacted is not None:
                md = sub.cursor.mark_delete
                self.write(c.last_message_id_response(cmd["rid"], *compacted, [md.ledger_id, md.entry_id]))
                return
            ml = topic.ml
            last = ml.last_confirmed
            ledger, entry, batch = -1, -1, -1
            if ml.is_readable(last):
                got = await ml.read_entries(last, 1)
                if got and got[0][0] == last:
                    meta, _ = decode_entry(got[0][1])
                    ledger, entry = last
                    batch = int(meta.get("n", 1)) - 1 if meta.get("b") else -1
            md = sub.cursor.mark_delete
            self.write(c.last_message_id_response(cmd["rid"], ledger, entry, batch, [md.ledger_id, md.entry_id]))

        self._spawn(cmd["rid"], run())
