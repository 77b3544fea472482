"""``BookieClient`` over TCP: pipelined requests on one connection per bookie.

One reader task per connection decodes frames and resolves a table of pending futures keyed by
request id, so any number of adds can be in flight at once and answers may come back in any
order. The connection is opened lazily on the first request and again after it breaks; requests
in flight when it breaks fail with ``NotConnected`` (retryable: the ledger layer decides whether
to retry or change the ensemble). A request with no answer within ``request_timeout`` fails with
``Timeout`` and its late answer, if any, is dropped. A bookie that is paused (SIGSTOP) therefore
shows up as timeouts, a dead one as ``NotConnected``.

The address is either fixed (``host``, ``port``) or looked up before every connect through
``address_resolver`` (the metadata resolver uses that: a bookie pod that restarts elsewhere is
found at its new address).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from typing import cast

from magnetar.ledger.bookie_api import ReadResult
from magnetar.protocol import commands as c
from magnetar.protocol.errors import MagnetarError, NotConnected, Timeout, error_from_wire
from magnetar.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame

AddressResolver = Callable[[], Awaitable[tuple[str, int]]]


class _Connection:
    """One TCP connection and the requests waiting on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame: int) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[c.BkResponse]] = {}
        self.closed = False
        self._decoder = FrameDecoder(max_frame)
        self.task = asyncio.get_running_loop().create_task(self._read_loop())

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
                    fut = self.pending.pop(frame.get("rid"), None)  # type: ignore[arg-type]
                    if fut is not None and not fut.done():
                        fut.set_result(cast(c.BkResponse, frame))  # what a bookie answers a request with
        except (OSError, MagnetarError) as exc:
            failure = NotConnected(f"connection to the bookie failed: {exc}")
        finally:
            self.close(failure)

    def close(self, failure: MagnetarError) -> None:
        self.closed = True
        self.writer.close()
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(failure)


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
    ) -> None:
        self._bookie_id = bookie_id
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

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._connecting:
            if self._closed:
                raise NotConnected(f"client of bookie {self._bookie_id} is closed")
            if self._conn is not None and not self._conn.closed:
                return self._conn
            try:
                async with asyncio.timeout(self._connect_timeout):
                    host, port = await self._resolver() if self._resolver else self._address
                    reader, writer = await asyncio.open_connection(host, port, limit=256 * 1024)
            except (OSError, TimeoutError) as exc:
                raise NotConnected(f"cannot connect to bookie {self._bookie_id}: {exc!r}") from exc
            self._conn = _Connection(reader, writer, self._max_frame_size)
            return self._conn

    async def _request(self, cmd: c.BookieRequest) -> c.BkResponse:
        """Send ``cmd`` with the next ``rid`` (its placeholder is overwritten in place, so ``rid``
        stays the last key) and return the ``OK`` answer; an error code raises its exception."""
        conn = await self._connection()
        rid = next(self._rids)
        fut: asyncio.Future[c.BkResponse] = asyncio.get_running_loop().create_future()
        conn.pending[rid] = fut
        cmd["rid"] = rid
        try:
            conn.writer.write(encode_frame(cmd))
            async with asyncio.timeout(self._request_timeout):
                await conn.writer.drain()
                response = await fut
        except TimeoutError:
            raise Timeout(
                f"bookie {self._bookie_id} did not answer {cmd['t']} within {self._request_timeout}s"
            ) from None
        except OSError as exc:
            conn.close(NotConnected(str(exc)))
            raise NotConnected(f"connection to bookie {self._bookie_id} failed: {exc}") from exc
        finally:
            conn.pending.pop(rid, None)
        code = response.get("code")
        if code != c.BK_OK:
            raise error_from_wire(str(code), str(response.get("message", "")))
        return response

    async def add_entry(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> None:
        await self._request(c.bk_add(ledger_id, entry_id, bytes(data), crc, lac, recovery))

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
