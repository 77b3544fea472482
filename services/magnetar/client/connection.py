"""One TCP connection to one broker: a reader task, a table of pending requests, coalesced writes.

Shape (STYLE.md, after nats.py / aiokafka): bytes in go through the sans-IO ``FrameDecoder`` in a
single reader task, which resolves request futures by ``rid`` and routes pushed frames
(``send_receipt``, ``send_error``, ``message``) to the producer or consumer that owns the id.
Bytes out are *not* written per command: ``write`` appends the command to a list and schedules one
flush for the end of the current loop iteration, so a burst of sends, flows and acks made in one
iteration leaves in one ``transport.write`` (one syscall) instead of one each. That, and doing no
per-frame allocation beyond the command map itself, is most of what keeps the client near its
throughput target.

Reconnection is not attempted here: when the connection drops every pending request fails with
``NotConnected`` and the producers and consumers bound to it are told, so callers see the failure
instead of waiting forever. (Pulsar reconnects transparently; see the package notes.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import (
    InvalidTopicName,
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

DEFAULT_PORT = 6650
CLIENT_VERSION = "magnetar-python-0.1.0"
_READ_SIZE = 256 * 1024
_SCHEMES = ("magnetar://", "pulsar://", "tcp://")


def parse_service_url(url: str) -> tuple[str, int]:
    """``magnetar://host:port`` (or ``pulsar://``, ``tcp://``, bare ``host:port``) → (host, port)."""
    rest = url.strip()
    for scheme in _SCHEMES:
        if rest.startswith(scheme):
            rest = rest[len(scheme) :]
            break
    else:
        if "://" in rest:
            raise InvalidTopicName(f"unsupported service URL scheme in {url!r}")
    rest = rest.rstrip("/")
    if "," in rest:  # Pulsar allows several hosts; we take the first, as a bootstrap address.
        rest = rest.split(",", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep:
        return rest, DEFAULT_PORT
    return host.strip("[]"), int(port)


def normalize_url(url: str) -> str:
    """Canonical key for the connection pool, so redirects to the same broker share a connection."""
    host, port = parse_service_url(url)
    return f"magnetar://{host}:{port}"


class ProducerHandler(Protocol):
    def _on_receipt(self, seq: int, ledger: int, entry: int) -> None: ...
    def _on_send_error(self, seq: int, exc: MagnetarError) -> None: ...
    def _on_connection_closed(self, exc: MagnetarError) -> None: ...


class ConsumerHandler(Protocol):
    def _on_message(self, frame: dict[str, Any]) -> None: ...
    def _on_connection_closed(self, exc: MagnetarError) -> None: ...


class Connection:
    """A handshaken connection; create with ``await Connection.open(url)``."""

    def __init__(
        self,
        url: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        operation_timeout: float,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.url = url
        self.operation_timeout = operation_timeout
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._out: list[Any] = []
        self._next_rid = 0
        self._closed_exc: MagnetarError | None = None
        self._reader_task = self._loop.create_task(self._read_loop(), name=f"magnetar-reader {url}")

    @classmethod
    async def open(cls, url: str, *, operation_timeout: float, connect_timeout: float = 10.0) -> Connection:
        """Connect and run the ``connect``/``connected`` handshake."""
        host, port = parse_service_url(url)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=_READ_SIZE * 4), connect_timeout
            )
        except TimeoutError as exc:
            raise Timeout(f"connecting to {url} timed out after {connect_timeout}s") from exc
        except OSError as exc:
            raise NotConnected(f"cannot connect to {url}: {exc}") from exc
        conn = cls(normalize_url(url), reader, writer, operation_timeout=operation_timeout)
        try:
            answer = await conn.request(
                {
                    "t": cmds.CONNECT,
                    "client_version": CLIENT_VERSION,
                    "protocol_version": cmds.PROTOCOL_VERSION,
                }
            )
        except BaseException:
            conn.close()
            raise
        conn.server_version = str(answer.get("server_version", ""))
        conn.max_message_size = int(answer.get("max_message_size") or DEFAULT_MAX_MESSAGE_SIZE)
        return conn

    # ---------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        self._producers[producer_id] = handler

    def unregister_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        self._consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    # ---------------------------------------------------------------- writing

    def write(self, cmd: dict[str, Any]) -> None:
        """Queue a command; everything queued in this loop iteration goes out in one write."""
        if self._closed_exc is not None:
            raise self._closed_exc
        out = self._out
        out.append(cmd)
        if len(out) == 1:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        out = self._out
        if not out or self._closed_exc is not None:
            out.clear()
            return
        self._out = []
        self._writer.write(encode_frames(out))

    def request_future(self, cmd: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Send a request and return the future its answer resolves (errors become exceptions)."""
        self._next_rid += 1
        rid = cmd["rid"] = self._next_rid
        fut: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[rid] = fut
        try:
            self.write(cmd)
        except MagnetarError:
            del self._pending[rid]
            raise
        return fut

    async def request(self, cmd: dict[str, Any], limit_seconds: float | None = None) -> dict[str, Any]:
        """Send a request and wait for its answer, at most ``limit_seconds`` (default: operation timeout)."""
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
            while True:
                data = await read(_READ_SIZE)
                if not data:
                    break
                for frame in feed(data):
                    dispatch(frame)
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

    def _dispatch(self, frame: dict[str, Any]) -> None:
        t = frame.get("t")
        if t == cmds.MESSAGE:
            consumer = self._consumers.get(frame["consumer_id"])
            if consumer is not None:
                consumer._on_message(frame)
            return
        if t == cmds.SEND_RECEIPT:
            producer = self._producers.get(frame["producer_id"])
            if producer is not None:
                producer._on_receipt(frame["seq"], frame["ledger"], frame["entry"])
            return
        if t == cmds.SEND_ERROR:
            producer = self._producers.get(frame["producer_id"])
            if producer is not None:
                producer._on_send_error(frame["seq"], error_from_wire(frame.get("code", ""), frame.get("message", "")))
            return
        if t == cmds.PING:
            self.write({"t": cmds.PONG})
            return
        if t == cmds.PONG:
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

    # ---------------------------------------------------------------- closing

    def _shutdown(self, exc: MagnetarError) -> None:
        if self._closed_exc is not None:
            return
        self._closed_exc = exc
        self._out.clear()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        for producer in list(self._producers.values()):
            producer._on_connection_closed(exc)
        for consumer in list(self._consumers.values()):
            consumer._on_connection_closed(exc)
        self._producers.clear()
        self._consumers.clear()
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
