"""The bookie's TCP server: the ``bk_*`` commands of protocol/WIRE.md over length-prefixed frames.

Pipelining. Frames are decoded and dispatched as they arrive; an add is queued to the storage's
group-commit thread synchronously (so adds keep their arrival order) and its ``bk_response`` is
written from the future's done-callback, once that add is durable. The reader never waits for an
add, so one connection keeps the writer thread's batches full. Reads are answered inline.

Hostile input. A malformed frame (undecodable, oversized length prefix, not a command map), an
unknown command, or a command with missing or mistyped fields gets one ``error`` frame
(``rid: nil``) and closes that connection only; a connection that ends mid-frame is dropped with
its partial bytes. Nothing from such a frame is stored. Requests already dispatched on that
connection are answered before the error frame; well-formed frames that arrived in the same read
as the bad one are dropped unanswered (the decoder refuses the whole chunk), which a client sees
as the connection closing with those requests in flight. Operation errors (``LedgerFenced``,
``ChecksumError``, ...) are ordinary ``bk_response`` codes and leave the connection open.

Security (bookie/auth.py, WIRE.md R80-R86). With an authenticator, a connection's first frame must
be ``bk_auth`` with valid credentials; anything else first, or refused credentials, is answered
with one ``AuthenticationError`` error frame and the connection closes, so nothing it sent is
stored. A connection whose token expires is closed at the expiry (requests already accepted are
answered first). With an SSL context the port speaks TLS only, and the registration says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from magnetar.bookie.auth import BookieAuthenticator, BookieClientIdentity
from magnetar.bookie.registration import BookieRegistration, deregister, register
from magnetar.bookie.storage import BookieStorage
from magnetar.metadata.store import MetadataStore
from magnetar.protocol import commands as c
from magnetar.protocol import fields
from magnetar.protocol.errors import (
    AuthenticationError,
    InvalidCommand,
    MagnetarError,
    MalformedFrame,
    UnknownCommand,
)
from magnetar.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frames

log = logging.getLogger(__name__)
_READ_CHUNK = 256 * 1024
_LINGER_SECONDS = 2.0  # how long a refused connection is drained before it is closed regardless


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Deliver the last frame of a refused connection before closing it.

    Closing a socket with unread input makes the kernel send a reset, which can discard the
    error frame before the client reads it: a client that pipelined requests behind a refused
    first frame would see "connection reset" instead of why. So: send, half-close, and discard
    what the client still sends until it closes its side (bounded by ``_LINGER_SECONDS``).
    """
    with contextlib.suppress(OSError, ssl.SSLError):  # ConnectionError and TimeoutError are OSErrors
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(_LINGER_SECONDS):
            while await reader.read(_READ_CHUNK):
                pass


