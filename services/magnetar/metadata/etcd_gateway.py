"""A small asyncio client for etcd v3's JSON gRPC gateway: the transport under ``etcd_store``.

Why it is a module of its own. ``etcd_store`` decides what the ``MetadataStore`` contract means on
etcd (which compare guards a write, which keys carry the session's lease, which events a watcher
hears); this module only knows how to say it to etcd over HTTP. Keeping the wire details here
(the aiohttp session, endpoints and failover, base64, the JSON shapes of range/put/txn/lease/
watch, gRPC error codes) lets the store be read as the contract's mapping alone.

Why the gateway. etcd's native API is gRPC; the Python clients for it are unmaintained or not
asyncio. The gateway that every etcd ≥ 3.4 serves on its client port (``/v3/kv/range``,
``/v3/kv/txn``, ``/v3/lease/grant``, ``/v3/watch``, ...) maps the same protobuf messages to JSON
(bytes as base64, 64-bit integers as strings, zero values omitted), so aiohttp — already a server
dependency — is all we need. Keys and values cross this module's API as ``bytes`` and revisions
and lease ids as ``int``; the encoding happens here.

Failover. With several endpoints a request that could not connect goes to the next endpoint. A
request that was sent but got no answer is retried elsewhere only if repeating it is harmless
(reads, unconditional puts, keepalives); a compare-and-set or delete raises ``NotConnected``
instead, because it may have been applied and a blind retry would report a wrong outcome.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from magnetar.protocol.errors import AlreadyClosed, MagnetarError, NotConnected, RetryableError

DEFAULT_REQUEST_TIMEOUT = 5.0
MAX_TXN_OPS = 100  # etcd refuses more than 128 operations in one txn by default
GRPC_NOT_FOUND = 5
_GRPC_RETRYABLE = {4, 14}  # DEADLINE_EXCEEDED, UNAVAILABLE (no leader, leader changed, ...)


class EtcdError(MagnetarError):
    """etcd answered with a gRPC error (``code`` is the gRPC status code)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"etcd error {code}: {message}")
        self.grpc_code = code


class EtcdUnavailable(EtcdError, RetryableError):
    """etcd is up but cannot serve right now (no leader, election in progress)."""


class WatchCompacted(Exception):
    """A watch asked for history etcd has compacted away; resume at ``revision``."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"watch history compacted up to {revision}")
        self.revision = revision


# --- sans-IO helpers


class JsonLines:
    """Decoder for the gateway's streaming responses: JSON objects separated by newlines, arriving
    in arbitrary chunks. ``feed(chunk)`` returns the complete objects so far."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self._buf += chunk
        out: list[dict[str, Any]] = []
        while (nl := self._buf.find(b"\n")) >= 0:
            line = bytes(self._buf[:nl]).strip()
            del self._buf[: nl + 1]
            if line:
                out.append(json.loads(line))
        return out


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def normalize_endpoint(endpoint: str) -> str:
    """``host:port`` → ``http://host:port``; explicit ``http(s)://`` URLs are kept."""
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint:
        raise ValueError("empty etcd endpoint")
    return endpoint if "://" in endpoint else f"http://{endpoint}"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One ``mvccpb.KeyValue`` as the gateway sends it, decoded (``value`` is empty for keys-only
    reads; ``lease`` is 0 for a key without one)."""

    key: bytes
    value: bytes
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(unb64(kv["key"]), unb64(kv.get("value")), int(kv["mod_revision"]), int(kv.get("lease", 0)))


@dataclass(frozen=True, slots=True)
class TxnResult:
    """The outcome of a ``txn``: which branch ran, the revision after it, and what each range
    operation of that branch read (``None`` for operations that are not ranges)."""

    succeeded: bool
    revision: int
    ranges: list[list[KeyValue] | None]

    def first(self) -> KeyValue | None:
        """The first key the branch's first operation read, if that was a range that found one."""
        found = self.ranges[0] if self.ranges else None
        return found[0] if found else None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    kv: KeyValue


# --- request builders for txn branches and guards


