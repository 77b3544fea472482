"""``BookieClient`` over TCP: pipelined requests on one connection per bookie.

One reader task per connection decodes frames and resolves a table of pending futures keyed by
request id, so any number of adds can be in flight at once and answers may come back in any
order. The connection is opened lazily on the first request and again after it breaks; requests
in flight when it breaks fail with ``NotConnected`` (retryable: the ledger layer decides whether
to retry or change the ensemble). A request with no answer within ``request_timeout`` fails with
``Timeout`` and its late answer, if any, is dropped. A bookie that is paused (SIGSTOP) therefore
shows up as timeouts, a dead one as ``NotConnected``.

Adds take a lighter path (``add_entry_nowait``): no task or coroutine per add, a future resolved
by the reader, one deadline sweep per connection instead of a timer per request, and every frame
queued in one event-loop turn written to the socket in one call (``_Connection.write``). A ledger
sends each entry to Qw bookies, so in a cluster this path runs three times per published entry;
before it, a broker spent most of its time in one task, one timer and one ``send`` per add.

The address is either fixed (``host``, ``port``) or looked up before every connect through
``address_resolver`` (the metadata resolver uses that: a bookie pod that restarts elsewhere is
found at its new address).

Security (``security``, bookie/client_security.py; WIRE.md R80-R86): with TLS the connection is
wrapped, checking the bookie's certificate and host name; with credentials, every new connection
sends ``bk_auth`` first and is used only once the bookie accepted it (a refusal fails the request
with ``AuthenticationError``, which no retry cures). A token with ``exp`` is not used past
``exp - REFRESH_MARGIN``: the next request opens a new connection with a fresh token from the
supplier, and the old one closes once its requests are answered, so the bookie's close at expiry
(R83) never cuts a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.ledger.bookie_api import ReadResult
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError, MagnetarError, NotConnected, Timeout, error_from_wire
from magnetar.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frames
from magnetar.security.tokens import TokenError, show

AddressResolver = Callable[[], Awaitable[tuple[str, int]]]
# A connection whose token expires within this many seconds is replaced before the next request.
REFRESH_MARGIN = 5.0


def _token_expiry(token: str) -> float | None:
    """``exp`` of a token, read without verifying (the bookie verifies; this only plans a refresh)."""
    try:
        exp = show(token)[1].get("exp")
    except TokenError:
        return None
    return float(exp) if isinstance(exp, (int, float)) else None


class _Connection:
    """One TCP connection and the requests waiting on it."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame: int, bookie_id: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.bookie_id = bookie_id
        self.pending: dict[int, asyncio.Future[c.BkResponse]] = {}
        # Adds sent by ``add_entry_nowait``: rid -> (future, deadline). Deadlines grow with the
        # rid (one timeout for every add), so the oldest entry is always the next to expire.
        self.adds: dict[int, tuple[asyncio.Future[None], float]] = {}
        self.closed = False
        self.retiring = False  # replaced by a fresh connection: closes once nothing is pending
        self.expires_at: float | None = None  # of the token it authenticated with
        self._decoder = FrameDecoder(max_frame)
        self._out: list[Mapping[str, object]] = []  # frames queued in this loop turn
        self._sweep: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_running_loop()
        self.task = self.loop.create_task(self._read_loop())

    def write(self, frame: Mapping[str, object]) -> None:
        """Queue a frame; all frames queued in one loop turn go to the socket in one write."""
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and not self.closed:
            self.writer.write(encode_frames(out))

    def add(self, rid: int, fut: asyncio.Future[None], timeout: float) -> None:
        """Track an add sent without a task; it fails with ``Timeout`` after ``timeout`` seconds."""
        self.adds[rid] = (fut, self.loop.time() + timeout)
        if self._sweep is None:
            self._sweep = self.loop.call_later(timeout, self._expire, timeout)

    def _expire(self, timeout: float) -> None:
        self._sweep = None
        now = self.loop.time()
        while self.adds:
            rid, (fut, deadline) = next(iter(self.adds.items()))
            if deadline > now:
                self._sweep = self.loop.call_at(deadline, self._expire, timeout)
                return
            del self.adds[rid]
            if not fut.done():
                fut.set_exception(Timeout(f"bookie {self.bookie_id} did not answer {c.BK_ADD} within {timeout}s"))
        self.retire_if_idle()

    def retire_if_idle(self) -> None:
        if self.retiring and not self.pending and not self.adds and not self.closed:
            self.close(NotConnected("connection retired: its token expires"))

    async def _read_loop(self) -> None:
        failure: MagnetarError = NotConnected("connection to the bookie closed")
        try:
            while True:
                chunk = await self.reader.read(256 * 1024)
                if not chunk:
                    break
                for frame in self._decoder.feed(chunk):
                    if not isinstance(frame, dict):
                        continue
                    if frame.get("t") == c.ERROR and frame.get("rid") is None:
                        # The server refused this connection's input: everything on it fails.
                        failure = error_from_wire(str(frame.get("code")), str(frame.get("message")))
                        return
                    rid = frame.get("rid")
                    fut = self.pending.pop(rid, None)  # type: ignore[arg-type]
                    if fut is not None:
                        if not fut.done():
                            fut.set_result(cast(c.BkResponse, frame))  # what a bookie answers a request with
                        continue
                    add = self.adds.pop(rid, None)  # type: ignore[arg-type]
                    if add is None:
                        continue  # answered after its timeout: dropped
                    if not add[0].done():
                        code = frame.get("code")
                        if code == c.BK_OK:
                            add[0].set_result(None)
                        else:
                            add[0].set_exception(error_from_wire(str(code), str(frame.get("message", ""))))
                    if self.retiring:
                        self.retire_if_idle()
        except (OSError, MagnetarError) as exc:
            failure = NotConnected(f"connection to the bookie failed: {exc}")
        finally:
            self.close(failure)

    def close(self, failure: MagnetarError) -> None:
        if not self.closed:
            self._flush()  # frames already queued still go out (a retired connection's last ones)
        self.closed = True
        self.writer.close()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(failure)
        adds, self.adds = self.adds, {}
        for add, _ in adds.values():
            if not add.done():
                add.set_exception(failure)