class _Connection:
    """One client connection: writes responses unless the connection is already going away, and
    tracks the writes still in flight so that a protocol error answers them before closing.

    Answers are queued and written once per event-loop turn (``flush``): a group commit resolves
    every add of its batch in one callback, and one ``send`` per answer was most of a bookie's
    work per add. Whatever closes or drains the connection flushes first."""

    __slots__ = ("expired", "expiry", "identity", "in_flight", "out", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.in_flight: set[asyncio.Future[Any]] = set()
        self.identity: BookieClientIdentity | None = None  # set by ``bk_auth``
        self.expired = False  # its token expired: refuse what comes next, close (R83)
        self.expiry: asyncio.TimerHandle | None = None
        self.out: list[c.BkResponse | c.Error] = []  # answers queued in this loop turn

    def track(self, fut: asyncio.Future[Any]) -> None:
        self.in_flight.add(fut)
        fut.add_done_callback(self.in_flight.discard)

    def send(self, message: c.BkResponse | c.Error) -> None:
        if self.writer.is_closing():
            return
        if not self.out:
            asyncio.get_running_loop().call_soon(self.flush)
        self.out.append(message)

    def flush(self) -> None:
        out, self.out = self.out, []
        if out and not self.writer.is_closing():
            self.writer.write(encode_frames(out))

    def fail(self, rid: int, exc: BaseException) -> None:
        if isinstance(exc, MagnetarError):
            code, message = str(exc.code), str(exc)
        else:
            log.exception("bookie request %s failed unexpectedly", rid, exc_info=exc)
            code, message = "UnknownError", repr(exc)
        self.send(c.bk_error(rid, code, message))


class BookieServer:
    """Serves one ``BookieStorage`` on ``host:port`` (port 0 picks a free port; see ``port``).
    With a ``store``, registers ``/bookies/available/{bookie_id}`` (ephemeral) once listening."""

    def __init__(
        self,
        storage: BookieStorage,
        *,
        bookie_id: str,
        host: str = "127.0.0.1",
        port: int = 0,
        store: MetadataStore | None = None,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        authenticator: BookieAuthenticator | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._storage = storage
        self._authenticator = authenticator
        self._ssl = ssl_context
        self._bookie_id = bookie_id
        self._host = host
        self._port = port
        self._store = store
        self._advertised_host = advertised_host
        self._advertised_port = advertised_port
        self._max_frame_size = max_frame_size
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._registered_read_only: bool | None = None
        self._expiring: set[asyncio.Task[None]] = set()
        # Each handler takes its command's TypedDict; ``_dispatch`` checked the required fields.
        self._handlers: dict[str, Callable[[_Connection, Any], None]] = {
            c.BK_ADD: self._add,
            c.BK_READ: self._read_cmd,
            c.BK_READ_LAC: self._read_lac,
            c.BK_FENCE: self._fence,
            c.BK_DELETE: self._delete,
            c.BK_AUTH: self._auth,
        }

    @property
    def port(self) -> int:
        """The bound port (meaningful after ``start``, also when constructed with port 0)."""
        return self._port

    @property
    def advertised_host(self) -> str:
        if self._advertised_host:
            return self._advertised_host
        if self._host in ("", "0.0.0.0", "::"):
            return socket.gethostname()
        return self._host

    @property
    def advertised_port(self) -> int:
        """The port registered for brokers and other bookies: the bound one unless a proxy or a
        NAT in front of the bookie listens on another (``--advertised-port``)."""
        return self._advertised_port or self._port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port, limit=_READ_CHUNK, ssl=self._ssl)
        self._port = int(self._server.sockets[0].getsockname()[1])
        await self.update_registration()
        log.info("bookie %s listening on %s:%d", self._bookie_id, self._host, self._port)

    async def update_registration(self) -> None:
        """Publish the address and the current read-only flag (only when the flag changed)."""
        read_only = self._storage.read_only
        if self._store is None or self._registered_read_only == read_only:
            return
        await register(
            self._store,
            self._bookie_id,
            BookieRegistration(self.advertised_host, self.advertised_port, read_only, tls=self._ssl is not None),
        )
        self._registered_read_only = read_only

    async def stop(self) -> None:
        """Deregister, stop accepting, and close every connection (the storage stays open: the
        service owns it)."""
        if self._store is not None and self._registered_read_only is not None:
            await deregister(self._store, self._bookie_id)
            self._registered_read_only = None
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        conn = _Connection(writer)
        decoder = FrameDecoder(self._max_frame_size)
        try:
            while True:
                chunk = await reader.read(_READ_CHUNK)
                if not chunk:
                    if decoder.buffered:
                        log.info("bookie connection ended inside a frame; %d bytes dropped", decoder.buffered)
                    return
                try:
                    for cmd in decoder.feed(chunk):
                        self._dispatch(conn, cmd)
                except MagnetarError as exc:  # malformed input: answer once, drop this connection
                    if conn.in_flight:  # requests before the bad frame still get their answers
                        await asyncio.wait(list(conn.in_flight))
                    conn.send(c.error_frame(None, str(exc.code), str(exc)))
                    conn.flush()
                    await _linger(reader, writer)
                    return
                await writer.drain()  # back-pressure: stop reading while responses pile up
        except (ConnectionError, ssl.SSLError):
            return
        finally:
            if conn.expiry is not None:
                conn.expiry.cancel()
            conn.flush()
            self._writers.discard(writer)
            writer.close()

    def _dispatch(self, conn: _Connection, cmd: Any) -> None:
        """Start one command. Raises (and so closes the connection) only for protocol errors."""
        if not isinstance(cmd, dict) or not isinstance(cmd.get("t"), str):
            raise MalformedFrame("a frame must hold a command map with a string field 't'")
        name = cmd["t"]
        if conn.expired:
            raise AuthenticationError("Failed to authenticate: token expired")
        if self._authenticator is not None and conn.identity is None and name != c.BK_AUTH:
            raise AuthenticationError("Authentication required: the first frame to this bookie must be bk_auth")
        problem = c.missing_fields(cmd)
        if problem is not None:
            raise InvalidCommand(problem)
        handler = self._handlers.get(name)
        if handler is None:
            raise UnknownCommand(f"a bookie does not serve {name!r}")
        handler(conn, cmd)

    def _auth(self, conn: _Connection, cmd: c.BkAuth) -> None:
        """Authenticate the connection (R80-R82); refusals raise and so close it. With
        authentication off, credentials are accepted unread (a client may be ahead of its bookies)."""
        rid = fields.int_field(cmd, "rid")
        if self._authenticator is not None:
            conn.identity = self._authenticator.authenticate(cmd.get("auth_method"), cmd.get("auth_data"))
            self._schedule_expiry(conn, conn.identity.expires_at)
        conn.send(c.bk_response(rid))

    def _schedule_expiry(self, conn: _Connection, expires_at: float | None) -> None:
        if conn.expiry is not None:
            conn.expiry.cancel()
            conn.expiry = None
        if expires_at is not None:
            loop = asyncio.get_running_loop()
            conn.expiry = loop.call_later(max(0.0, expires_at - time.time()), self._expire, conn)

    def _expire(self, conn: _Connection) -> None:
        """The token ran out: refuse further frames, answer what was accepted, then close (R83)."""
        conn.expiry = None
        conn.expired = True

        async def close() -> None:
            if conn.in_flight:
                await asyncio.wait(list(conn.in_flight))
            conn.send(c.error_frame(None, "AuthenticationError", "Failed to authenticate: token expired"))
            conn.flush()
            with contextlib.suppress(ConnectionError):
                await conn.writer.drain()
            conn.writer.close()

        task = asyncio.get_running_loop().create_task(close())
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    def _add(self, conn: _Connection, cmd: c.BkAdd) -> None:
        rid = fields.int_field(cmd, "rid")
        args = (
            fields.int_field(cmd, "ledger"),
            fields.int_field(cmd, "entry"),
            fields.bytes_field(cmd, "data"),
            fields.int_field(cmd, "crc"),
        )
        lac = fields.int_field(cmd, "lac", -1)
        try:
            fut = self._storage.add_nowait(*args, fields.add_lac(lac), recovery=bool(cmd.get("recovery", False)))
        except MagnetarError as exc:
            conn.fail(rid, exc)
            return
        conn.track(fut)
        fut.add_done_callback(lambda f: self._answer(conn, rid, f))

    def _read_cmd(self, conn: _Connection, cmd: c.BkRead) -> None:
        rid = fields.int_field(cmd, "rid")
        ledger, entry = fields.int_field(cmd, "ledger"), fields.int_field(cmd, "entry")
        if cmd.get("fence"):
            fenced = self._storage.fence_nowait(ledger)
            conn.track(fenced)
            fenced.add_done_callback(lambda f: self._read_after_fence(conn, rid, ledger, entry, f))
        else:
            self._read(conn, rid, ledger, entry)

    def _read_lac(self, conn: _Connection, cmd: c.BkReadLac) -> None:
        rid = fields.int_field(cmd, "rid")
        try:
            conn.send(c.bk_lac_response(rid, self._storage.read_lac_sync(fields.int_field(cmd, "ledger"))))
        except MagnetarError as exc:
            conn.fail(rid, exc)

    def _fence(self, conn: _Connection, cmd: c.BkFence) -> None:
        rid = fields.int_field(cmd, "rid")
        fence = self._storage.fence_nowait(fields.int_field(cmd, "ledger"))
        conn.track(fence)
        fence.add_done_callback(lambda f: self._answer_lac(conn, rid, f))

    def _delete(self, conn: _Connection, cmd: c.BkDelete) -> None:
        rid = fields.int_field(cmd, "rid")
        delete = self._storage.delete_ledger_nowait(fields.int_field(cmd, "ledger"))
        conn.track(delete)
        delete.add_done_callback(lambda f: self._answer(conn, rid, f))

    def _read(self, conn: _Connection, rid: int, ledger: int, entry: int) -> None:
        try:
            result = self._storage.read_sync(ledger, entry)
        except MagnetarError as exc:
            conn.fail(rid, exc)
            return
        conn.send(c.bk_read_response(rid, result.data, result.crc, result.lac))

    def _read_after_fence(self, conn: _Connection, rid: int, ledger: int, entry: int, fut: asyncio.Future[Any]) -> None:
        exc = fut.exception()
        if exc is not None:
            conn.fail(rid, exc)
        else:
            self._read(conn, rid, ledger, entry)

    @staticmethod
    def _answer(conn: _Connection, rid: int, fut: asyncio.Future[Any]) -> None:
        exc = fut.exception()
        if exc is not None:
            conn.fail(rid, exc)
        else:
            conn.send(c.bk_response(rid))

    @staticmethod
    def _answer_lac(conn: _Connection, rid: int, fut: asyncio.Future[int]) -> None:
        exc = fut.exception()
        if exc is not None:
            conn.fail(rid, exc)
        else:
            conn.send(c.bk_lac_response(rid, fut.result()))