def compare_create_revision(key: bytes, result: str, revision: int) -> dict[str, Any]:
    """Guard on the key's ``create_revision`` (0 when the key does not exist)."""
    return {"key": b64(key), "target": "CREATE", "result": result, "create_revision": str(revision)}


def compare_mod_revision(key: bytes, result: str, revision: int) -> dict[str, Any]:
    """Guard on the key's ``mod_revision``, the revision of its last write."""
    return {"key": b64(key), "target": "MOD", "result": result, "mod_revision": str(revision)}


def put_op(key: bytes, value: bytes, *, lease: int = 0, ignore_lease: bool = False) -> dict[str, Any]:
    return {"request_put": _put_request(key, value, lease=lease, ignore_lease=ignore_lease)}


def range_op(key: bytes, *, keys_only: bool = False) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key)}
    if keys_only:
        request["keys_only"] = True
    return {"request_range": request}


def delete_op(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def _put_request(key: bytes, value: bytes, *, lease: int = 0, ignore_lease: bool = False) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        request["lease"] = str(lease)
    if ignore_lease:
        request["ignore_lease"] = True
    return request


def _kvs(data: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue.from_json(kv) for kv in data.get("kvs") or []]


def _watch_events(message: dict[str, Any]) -> list[WatchEvent]:
    """The events of one watch stream message; raises for an error or a cancelled watch."""
    if "error" in message:
        raise EtcdError(0, json.dumps(message["error"])[:200])
    result = message.get("result", {})
    if result.get("canceled"):
        compacted = int(result.get("compact_revision", 0))
        if compacted:
            raise WatchCompacted(compacted)
        raise EtcdError(0, f"watch canceled: {result.get('cancel_reason', '')}")
    return [
        WatchEvent("delete" if event.get("type") == "DELETE" else "put", KeyValue.from_json(event["kv"]))
        for event in result.get("events", ())
    ]


class EtcdGateway:
    """The HTTP side of one etcd client: ``gateway.open()``, then the calls below, then
    ``await gateway.close()``. ``revision`` is the highest store revision any answer has shown."""

    def __init__(self, endpoints: Sequence[str], *, request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self._endpoints = [normalize_endpoint(e) for e in endpoints]
        if not self._endpoints:
            raise ValueError("EtcdMetadataStore needs at least one endpoint")
        self._current = 0
        self._timeout = request_timeout
        self._http: aiohttp.ClientSession | None = None
        self.revision = 0

    @property
    def endpoints(self) -> list[str]:
        return list(self._endpoints)

    @property
    def current_endpoint(self) -> str:
        return self._endpoints[self._current]

    def open(self) -> None:
        """Create the HTTP session (no request is sent)."""
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # watch streams each hold a connection
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            )

    async def close(self) -> None:
        """Close the HTTP session; ``open`` may start a new one."""
        if self._http is not None:
            http, self._http = self._http, None
            await http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise AlreadyClosed("the etcd gateway client is not open")
        return self._http

    def rotate(self, failed: str) -> None:
        """Move on from ``failed`` to the next endpoint (unless another caller already did)."""
        if self._endpoints[self._current] == failed:
            self._current = (self._current + 1) % len(self._endpoints)

    def _observe(self, data: dict[str, Any]) -> None:
        header = data.get("header") or data.get("result", {}).get("header") or {}
        rev = int(header.get("revision", 0))
        if rev > self.revision:
            self.revision = rev

    async def call(self, api: str, body: dict[str, Any], *, idempotent: bool) -> dict[str, Any]:
        """POST one gateway request, failing over between endpoints (see the module docstring)."""
        http = self._session()
        last: BaseException | None = None
        for attempt in range(len(self._endpoints)):
            endpoint = self._endpoints[self._current]
            try:
                async with http.post(f"{endpoint}/v3/{api}", json=body) as resp:
                    raw = await resp.read()
                    status = resp.status
            except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
                last = exc
                self.rotate(endpoint)
                continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = exc
                self.rotate(endpoint)
                if idempotent and attempt + 1 < len(self._endpoints):
                    continue
                raise NotConnected(f"etcd {endpoint} did not answer {api}: {exc!r}") from exc
            data: dict[str, Any] = json.loads(raw) if raw else {}
            if status != 200 or "error" in data:
                code = int(data.get("code", 0))
                message = str(data.get("message") or data.get("error") or raw[:200])
                if code in _GRPC_RETRYABLE:
                    raise EtcdUnavailable(code, message)
                raise EtcdError(code, message)
            self._observe(data)
            return data
        raise NotConnected(f"no etcd endpoint of {self._endpoints} answered {api}: {last!r}")

    # --- kv

    async def range(self, key: bytes, range_end: bytes | None = None, *, keys_only: bool = False) -> list[KeyValue]:
        """The keys at ``key`` (or in ``[key, range_end)``), in key order."""
        body: dict[str, Any] = {"key": b64(key)}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        if keys_only:
            body["keys_only"] = True
        return _kvs(await self.call("kv/range", body, idempotent=True))

    async def count(self, key: bytes) -> int:
        data = await self.call("kv/range", {"key": b64(key), "count_only": True}, idempotent=True)
        return int(data.get("count", 0))

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """An unconditional put (safe to repeat); returns the revision it was written at."""
        data = await self.call("kv/put", _put_request(key, value, lease=lease), idempotent=True)
        return int(data["header"]["revision"])

    async def delete_range(self, key: bytes) -> int:
        """Delete ``key``; returns how many keys were deleted (0 or 1)."""
        data = await self.call("kv/deleterange", {"key": b64(key)}, idempotent=False)
        return int(data.get("deleted", 0))

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> TxnResult:
        """A guarded transaction (not repeated on another endpoint once sent). Without
        ``compare`` and ``failure`` it is a read-only batch, and safe to repeat."""
        body: dict[str, Any]
        if compare or failure is not None:
            body = {"compare": compare, "success": success, "failure": failure or []}
            idempotent = False
        else:
            body = {"success": success}
            idempotent = True
        data = await self.call("kv/txn", body, idempotent=idempotent)
        ranges: list[list[KeyValue] | None] = []
        for response in data.get("responses") or []:
            found = response.get("response_range")
            ranges.append(None if found is None else _kvs(found))
        return TxnResult(bool(data.get("succeeded")), int((data.get("header") or {}).get("revision", 0)), ranges)

    # --- leases

    async def lease_grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: ``(id, granted TTL in seconds)`` (etcd may raise a too-small request)."""
        granted = await self.call("lease/grant", {"TTL": str(ttl)}, idempotent=False)
        return int(granted["ID"]), int(granted.get("TTL", ttl))

    async def lease_revoke(self, lease: int) -> int:
        """Revoke ``lease`` (its keys are deleted); returns the revision of that deletion."""
        revoked = await self.call("lease/revoke", {"ID": str(lease)}, idempotent=True)
        return int((revoked.get("header") or {}).get("revision", 0))

    async def lease_keepalive(self, lease: int) -> int:
        """Renew ``lease``; returns its new TTL, 0 or less when etcd no longer has it."""
        data = await self.call("lease/keepalive", {"ID": str(lease)}, idempotent=True)
        return int(data.get("result", {}).get("TTL", 0))

    # --- watch

    async def watch(
        self, endpoint: str, key: bytes, range_end: bytes, start_revision: int
    ) -> AsyncGenerator[list[WatchEvent], None]:
        """One watch stream on ``endpoint`` from ``start_revision``: yields the events of each
        message (an empty list for progress messages) until the server ends the stream. Raises
        ``WatchCompacted`` if that history is gone, ``EtcdError`` for any other cancellation; the
        caller reconnects (and picks the endpoint, see ``rotate``)."""
        http = self._session()
        body = {"create_request": {"key": b64(key), "range_end": b64(range_end), "start_revision": str(start_revision)}}
        async with http.post(
            f"{endpoint}/v3/watch",
            json=body,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout),
        ) as resp:
            if resp.status != 200:
                raise EtcdError(resp.status, (await resp.read())[:200].decode(errors="replace"))
            decoder = JsonLines()
            async for chunk in resp.content.iter_any():
                for message in decoder.feed(chunk):
                    yield _watch_events(message)
