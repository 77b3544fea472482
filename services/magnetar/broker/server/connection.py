"""One client connection: decode frames, run commands, write responses and pushed messages.

It is an ``asyncio.Protocol`` rather than a stream reader loop because the publish path is hot:
``data_received`` decodes every whole frame and hands sends straight to the topic without a task
switch per frame. Outgoing frames are buffered and written once per event-loop iteration.

Bad input never reaches storage: an undecodable or oversized frame, a value that is not a
command, or an unknown command gets one error frame and closes this connection only. Fields of
known commands are checked (``protocol.fields``) before anything reaches a subscription (Key_Shared
ranges, batch-index acks, reader start ids): a bad one is ``InvalidCommand`` for that request.

Readers (``subscribe`` with ``durable: false``, WIRE.md R20f) start from ``start_message_id``
([ledger, entry, batch]); ``reader_start`` turns it into the mark-delete position of their
in-memory cursor: [-1, -1, -1] is the earliest message, Pulsar's ``MessageId.latest`` (ledger
2**63-1) the end of the topic, and any other id starts at that entry when ``start_inclusive``
or when it names a batch index (the client drops the batch's messages before the index itself),
else just after it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, cast

from magnetar import __version__, write_batch
from magnetar.broker.auth.providers import authentication_for
from magnetar.broker.auth.session import ConnectionAuth
from magnetar.broker.auth.tls_provider import with_peer_certificate
from magnetar.broker.authz import binary as authz
from magnetar.broker.compaction import reads as compaction_reads
from magnetar.broker.policies.rate_limit import ReadThrottle, publish_delay
from magnetar.broker.schema import admission as schema_admission
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.server.limits import ConnectionGuard, limits_for
from magnetar.broker.service import BrokerService
from magnetar.broker.subscriptions.consumer import ServerConsumer, consumer_metadata
from magnetar.broker.subscriptions.cursor_ops import LATEST_ID, mark_delete_for_publish_time
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.broker.topics.kinds import AnySubscription, AnyTopic
from magnetar.broker.topics.missing_namespace import require_namespace_of
from magnetar.broker.topics.namespace_topics import topics_of_namespace
from magnetar.broker.topics.non_persistent import NonPersistentSubscription, NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import ServerProducer
from magnetar.broker.topics.producer_access import access_mode_of, epoch_of, producer_metadata
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol import commands as c
from magnetar.protocol import fields
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import EntryMeta, decode_entry
from magnetar.protocol.errors import (
    AlreadyClosed,
    AuthenticationError,
    ChecksumError,
    InvalidCommand,
    InvalidMessage,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    ProducerBusy,
    TopicNotFound,
    UnknownCommand,
    Unsupported,
)
from magnetar.protocol.framing import FrameDecoder, encode_frames
from magnetar.protocol.topic_name import TopicName, check_namespace, valid_subscription

log = logging.getLogger(__name__)
FATAL_LINGER_SECONDS = 2.0  # a refused connection is closed by then even if the client keeps it open
_ids = itertools.count(1)
_MAX_BATCH_MESSAGES = 2**31 - 1  # meta.n of one entry
_MAX_EPOCH = 2**63 - 1  # a producer's topic epoch
# Generated producer names carry this process's token: names must not repeat across brokers and
# restarts, since deduplication is keyed by them.
_NAME_TOKEN = secrets.token_hex(3)


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


class ServerConnection(asyncio.Protocol):
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.id = next(_ids)
        self.transport: asyncio.Transport | None = None
        # Header room on top of the largest payload, so an over-sized message is refused with
        # MessageTooLarge (a clean per-message error) rather than by closing the connection.
        self.decoder = FrameDecoder(service.config.max_message_size + 64 * 1024)
        self.producers: dict[int, tuple[ServerProducer, AnyTopic]] = {}
        self.consumers: dict[int, tuple[ServerConsumer, AnySubscription, AnyTopic]] = {}
        # Producer and consumer ids whose creation is under way: a second create with the same id
        # is refused at once, else both would pass the check and the first would leak (found by
        # tests/fuzz/test_broker.py: pipelined creates of one id).
        self._creating: set[tuple[str, int]] = set()
        # Of those, the ones the client closed before their creation was complete: as in Pulsar,
        # the close succeeds and the creation then fails, instead of the producer or consumer
        # appearing after its close (found by tests/fuzz/test_broker.py at 1,000,000 inputs: a
        # send after such a close was stored on the topic the client had closed).
        self._closed_while_creating: set[tuple[str, int]] = set()
        self._out: list[Mapping[str, object]] = []
        self._flush_scheduled = False
        self._closed = False
        # Publish rate limits stop reading from this connection for a while (rate_limit.py).
        self.read_throttle = ReadThrottle(lambda: self.transport, service.metrics.publish_throttled_seconds.inc)
        # Authentication (broker/auth/session.py, WIRE.md R60-R63): off unless configured.
        self.auth = ConnectionAuth(
            authentication_for(service, service.config),
            lambda: self.write(c.auth_challenge()),
            lambda reason: self._fatal(AuthenticationError.code, reason),
        )
        # Limits against abuse (broker/server/limits.py, WIRE.md R87-R91): connection caps at accept, a
        # small frame cap and a timeout until an authenticated connect, producers/consumers caps.
        self.guard = ConnectionGuard(
            limits_for(service, service.config), self.auth.authentication is not None, self._fatal
        )
        if self.guard.pre_auth_frame_size is not None:
            self.decoder.max_frame_size = min(self.decoder.max_frame_size, self.guard.pre_auth_frame_size)
        # Each handler takes its command's TypedDict; ``_run`` checked the required fields.
        self._handlers: dict[str, Callable[[Any], None]] = {
            c.CONNECT: self._connect,
            c.PING: self._ping,
            c.PONG: self._noop,
            c.LOOKUP: self._lookup,
            c.PARTITIONED_METADATA: self._partitioned_metadata,
            c.PRODUCER: self._producer,
            c.SEND: self._send,
            c.CLOSE_PRODUCER: self._close_producer,
            c.SUBSCRIBE: self._subscribe,
            c.FLOW: self._flow,
            c.ACK: self._ack,
            c.REDELIVER: self._redeliver,
            c.CLOSE_CONSUMER: self._close_consumer,
            c.UNSUBSCRIBE: self._unsubscribe,
            c.SEEK: self._seek,
            c.SEEK_PUBLISH_TIME: self._seek_publish_time,
            c.GET_LAST_MESSAGE_ID: self._get_last_message_id,
            c.GET_TOPICS_OF_NAMESPACE: self._get_topics_of_namespace,
            c.GET_SCHEMA: self._get_schema,
            c.AUTH_RESPONSE: self._auth_response,
        }

    @property
    def auth_role(self) -> str | None:
        """The role this connection authenticated as (None with authentication off)."""
        return self.auth.role

    # ------------------------------------------------------------------ transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not an asyncio.Transport subclass, but has its methods).
        self.transport = cast(asyncio.Transport, transport)
        if not self.guard.on_accept(self.transport):  # over a connection cap: closed, never read
            self._closed = True
            return
        self.service.connections.add(self)
        self.service.metrics.connections.inc()

    def eof_received(self) -> bool | None:
        """The client closed its side: close ours through the broker's closing queue, which spreads
        thousands of such closes over loop turns (closing.py). TLS transports close themselves
        (asyncio ignores True from a TLS protocol). The connection's places under the connection
        caps are given back now, not at the close: a client that reconnects at once is admitted."""
        self.guard.on_lost()
        if self.transport is None or self.transport.get_extra_info("sslcontext") is not None:
            return None
        self.service.closing_connections.add(self.transport)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self not in self.service.connections:  # refused at accept (limits.py): nothing counted
            self._closed = True
            return
        self._closed = True
        self.guard.on_lost()
        self.read_throttle.close()
        self.auth.close()
        self.service.connections.discard(self)
        self.service.metrics.connections.dec()
        if self.decoder.buffered:
            log.info("connection %s closed mid-frame (%d bytes discarded)", self.id, self.decoder.buffered)
        for producer, topic in self.producers.values():
            topic.remove_producer(producer)
        for consumer, sub, _ in self.consumers.values():
            sub.remove_consumer(consumer)
        self.producers.clear()
        self.consumers.clear()

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self._flush()
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection without flushing: used when this broker must stop answering now."""
        self._out = []
        if self.transport is not None:
            self.transport.abort()
        self._closed = True

    def write(self, frame: Mapping[str, object]) -> None:
        """Queue a frame; everything queued in one loop iteration goes out in one write."""
        if self._closed:
            return
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            if not write_batch.defer(self._flush):
                asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self.transport is not None and not self._closed:
            try:
                data = encode_frames(out)
            except (OverflowError, TypeError, ValueError):  # one frame msgpack cannot carry
                data = self._encode_each(out)
            self.transport.write(data)

    def _encode_each(self, frames: list[Mapping[str, object]]) -> bytes:
        """Encode frame by frame, answering a frame that cannot be encoded with an error: one bad
        answer must not silence the connection (its frames stayed queued and failed every flush)."""
        parts = []
        for frame in frames:
            try:
                parts.append(encode_frames([frame]))
            except (OverflowError, TypeError, ValueError):
                log.exception("connection %s: cannot encode a %r frame: %.300r", self.id, frame.get("t"), frame)
                rid = frame.get("rid")
                rid = rid if isinstance(rid, int) and -(2**63) <= rid < 2**64 else None
                parts.append(
                    encode_frames([c.error_frame(rid, "UnknownError", f"unencodable {frame.get('t')!r} answer")])
                )
        return b"".join(parts)

    def _fatal(self, code: str, message: str, rid: int | None = None) -> None:
        log.info("closing connection %s: %s: %s", self.id, code, message)
        self.service.metrics.protocol_errors.inc()
        self.write(c.error_frame(rid, code, message))
        self._flush()
        self._closed = True  # from here on, what the client still sends is read and discarded
        transport = self.transport
        if transport is None:
            return
        if transport.can_write_eof():
            # Closing with unread input would make the kernel reset the connection, which can
            # discard the error frame before the client reads it: half-close instead, and let the
            # client's own close (or the linger bound) end the connection.
            transport.write_eof()
            asyncio.get_running_loop().call_later(FATAL_LINGER_SECONDS, transport.close)
        else:
            transport.close()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            frames = self.decoder.feed(data)
        except MagnetarError as exc:
            self._run(getattr(exc, "frames", []))
            self._fatal(str(exc.code), str(exc))
            return
        self._run(frames)

    def _run(self, frames: list[Any]) -> None:
        for i, cmd in enumerate(frames):
            if self._closed:
                return
            if self.read_throttle.paused:  # over a publish rate: the rest of this read waits too
                self.read_throttle.defer(frames[i:], self._run)
                return
            problem = c.missing_fields(cmd)
            if problem is not None:
                self._fatal(InvalidCommand.code, problem)
                return
            if not self.auth.admits(cmd["t"]):  # R61: nothing before an authenticated connect
                rid = cmd.get("rid")
                message = f"Authentication required: {cmd['t']!r} before an authenticated connect"
                self._fatal(AuthenticationError.code, message, rid if isinstance(rid, int) else None)
                return
            handler = self._handlers.get(cmd["t"])
            if handler is None:
                self._fatal(UnknownCommand.code, f"unknown command {cmd['t']!r}")
                return
            try:
                handler(cmd)
            except MagnetarError as exc:
                self.write(c.error_frame(cmd.get("rid"), str(exc.code), str(exc)))
            except (TypeError, ValueError, KeyError, OverflowError) as exc:  # a field of the wrong type
                self._fatal(InvalidCommand.code, f"bad field in {cmd['t']!r}: {exc}")
                return
            except Exception as exc:  # a handler bug: still one error frame, and only this connection closes
                log.exception("command %r failed on connection %s", cmd["t"], self.id)
                self._fatal(InvalidCommand.code, f"bad command {cmd['t']!r}: {exc!r}")
                return

    # ------------------------------------------------------------------ helpers
    def _spawn(self, rid: int | None, coro: Any) -> None:
        """Run an async command; its MagnetarError becomes an error frame for ``rid``."""

        async def run() -> None:
            try:
                await coro
            except MagnetarError as exc:
                self.write(c.error_frame(rid, str(exc.code), str(exc)))
            except Exception as exc:
                log.exception("command failed on connection %s", self.id)
                self.write(c.error_frame(rid, "UnknownError", repr(exc)))

        asyncio.get_running_loop().create_task(run())

    def topic_unloaded(self, key: str) -> None:
        """The topic went away under our producers and consumers: close them (clients reconnect)."""
        for pid, (_producer, topic) in list(self.producers.items()):
            if topic.name == key:
                del self.producers[pid]
                self.write(c.close_producer_pushed(pid))
        for cid, (_consumer, _sub, topic) in list(self.consumers.items()):
            if topic.name == key:
                del self.consumers[cid]
                self.write(c.close_consumer_pushed(cid))

    # ------------------------------------------------------------------ commands
    def _noop(self, cmd: c.Pong) -> None:
        pass

    def _ping(self, cmd: c.Ping) -> None:
        self.write(c.pong())

    def _connect(self, cmd: c.Connect) -> None:
        try:
            self.auth.on_connect(with_peer_certificate(cmd, self.transport))  # R92: mTLS role
        except AuthenticationError as exc:  # R61: refused, and the connection closes
            self._fatal(str(exc.code), str(exc), cmd["rid"])
            return
        self.guard.on_authenticated()  # R90: full-size frames from now on
        self.decoder.max_frame_size = self.service.config.max_message_size + 64 * 1024
        self.write(c.connected(cmd["rid"], __version__, c.PROTOCOL_VERSION, self.service.config.max_message_size))

    def _auth_response(self, cmd: c.AuthResponse) -> None:
        """R62: fresh credentials after ``auth_challenge``; refused ones close the connection."""
        try:
            self.auth.on_response(cmd)
        except AuthenticationError as exc:
            self._fatal(str(exc.code), str(exc))

    def _lookup(self, cmd: c.Lookup) -> None:
        name = TopicName.parse(cmd["topic"])
        limits = self.guard.limits
        limits.lookup_started()  # R89: ServiceNotReady past maxConcurrentLookupRequest

        async def run() -> None:
            try:
                await authz.check_lookup(self.service, name, self.auth_role)  # R70
                # R110: the addresses of the advertised listener the client named
                url, redirect, url_tls = await self.service.lookup_with_tls(name, cmd.get("listener_name"))
            finally:
                limits.lookup_done()
            self.write(c.lookup_response(cmd["rid"], url, redirect, url_tls))

        self._spawn(cmd["rid"], run())

    def _partitioned_metadata(self, cmd: c.PartitionedMetadata) -> None:
        name = TopicName.parse(cmd["topic"])
        limits = self.guard.limits
        limits.lookup_started()  # R89, as lookup (Pulsar counts both)

        async def run() -> None:
            try:
                await authz.check_partitioned_metadata(self.service, name, self.auth_role)  # R70
                await require_namespace_of(self.service.resources, name)  # TopicNotFound, as Pulsar's
                # Topic records belong to the persistent domain: a non-persistent topic is never partitioned.
                partitions = await self.service.resources.partitions(name) if name.is_persistent else 0
            finally:
                limits.lookup_done()
            self.write(c.partitioned_metadata_response(cmd["rid"], partitions))

        self._spawn(cmd["rid"], run())

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

    def _reserving(self, key: tuple[str, int], create: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
        """Mark the id as being created now (see ``_creating``), until ``create`` is done."""
        self._creating.add(key)
        return self._released(key, create)

    async def _released(self, key: tuple[str, int], create: Coroutine[Any, Any, None]) -> None:
        try:
            await create
        finally:
            self._creating.discard(key)
            self._closed_while_creating.discard(key)

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
        positions = [Position(*p) for p in fields.positions_of(cmd["positions"])]
        batch_acks = [
            (Position(*p), count, indexes) for p, count, indexes in fields.batch_acks_of(cmd.get("batch_acks"))
        ]
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
        positions = None if raw is None else [Position(*p) for p in fields.positions_of(raw)]
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

    def _get_schema(self, cmd: c.GetSchema) -> None:
        """R121: a version of the topic's schema (the newest live one without ``version``); any
        broker answers, the registry being in the metadata store."""
        name = TopicName.parse(cmd["topic"])
        raw = cmd.get("version")
        version = None if raw is None else fields.integer(raw, "version")

        async def run() -> None:
            await authz.check_lookup(self.service, name, self.auth_role)  # as lookup (R70)
            found = await SchemaRegistry(self.service.store).get(name, version)
            if found is None:
                which = "latest" if version is None else str(version)
                raise TopicNotFound(f"no schema version {which} for topic {name}")
            self.write(c.get_schema_response(cmd["rid"], found.version, found.info.to_wire()))

        self._spawn(cmd["rid"], run())

    def _get_topics_of_namespace(self, cmd: c.GetTopicsOfNamespace) -> None:
        """R20g, R107: any broker of a cluster can answer (``namespace_topics``)."""
        namespace = str(cmd["namespace"])
        parts = namespace.split("/")
        if len(parts) != 2 or not all(parts):
            raise InvalidCommand(f"namespace must be tenant/namespace, got {namespace!r}")
        check_namespace(*parts)  # R92
        mode = str(cmd.get("mode", c.TOPICS_PERSISTENT))
        if mode not in c.TOPICS_MODES:  # R107
            raise InvalidCommand(f"mode must be one of {', '.join(c.TOPICS_MODES)}, got {mode[:40]!r}")

        async def run() -> None:
            await authz.check_topics_of_namespace(self.service, parts[0], parts[1], self.auth_role)  # R70
            topics = await topics_of_namespace(self.service, parts[0], parts[1], mode)
            self.write(c.topics_of_namespace_response(cmd["rid"], topics))

        self._spawn(cmd["rid"], run())
