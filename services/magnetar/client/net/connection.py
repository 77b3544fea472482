"""One TCP connection to one broker: a reader task, a table of pending requests, coalesced writes.

Shape (STYLE.md, after nats.py / aiokafka): bytes in go through the sans-IO ``FrameDecoder`` in a
single reader task, which resolves request futures by ``rid`` and routes pushed frames
(``send_receipt``, ``send_error``, ``message``) to the producer or consumer that owns the id.
Bytes out are *not* written per command: ``write`` appends the command to a list and schedules one
flush for the end of the current loop iteration, so a burst of sends, flows and acks made in one
iteration leaves in one ``transport.write`` (one syscall) instead of one each. That, and doing no
per-frame allocation beyond the command map itself, is most of what keeps the client near its
throughput target.

A connection never reconnects itself: when it drops, every pending request fails with
``NotConnected`` and the producers and consumers registered on it are told (``_connection_lost``),
and they re-attach through a lookup (``reconnect.Attachment``), possibly to another broker. The
broker's pushed ``close_producer`` / ``close_consumer`` are routed the same way (``_closed_by_broker``).

Keep-alive, as Pulsar's: when nothing has been read for one ``keep_alive_interval`` the client
sends a ``ping``; if the next interval passes with still nothing read, the broker is taken for dead
(paused, or cut off without a FIN) and the connection is closed, which starts the reconnection.
Without it a producer whose broker was SIGSTOPped would wait for TCP to give up, for many minutes.
The reader only sets a flag per read; the timer does the rest, so the hot path pays nothing.

Security (WIRE.md R60-R62, R65-R67): a ``magnetar+ssl://`` URL is dialled with the client's
``ssl.SSLContext`` (``tls.TlsOptions``), and is a different pool key from ``magnetar://`` on the same
host and port. The client's authentication provider (``auth``) puts credentials in every
``connect`` and answers the broker's ``auth_challenge`` with fresh ones, so a rotated token keeps a
long-lived connection alive.

A wrong port fails at once with ``ConnectError`` and one line saying what answered, instead of
being retried until the operation timeout: an answer starting with ``HTTP/`` is a web server (the
admin port), and a connection closed without a byte during the handshake is checked for a TLS
listener (a TLS handshake is tried on the same port) before it is taken for a broker going away.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from typing import Any, Protocol

from magnetar import write_batch
from magnetar.client.net.auth import AuthProvider
from magnetar.client.net.connect_deadline import ConnectFailed
from magnetar.client.net.service_url import is_tls_url, normalize_url, parse_service_url
from magnetar.client.net.tls import handshake_error
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import (
    ConnectError,
    MagnetarError,
    NotConnected,
    Timeout,
    error_from_wire,
)
from magnetar.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    FrameDecoder,
    encode_frames,
)

log = logging.getLogger(__name__)

CLIENT_VERSION = "magnetar-python-0.1.0"
_READ_SIZE = 256 * 1024


class ProducerHandler(Protocol):
    def _on_receipt(self, seq: int, ledger: int, entry: int) -> None: ...
    def _on_send_error(self, seq: int, exc: MagnetarError) -> None: ...
    def _connection_lost(self, conn: Connection, exc: MagnetarError) -> None: ...
    def _closed_by_broker(self, conn: Connection) -> None: ...


class ConsumerHandler(Protocol):
    def _on_message(self, frame: cmds.Message) -> None: ...

    def _on_active_change(self, is_active: bool) -> None: ...
    def _connection_lost(self, conn: Connection, exc: MagnetarError) -> None: ...
    def _closed_by_broker(self, conn: Connection) -> None: ...


class Connection:
    """A handshaken connection; create with ``await Connection.open(url)``."""

    def __init__(
        self,
        url: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        operation_timeout: float,
        keep_alive_interval: float = 30.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        auth: AuthProvider | None = None,
    ) -> None:
        self.url = url
        self.auth = auth
        self.operation_timeout = operation_timeout
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(max_frame_size)
        # Answers are typed by the caller of ``request`` (``answer: cmds.Connected = ...``).
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._out: list[Mapping[str, object]] = []
        self._next_rid = 0
        self._closed_exc: MagnetarError | None = None
        self._heard = True  # something was read since the last keep-alive tick
        self._answered = False  # the broker sent at least one byte
        self._ping_outstanding = False
        self._keep_alive = keep_alive_interval
        self._keep_alive_handle: asyncio.TimerHandle | None = None
        if keep_alive_interval > 0:
            self._keep_alive_handle = self._loop.call_later(keep_alive_interval, self._keep_alive_tick)
        self._reader_task = self._loop.create_task(self._read_loop(), name=f"magnetar-reader {url}")

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        operation_timeout: float,
        connect_timeout: float = 10.0,
        keep_alive_interval: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        auth: AuthProvider | None = None,
    ) -> Connection:
        """Connect and run the ``connect``/``connected`` handshake, both within ``connect_timeout``.

        The handshake is bounded by the connect timeout too, not the (longer) operation timeout:
        a paused broker accepts TCP connections (the kernel does) but never answers, and a
        reconnecting client should move on to the next broker quickly. A ``magnetar+ssl://`` URL
        needs ``ssl_context``; a failed TLS handshake raises ``tls.ConnectError`` (not retryable),
        refused credentials ``AuthenticationError`` (not retryable either).
        """
        host, port = parse_service_url(url)
        tls = is_tls_url(url)
        if tls and ssl_context is None:
            raise ValueError(f"{url} is a TLS URL but the client has no TLS settings")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    limit=_READ_SIZE * 4,
                    ssl=ssl_context if tls else None,
                    server_hostname=host if tls else None,
                ),
                connect_timeout,
            )
        except TimeoutError as exc:
            raise ConnectFailed(f"connecting to {url} timed out after {connect_timeout}s") from exc
        except ssl.SSLError as exc:
            raise handshake_error(url, exc) from exc
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {url}: {exc}") from exc
        conn = cls(
            normalize_url(url),
            reader,
            writer,
            operation_timeout=operation_timeout,
            keep_alive_interval=keep_alive_interval,
            auth=auth,
        )
        try:
            answer: cmds.Connected = await conn.request(conn._connect_command(), connect_timeout)
        except NotConnected as exc:
            conn.close()
            if not tls and not conn._answered:  # a TLS listener drops a plaintext hello without a word
                if await _speaks_tls(host, port, connect_timeout):
                    raise ConnectError(
                        f"{url} is a TLS port: connect with a magnetar+ssl:// (or pulsar+ssl://) URL or use_tls=True"
                    ) from exc
                raise NotConnected(f"{exc} during the handshake (a TLS port needs a magnetar+ssl:// URL)") from exc
            raise
        except BaseException:
            conn.close()
            raise
        conn.server_version = str(answer.get("server_version", ""))
        conn.max_message_size = int(answer.get("max_message_size") or DEFAULT_MAX_MESSAGE_SIZE)
        return conn

    def _connect_command(self) -> cmds.Connect:
        """``connect`` with the provider's current credentials (a supplier is called again)."""
        auth = self.auth
        method = auth.auth_method if auth is not None else None
        if auth is None or method is None:
            return cmds.connect(CLIENT_VERSION)
        return cmds.connect(CLIENT_VERSION, auth_method=method, auth_data=auth.auth_data())

    def _answer_challenge(self, challenge: cmds.AuthChallenge) -> None:
        """The broker's credentials check failed (the token expired): send fresh credentials.

        Without a provider, or when it fails, nothing is sent and the broker closes the
        connection after its timeout; producers and consumers then reconnect as after any drop."""
        auth = self.auth
        method = auth.auth_method if auth is not None else None
        if auth is None or method is None:
            log.error(
                "broker %s asked for credentials (%s) but the client has none", self.url, challenge.get("auth_method")
            )
            return
        try:
            data = auth.auth_data()
        except Exception as exc:  # a supplier that fails: a file gone, a secret store down
            log.error("cannot answer the auth challenge of %s: the token supplier failed: %r", self.url, exc)
            return
        self.write(cmds.auth_response(method, data))

    # ---------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        self._producers[producer_id] = handler

    def unregister_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def holds_producer(self, producer_id: int, handler: ProducerHandler) -> bool:
        """Whether ``producer_id`` is still ``handler``'s here: a ``close_producer`` pushed right after
        the broker's answer is dispatched before the attaching task resumes, and takes it out."""
        return self._producers.get(producer_id) is handler

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        self._consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    def holds_consumer(self, consumer_id: int, handler: ConsumerHandler) -> bool:
        """``holds_producer`` for consumers (a ``close_consumer`` pushed right after ``success``)."""
        return self._consumers.get(consumer_id) is handler

    # ---------------------------------------------------------------- writing

    def write(self, cmd: Mapping[str, object]) -> None:
        """Queue a command; everything queued in this loop iteration goes out in one write."""
        if self._closed_exc is not None:
            raise self._closed_exc
        out = self._out
        out.append(cmd)
        if len(out) == 1 and not write_batch.defer(self._flush):
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        out = self._out
        if not out or self._closed_exc is not None:
            out.clear()
            return
        self._out = []
        self._writer.write(encode_frames(out))

    def request_future(self, cmd: cmds.Request) -> asyncio.Future[Any]:
        """Send a request and return the future its answer resolves (errors become exceptions).

        ``cmd["rid"]`` is set here (a constructor's placeholder is overwritten in place, so the
        ``rid`` stays the last key on the wire)."""
        self._next_rid += 1
        rid = cmd["rid"] = self._next_rid
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._pending[rid] = fut
        try:
            self.write(cmd)
        except MagnetarError:
            del self._pending[rid]
            raise
        return fut

    def request_nowait(self, cmd: cmds.Request) -> None:
        """Send a best-effort request whose answer nobody waits for (a failure is not an error).

        Used to tidy up on the broker (close a registration we no longer want) without making
        the caller wait for, or handle, the outcome.
        """
        try:
            fut = self.request_future(cmd)
        except MagnetarError:
            return
        fut.add_done_callback(_ignore_outcome)

    async def request(self, cmd: cmds.Request, limit_seconds: float | None = None) -> Any:
        """Send a request and wait for its answer, at most ``limit_seconds`` (default: operation timeout).

        The answer is the request's response command (``connected``, ``lookup_response``, ...,
        ``success``); callers annotate it with its TypedDict."""
        fut = self.request_future(cmd)
        rid = cmd["rid"]
        limit = self.operation_timeout if limit_seconds is None else limit_seconds
        try:
            return await asyncio.wait_for(fut, limit)
        except TimeoutError as exc:
            raise Timeout(f"{cmd['t']} to {self.url} got no answer within {limit}s") from exc
        finally:
            self._pending.pop(rid, None)

    # ---------------------------------------------------------------- reading

    async def _read_loop(self) -> None:
        exc: MagnetarError = NotConnected(f"connection to {self.url} closed by the broker")
        read = self._reader.read
        feed = self._decoder.feed
        dispatch = self._dispatch
        try:
            data = await read(_READ_SIZE)
            self._answered = bool(data)
            if data.startswith(b"HTTP/"):  # read as a frame, b"HTTP" is a length of 1213486160
                exc = ConnectError(
                    f"{self.url} answered in HTTP: that is a web (admin) port, not a broker's binary port; "
                    "use the broker service URL (magnetar://host:6650) or an http:// service URL"
                )
                return
            while data:
                self._heard = True
                for frame in feed(data):
                    dispatch(frame)
                data = await read(_READ_SIZE)
        except MagnetarError as err:  # malformed or oversized frame from the broker
            log.error("protocol error on connection to %s: %s", self.url, err)
            exc = NotConnected(f"connection to {self.url} dropped: {err}")
        except (OSError, asyncio.IncompleteReadError) as err:
            exc = NotConnected(f"connection to {self.url} lost: {err}")
        except asyncio.CancelledError:
            exc = NotConnected(f"connection to {self.url} closed")
            raise
        finally:
            self._shutdown(exc)

    def _dispatch(self, frame: Any) -> None:
        """Route one decoded frame; by its ``t`` it is taken as that command's TypedDict."""
        t = frame.get("t")
        if t == cmds.MESSAGE:
            message: cmds.Message = frame
            consumer = self._consumers.get(message["consumer_id"])
            if consumer is not None:
                consumer._on_message(message)
            return
        if t == cmds.SEND_RECEIPT:
            receipt: cmds.SendReceipt = frame
            producer = self._producers.get(receipt["producer_id"])
            if producer is not None:
                producer._on_receipt(receipt["seq"], receipt["ledger"], receipt["entry"])
            return
        if t == cmds.SEND_ERROR:
            send_error: cmds.SendError = frame
            producer = self._producers.get(send_error["producer_id"])
            if producer is not None:
                producer._on_send_error(
                    send_error["seq"], error_from_wire(send_error.get("code", ""), send_error.get("message", ""))
                )
            return
        if t == cmds.PING:
            self.write(cmds.pong())
            return
        if t == cmds.PONG:
            return
        if t == cmds.CLOSE_PRODUCER and "rid" not in frame:  # pushed: topic unloaded or moved
            producer_closed: cmds.CloseProducerPushed = frame
            producer = self._producers.pop(producer_closed.get("producer_id", -1), None)
            if producer is not None:
                producer._closed_by_broker(self)
            return
        if t == cmds.CLOSE_CONSUMER and "rid" not in frame:
            consumer_closed: cmds.CloseConsumerPushed = frame
            consumer = self._consumers.pop(consumer_closed.get("consumer_id", -1), None)
            if consumer is not None:
                consumer._closed_by_broker(self)
            return
        if t == cmds.AUTH_CHALLENGE:
            challenge: cmds.AuthChallenge = frame
            self._answer_challenge(challenge)
            return
        if t == cmds.ACTIVE_CONSUMER_CHANGE:
            change: cmds.ActiveConsumerChange = frame
            consumer = self._consumers.get(change.get("consumer_id", -1))
            if consumer is not None:
                consumer._on_active_change(bool(change.get("is_active")))
            return
        rid = frame.get("rid")
        if rid is None:
            if t == cmds.ERROR:
                err = error_from_wire(frame.get("code", ""), frame.get("message", ""))
                log.error("broker %s reported a connection error: %r", self.url, err)
            else:
                log.warning("unexpected frame without rid from %s: %r", self.url, t)
            return
        fut = self._pending.pop(rid, None)
        if fut is None or fut.done():
            return
        if t == cmds.ERROR:
            fut.set_exception(error_from_wire(frame.get("code", ""), frame.get("message", "")))
        else:
            fut.set_result(frame)

    # ---------------------------------------------------------------- keep-alive

    def _keep_alive_tick(self) -> None:
        self._keep_alive_handle = None
        if self._closed_exc is not None:
            return
        if self._heard:
            self._heard = False
            self._ping_outstanding = False
        elif self._ping_outstanding:
            log.warning("broker %s did not answer a keep-alive ping within %.1fs", self.url, self._keep_alive)
            self._shutdown(NotConnected(f"broker {self.url} stopped answering (keep-alive ping unanswered)"))
            self._reader_task.cancel()
            return
        else:
            self._ping_outstanding = True
            self.write(cmds.ping())
        self._keep_alive_handle = self._loop.call_later(self._keep_alive, self._keep_alive_tick)

    # ---------------------------------------------------------------- closing

    def _shutdown(self, exc: MagnetarError) -> None:
        if self._closed_exc is not None:
            return
        self._closed_exc = exc
        if self._keep_alive_handle is not None:
            self._keep_alive_handle.cancel()
            self._keep_alive_handle = None
        self._out.clear()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer._connection_lost(self, exc)
        for consumer in consumers.values():
            consumer._connection_lost(self, exc)
        self._writer.close()

    def close(self) -> None:
        """Flush what is queued, then close; pending requests fail with ``NotConnected``."""
        if self._closed_exc is None:
            self._flush()
        self._shutdown(NotConnected(f"connection to {self.url} closed by the client"))
        self._reader_task.cancel()

    async def wait_closed(self) -> None:
        try:
            await self._reader_task
        except asyncio.CancelledError:
            pass
        try:
            await self._writer.wait_closed()
        except OSError:
            pass


async def _speaks_tls(host: str, port: int, limit: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake (any certificate): only asked after a
    plaintext handshake was dropped without a word, to tell a TLS port from a broker going away."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host), min(limit, 5.0)
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass
    return True


def _ignore_outcome(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()