class TcpBookieClient:
    def __init__(
        self,
        bookie_id: str,
        host: str,
        port: int,
        *,
        request_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        address_resolver: AddressResolver | None = None,
        security: BookieClientSecurity | None = None,
    ) -> None:
        self._bookie_id = bookie_id
        self._security = security or BookieClientSecurity()
        self._address = (host, port)
        self._resolver = address_resolver
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._max_frame_size = max_frame_size
        self._conn: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._rids = itertools.count(1)
        self._closed = False

    @property
    def bookie_id(self) -> str:
        return self._bookie_id

    @property
    def security(self) -> BookieClientSecurity:
        return self._security

    @staticmethod
    def _usable(conn: _Connection | None) -> bool:
        if conn is None or conn.closed or conn.retiring:
            return False
        if conn.expires_at is not None and time.time() >= conn.expires_at - REFRESH_MARGIN:
            conn.retiring = True  # its token is about to expire: the next connection gets a fresh one
            if not conn.pending:
                conn.close(NotConnected("connection retired: its token expires"))
            return False
        return True

    async def _connection(self) -> _Connection:
        conn = self._conn
        if self._usable(conn):
            assert conn is not None
            return conn
        async with self._connecting:
            if self._closed:
                raise NotConnected(f"client of bookie {self._bookie_id} is closed")
            if self._usable(self._conn):
                assert self._conn is not None
                return self._conn
            ctx = self._security.ssl_context
            try:
                async with asyncio.timeout(self._connect_timeout):
                    host, port = await self._resolver() if self._resolver else self._address
                    reader, writer = await asyncio.open_connection(
                        host, port, limit=256 * 1024, ssl=ctx, server_hostname=host if ctx else None
                    )
            except ssl.SSLError as exc:
                raise NotConnected(f"TLS handshake with bookie {self._bookie_id} failed: {exc}") from exc
            except (OSError, TimeoutError) as exc:
                raise NotConnected(f"cannot connect to bookie {self._bookie_id}: {exc!r}") from exc
            fresh = _Connection(reader, writer, self._max_frame_size, self._bookie_id)
            if self._security.credentials is not None:
                await self._authenticate(fresh, self._security.credentials)
            self._conn = fresh
            return fresh

    async def _authenticate(self, conn: _Connection, credentials: Callable[[], str]) -> None:
        """Send ``bk_auth`` on a new connection and wait for the bookie to accept it (R80)."""
        try:
            token = credentials()
        except (OSError, ValueError) as exc:
            conn.close(NotConnected("no credentials"))
            raise AuthenticationError(f"cannot read the credentials for bookie {self._bookie_id}: {exc}") from exc
        conn.expires_at = _token_expiry(token)
        try:
            await self._send(conn, c.bk_auth(c.AUTH_METHOD_TOKEN, token.encode()), self._connect_timeout)
        except BaseException:
            conn.close(NotConnected("authentication failed"))
            raise

    async def _request(self, cmd: c.BookieRequest) -> c.BkResponse:
        """Send ``cmd`` with the next ``rid`` (its placeholder is overwritten in place, so ``rid``
        stays the last key) and return the ``OK`` answer; an error code raises its exception."""
        return await self._send(await self._connection(), cmd, self._request_timeout)

    async def _send(self, conn: _Connection, cmd: c.BookieRequest, answer_within: float) -> c.BkResponse:
        rid = next(self._rids)
        fut: asyncio.Future[c.BkResponse] = asyncio.get_running_loop().create_future()
        conn.pending[rid] = fut
        cmd["rid"] = rid
        try:
            conn.write(cmd)
            async with asyncio.timeout(answer_within):
                await conn.writer.drain()
                response = await fut
        except TimeoutError:
            raise Timeout(f"bookie {self._bookie_id} did not answer {cmd['t']} within {answer_within}s") from None
        except OSError as exc:
            conn.close(NotConnected(str(exc)))
            raise NotConnected(f"connection to bookie {self._bookie_id} failed: {exc}") from exc
        finally:
            conn.pending.pop(rid, None)
            conn.retire_if_idle()
        code = response.get("code")
        if code != c.BK_OK:
            raise error_from_wire(str(code), str(response.get("message", "")))
        return response

    async def add_entry(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> None:
        await self._request(c.bk_add(ledger_id, entry_id, bytes(data), crc, lac, recovery))

    def add_entry_nowait(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> asyncio.Future[None]:
        """``add_entry`` without a task: the future resolves when the bookie answers (errors as
        their exceptions, ``Timeout`` after ``request_timeout``). Before the first connection,
        and while one is being replaced, it falls back to a task running ``add_entry``."""
        conn = self._conn
        if not self._usable(conn):
            return asyncio.ensure_future(self.add_entry(ledger_id, entry_id, data, crc, lac, recovery=recovery))
        assert conn is not None
        rid = next(self._rids)
        fut: asyncio.Future[None] = conn.loop.create_future()
        conn.add(rid, fut, self._request_timeout)
        conn.write(c.bk_add(ledger_id, entry_id, bytes(data), crc, lac, recovery, rid))
        return fut

    async def read_entry(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> ReadResult:
        r = await self._request(c.bk_read(ledger_id, entry_id, fence))
        return ReadResult(bytes(r["data"]), int(r["crc"]), int(r["lac"]))

    async def read_lac(self, ledger_id: int) -> int:
        return int((await self._request(c.bk_read_lac(ledger_id)))["lac"])

    async def fence(self, ledger_id: int) -> int:
        return int((await self._request(c.bk_fence(ledger_id)))["lac"])

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._request(c.bk_delete(ledger_id))

    async def close(self) -> None:
        """Close the connection; requests in flight fail with ``NotConnected``."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close(NotConnected("client closed"))
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await conn.task

    async def __aenter__(self) -> TcpBookieClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()
