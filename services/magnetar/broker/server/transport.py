"""The transport side of a client connection: frames in, frames out, and the command loop.

``ServerConnection`` (``connection.py``) is this class plus one mixin per group of commands
(``producer_commands``, ``consumer_commands``, ``lookup_commands``), each in its own module so that
a reader finds the producer path, the consumer path and the lookups apart from the byte handling.
Here: the connection's state (its producers and consumers, ids being created, limits,
authentication, the publish throttle), reading and decoding frames, running each command through
the handler table the connection builds (``_handlers``), buffering outgoing frames to write them
once per loop iteration, refusing a connection with one error frame (``_fatal``), and running a
command's async part with its errors answered (``_spawn``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast

from magnetar import write_batch
from magnetar.broker.auth.providers import authentication_for
from magnetar.broker.auth.session import ConnectionAuth
from magnetar.broker.policies.rate_limit import ReadThrottle
from magnetar.broker.server.limits import ConnectionGuard, limits_for
from magnetar.broker.service import BrokerService
from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.topics.kinds import AnySubscription, AnyTopic
from magnetar.broker.topics.producer import ServerProducer
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError, InvalidCommand, MagnetarError, UnknownCommand
from magnetar.protocol.framing import FrameDecoder, encode_frames

log = logging.getLogger(__name__)
FATAL_LINGER_SECONDS = 2.0  # a refused connection is closed by then even if the client keeps it open
_ids = itertools.count(1)


class ConnectionTransport(asyncio.Protocol):
    """A client connection's state and byte handling; the commands are its subclasses' methods."""

    # Command name -> handler, built by ``ServerConnection`` from the mixins' methods.
    _handlers: dict[str, Callable[[Any], None]]

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
        thousands of such closes over loop turns (``loop/closing.py``). TLS transports close themselves
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
