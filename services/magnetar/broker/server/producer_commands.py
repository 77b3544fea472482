"""The producer commands of a client connection: create a producer, send, close it.

``producer`` admits a producer in this order, each step able to refuse it: the id is free on this
connection (R88's cap included), authorization (R71, before the topic loads), the topic (loaded or
auto-created), the schema (R119), deduplication's recovered state and the backlog quota
(persistent topics), then the access mode (R102-R103: it may wait, or fence the others). A
``close_producer`` that arrives while the creation is under way wins: the creation then fails.
``send`` checks size, checksum and message count before anything is stored, lets a backlog quota
hold or refuse it, and answers with the receipt once the entry is durable.
"""

from __future__ import annotations

import secrets

from magnetar.broker.authz import binary as authz
from magnetar.broker.policies.rate_limit import publish_delay
from magnetar.broker.schema import admission as schema_admission
from magnetar.broker.server.transport import ConnectionTransport
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import ServerProducer
from magnetar.broker.topics.producer_access import access_mode_of, epoch_of, producer_metadata
from magnetar.managed_ledger import Position
from magnetar.protocol import commands as c
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import (
    AlreadyClosed,
    ChecksumError,
    InvalidCommand,
    InvalidMessage,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    ProducerBusy,
)
from magnetar.protocol.topic_name import TopicName

_MAX_BATCH_MESSAGES = 2**31 - 1  # meta.n of one entry
_MAX_EPOCH = 2**63 - 1  # a producer's topic epoch
# Generated producer names carry this process's token: names must not repeat across brokers and
# restarts, since deduplication is keyed by them.
_NAME_TOKEN = secrets.token_hex(3)


class ProducerCommands(ConnectionTransport):
    """``producer``, ``send`` and ``close_producer`` (a mixin of ``ServerConnection``)."""

    def _producer(self, cmd: c.Producer) -> None:
        name = TopicName.parse(cmd["topic"])
        pid = int(cmd["producer_id"])
        schema = schema_admission.schema_of(cmd.get("schema"))  # R118: a bad map is InvalidCommand
        if not isinstance(cmd.get("producer_name", ""), str | None):  # checked here, not deep in run()
            raise InvalidCommand("producer_name must be a string")
        epoch = cmd.get("epoch")
        if isinstance(epoch, int) and epoch > _MAX_EPOCH:  # an int64, as Pulsar's topicEpoch
            # Above it, the topic's next epoch (persisted) no longer fits a frame: no producer
            # could open on the topic again.
            raise InvalidCommand(f"producer epoch must be at most {_MAX_EPOCH}, not {epoch}")

        async def run() -> None:
            if pid in self.producers:
                raise ProducerBusy(f"producer id {pid} is already in use on this connection")
            await authz.check_produce(self.service, name, self.auth_role)  # R71: before the topic loads
            topic = await self.service.get_any_topic(name)
            service = self.service  # R119: the schema is admitted (and registered) before anything else
            schema_version = await schema_admission.admit_producer(
                service.store, service.resources, service.config, name, schema
            )
            pname = cmd.get("producer_name") or f"standalone-{_NAME_TOKEN}-{self.id}-{pid}"
            producer = ServerProducer(pid, pname, self.id, metadata=producer_metadata(cmd.get("metadata")))
            mode, epoch = access_mode_of(cmd.get("access_mode")), epoch_of(cmd.get("epoch"))
            if isinstance(topic, PersistentTopic):
                # Deduplication (dedup.py) answers with the recovered state, so wait for it; a
                # producer is refused while a backlog quota is exceeded (backlog_quota.py).
                topic.dedup.configure(self.service.config, topic.policies)
                await topic.dedup.ready()
                await topic.backlog_quota.admit_producer(self.service.clock())
            # Access modes (producer_access.py, R102-R103): may wait (WaitForExclusive) or fence others.
            granted = await topic.access.admit(producer, mode, epoch, self._fence_elsewhere, lambda: not self._closed)
            try:
                if self._closed:  # the client went away while we waited
                    raise NotConnected("connection closed")
                topic.add_producer(producer)
            except BaseException:
                topic.access.removed(producer)
                raise
            if ("producer", pid) in self._closed_while_creating:
                topic.remove_producer(producer)
                raise AlreadyClosed(f"producer {pid} was closed before its creation was complete")
            last = topic.dedup.last_sequence_id(pname) if isinstance(topic, PersistentTopic) else -1
            self.producers[pid] = (producer, topic)
            self.write(c.producer_success(cmd["rid"], pname, last, topic_epoch=granted, schema_version=schema_version))

        self.guard.check_producer(len(self.producers))  # R88: maxProducersPerConnection
        if pid in self.producers or ("producer", pid) in self._creating:
            raise ProducerBusy(f"producer id {pid} is already in use on this connection")
        self._spawn(cmd["rid"], self._reserving(("producer", pid), self.guard.counting_producer(run())))

    def _fence_elsewhere(self, producer: ServerProducer, exc: BaseException) -> None:
        """An ``ExclusiveWithFencing`` producer took the topic: close ``producer`` on its connection."""
        producer.fenced = exc  # whatever it still sends is refused
        for conn in list(self.service.connections):
            if conn.id == producer.connection_id:
                entry = conn.producers.get(producer.producer_id)
                if entry is not None and entry[0] is producer:
                    del conn.producers[producer.producer_id]
                    entry[1].remove_producer(producer)
                    conn.write(c.close_producer_pushed(producer.producer_id))

    def _send(self, cmd: c.Send) -> None:
        pid = cmd["producer_id"]
        seq = cmd["seq"]
        entry = self.producers.get(pid)
        payload = cmd["payload"]
        meta = cmd["meta"]

        def error(exc: MagnetarError) -> None:
            self.write(c.send_error(pid, seq, str(exc.code), str(exc)))

        if entry is None:
            error(AlreadyClosed(f"producer {pid} is not open on this connection"))
            return
        if not isinstance(payload, bytes) or not isinstance(meta, dict):
            error(InvalidCommand("send needs a bin payload and a meta map"))  # a send_error: the client waits for one
            return
        limit = self.service.config.max_message_size
        if len(payload) > limit:
            error(MessageTooLarge(f"message of {len(payload)} bytes exceeds the maximum of {limit}"))
            return
        if crc32c(payload) != meta.get("crc"):
            error(ChecksumError("payload checksum does not match meta.crc"))
            return
        count = meta.get("n", 1)
        # Refused before it is stored: a negative count broke the receipt, a huge one the topic's
        # cumulative message counts (every later send failed). Pulsar's batch size is an int32.
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= _MAX_BATCH_MESSAGES:
            error(InvalidMessage(f"meta.n must be 1..{_MAX_BATCH_MESSAGES} messages, got {count!r:.40}"))
            return
        producer, topic = entry
        if isinstance(topic, PersistentTopic) and topic.backlog_quota.blocked is not None:
            if topic.backlog_quota.intercept(lambda: self._send(cmd), error):
                return  # held (run again once released) or refused: backlog_quota.py
        metrics = self.service.metrics

        def done(pos: Position | None, exc: BaseException | None) -> None:
            if exc is not None:
                error(exc if isinstance(exc, MagnetarError) else MagnetarError(repr(exc)))
                return
            assert pos is not None
            metrics.msgs_in.inc(int(meta.get("n", 1)))
            metrics.bytes_in.inc(len(payload))
            self.write(c.send_receipt(pid, seq, pos.ledger_id, pos.entry_id))

        topic.publish_with(producer, meta, payload, done)
        self.read_throttle.hold(publish_delay(topic, int(meta.get("n", 1)), len(payload)))

    def _close_producer(self, cmd: c.CloseProducer) -> None:
        pid = int(cmd["producer_id"])
        entry = self.producers.pop(pid, None)
        if entry is not None:
            entry[1].remove_producer(entry[0])
        elif ("producer", pid) in self._creating:
            self._closed_while_creating.add(("producer", pid))
        self.write(c.success(cmd["rid"]))
