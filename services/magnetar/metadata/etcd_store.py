"""The cluster metadata store: ``MetadataStore`` on etcd v3, spoken through etcd's JSON gRPC gateway.

Why the gateway. etcd's native API is gRPC; the Python clients for it are unmaintained or not
asyncio. The gateway that every etcd ≥ 3.4 serves on its client port (``/v3/kv/range``,
``/v3/kv/txn``, ``/v3/lease/grant``, ``/v3/watch``, ...) maps the same protobuf messages to JSON
(bytes as base64, 64-bit integers as strings, zero values omitted), so aiohttp — already a server
dependency — is all we need.

How the contract maps onto etcd:

- Version = the key's ``mod_revision``. etcd's revision is cluster-wide and never goes back, so a
  key that is deleted and created again never gets an old version back (the LMDB store imitates
  exactly this). No live key has version 0, so a compare-and-set expecting 0 always fails.
- ``put`` with an expected version is one ``txn``: compare (``create_revision == 0`` for
  create-only, ``mod_revision == N`` otherwise), put on success, read the key on failure so the
  ``BadVersion`` message can say what was there. ``delete`` is the same with a ``deleterange``.
- ``children`` is a keys-only range over ``path + "/"`` .. ``path + "0"`` (``'0'`` is the byte
  after ``'/'``), reduced to the first segment below ``path``.
- Ephemeral keys are attached to one lease per store session, granted when the store opens and
  renewed every TTL/3. ``close`` revokes it, which deletes every ephemeral key in one revision;
  if the process dies or is paused past the TTL, etcd expires the lease and the keys go too.
- Watches are one gateway watch stream per ``watch`` call, started at the revision after the last
  one this store has seen, so a write awaited before ``watch()`` is not reported and every write
  after it is, even though the stream connects asynchronously.

Session loss. A broker that owns bundles through ephemeral keys must stop serving the moment it
can no longer prove it holds its lease. ``session_lost`` is set (and ``on_session_lost``
callbacks run) when a keepalive answers that the lease is gone, or when no keepalive has
succeeded for a whole TTL (the lease may have expired while we could not reach etcd, or while the
process was stopped). After that, ephemeral puts raise ``SessionLost``; plain keys keep working.

Failover. With several endpoints a request that could not connect goes to the next endpoint. A
request that was sent but got no answer is retried elsewhere only if repeating it is harmless
(reads, unconditional puts, keepalives); a compare-and-set or delete raises ``NotConnected``
instead, because it may have been applied and a blind retry would report a wrong outcome.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import aiohttp

from magnetar.metadata.lmdb_store import check_path
from magnetar.metadata.store import ANY_VERSION, MUST_NOT_EXIST, Notification, Stat, Versioned, Watcher
from magnetar.protocol.errors import AlreadyClosed, BadVersion, MagnetarError, NotConnected, NotFound, RetryableError

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/magnetar"
DEFAULT_LEASE_TTL = 10.0
DEFAULT_REQUEST_TIMEOUT = 5.0
_MAX_TXN_OPS = 100  # etcd refuses more than 128 operations in one txn by default
_GRPC_NOT_FOUND = 5
_GRPC_RETRYABLE = {4, 14}  # DEADLINE_EXCEEDED, UNAVAILABLE (no leader, leader changed, ...)


class EtcdError(MagnetarError):
    """etcd answered with a gRPC error (``code`` is the gRPC status code)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"etcd error {code}: {message}")
        self.grpc_code = code


class EtcdUnavailable(EtcdError, RetryableError):
    """etcd is up but cannot serve right now (no leader, election in progress)."""


class SessionLost(MagnetarError):
    """This store's lease has expired or was revoked: its ephemeral keys are gone and it can
    create no more. The owner must stop acting on anything those keys claimed."""


class _Compacted(Exception):
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


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def _under(path: str, prefix: str) -> bool:
    """True if ``path`` is ``prefix`` or below it: ``/a`` covers ``/a/b`` but not ``/ab``."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def _check_chroot(prefix: str) -> str:
    """A chroot is ``""`` (none) or an absolute path without a trailing slash."""
    if prefix in ("", "/"):
        return ""
    return check_path(prefix)


def normalize_endpoint(endpoint: str) -> str:
    """``host:port`` → ``http://host:port``; explicit ``http(s)://`` URLs are kept."""
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint:
        raise ValueError("empty etcd endpoint")
    return endpoint if "://" in endpoint else f"http://{endpoint}"


def parse_etcd_url(url: str) -> tuple[list[str], str | None]:
    """``etcd://h:p[,h:p...][/prefix]`` → (endpoints, prefix or None when the URL has no path)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme != "etcd":
        raise ValueError(f"not an etcd URL: {url!r} (expected etcd://host:port[,host:port...][/prefix])")
    hosts, slash, path = rest.partition("/")
    endpoints = [normalize_endpoint(h) for h in hosts.split(",") if h.strip()]
    if not endpoints:
        raise ValueError(f"etcd URL names no endpoint: {url!r}")
    return endpoints, (_check_chroot("/" + path) if slash and path else None)


@dataclass(eq=False)
class _Watch:
    prefix: str
    callback: Watcher
    start_revision: int
    task: asyncio.Task[None] | None = None
    seen_revision: int = 0  # the revision of the last event this stream delivered
    advanced: asyncio.Event = field(default_factory=asyncio.Event)


class EtcdMetadataStore:
    """``MetadataStore`` on etcd. ``store = await EtcdMetadataStore.connect("etcd://127.0.0.1:2379")``
    or ``async with EtcdMetadataStore(["127.0.0.1:2379"]) as store``. Every path lives under
    ``prefix`` in etcd, so several clusters (or tests) can share one etcd."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        prefix: str = DEFAULT_PREFIX,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        self._endpoints = [normalize_endpoint(e) for e in endpoints]
        if not self._endpoints:
            raise ValueError("EtcdMetadataStore needs at least one endpoint")
        if lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, got {lease_ttl}")
        self._current = 0
        self._chroot = _check_chroot(prefix)
        self._requested_ttl = max(1, int(-(-lease_ttl // 1)))  # etcd counts whole seconds: round up
        self._ttl = self._requested_ttl
        self._timeout = request_timeout
        self._http: aiohttp.ClientSession | None = None
        self._lease = 0
        self._revision = 0  # the highest store revision any response has shown us
        self._ephemeral: set[str] = set()  # paths this session wrote with its lease
        self._watches: dict[int, _Watch] = {}
        self._next_watch = 0
        self._keepalive: asyncio.Task[None] | None = None
        self._revoke_task: asyncio.Task[None] | None = None
        self._increment_locks: dict[str, asyncio.Lock] = {}
        self._lost_callbacks: dict[int, Callable[[], None]] = {}
        self._lost_reason = ""
        self.session_lost = asyncio.Event()
        self._closed = False

    # --- lifecycle

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> EtcdMetadataStore:
        """Open a store from a metadata URL ``etcd://h:p[,h:p...][/prefix]``. The URL's path, if
        any, is the prefix; passing a different ``prefix`` as well is refused as ambiguous."""
        endpoints, url_prefix = parse_etcd_url(url)
        if url_prefix is not None and prefix is not None and _check_chroot(prefix) != url_prefix:
            raise ValueError(f"prefix {prefix!r} contradicts the prefix in {url!r}")
        chroot = url_prefix if url_prefix is not None else (prefix if prefix is not None else DEFAULT_PREFIX)
        store = cls(endpoints, prefix=chroot, lease_ttl=lease_ttl, request_timeout=request_timeout)
        return await store.open()

    async def open(self) -> Self:
        """Start the session: grant the lease and start renewing it."""
        if self._http is not None:
            return self
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # watch streams each hold a connection
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )
        try:
            granted = await self._call("lease/grant", {"TTL": str(self._requested_ttl)}, idempotent=False)
        except BaseException:
            await self._http.close()
            self._http = None
            raise
        self._lease = int(granted["ID"])
        self._ttl = int(granted.get("TTL", self._requested_ttl))
        self._keepalive = asyncio.get_running_loop().create_task(
            self._keep_alive(time.monotonic() + self._ttl), name=f"etcd-keepalive-{self._lease:x}"
        )
        return self

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Revoke the lease (this session's ephemeral keys vanish in one revision, and watchers of
        this store hear those deletions before close returns), then stop every task. Closing
        twice is harmless."""
        if self._closed or self._http is None:
            self._closed = True
            return
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
        try:
            if self._revoke_task is not None:
                await self._revoke_task
            elif not self.session_lost.is_set():
                await self._revoke_and_drain()
        except (MagnetarError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("closing metadata session: lease %x not revoked (%s); etcd will expire it", self._lease, exc)
        finally:
            self._closed = True
            watches = list(self._watches.values())
            self._watches.clear()
            for w in watches:
                if w.task is not None:
                    w.task.cancel()
            await asyncio.gather(*(w.task for w in watches if w.task is not None), return_exceptions=True)
            await self._http.close()

    async def _revoke_and_drain(self) -> None:
        # Which of our ephemeral keys still carry our lease (another session may have overwritten
        # some): those are the deletions our own watchers must see before close returns.
        mine = await self._still_leased(sorted(self._ephemeral))
        revoked = await self._call("lease/revoke", {"ID": str(self._lease)}, idempotent=True)
        revision = int(revoked["header"]["revision"])
        waiting = [w for w in self._watches.values() if any(_under(p, w.prefix) for p in mine)]
        try:
            async with asyncio.timeout(self._timeout):
                for w in waiting:
                    while w.seen_revision < revision:
                        w.advanced.clear()
                        await w.advanced.wait()
        except TimeoutError:
            log.warning("closing metadata session: watchers did not hear revision %d in time", revision)

    async def _still_leased(self, paths: list[str]) -> list[str]:
        mine: list[str] = []
        for i in range(0, len(paths), _MAX_TXN_OPS):
            chunk = paths[i : i + _MAX_TXN_OPS]
            ops = [{"request_range": {"key": _b64(self._key(p))}} for p in chunk]
            data = await self._call("kv/txn", {"success": ops}, idempotent=True)
            for path, resp in zip(chunk, data.get("responses", []), strict=True):
                kvs = resp.get("response_range", {}).get("kvs", [])
                if kvs and int(kvs[0].get("lease", 0)) == self._lease:
                    mine.append(path)
        return mine

    # --- session

    @property
    def lease_ttl(self) -> int:
        """The TTL etcd granted, in whole seconds (etcd may raise a too-small request)."""
        return self._ttl

    @property
    def lease_id(self) -> int:
        return self._lease

    @property
    def prefix(self) -> str:
        return self._chroot

    @property
    def endpoints(self) -> list[str]:
        return list(self._endpoints)

    @property
    def session_lost_reason(self) -> str:
        return self._lost_reason

    def on_session_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (on the event loop, once) when the session is lost; at once if it
        already is. Returns an unregister function."""
        token = self._next_watch
        self._next_watch += 1
        if self.session_lost.is_set():
            asyncio.get_running_loop().call_soon(callback)
        else:
            self._lost_callbacks[token] = callback

        def unregister() -> None:
            self._lost_callbacks.pop(token, None)

        return unregister

    def _lose_session(self, reason: str) -> None:
        if self.session_lost.is_set() or self._closed:
            return
        log.error("metadata session lost (lease %x): %s", self._lease, reason)
        self._lost_reason = reason
        self.session_lost.set()
        loop = asyncio.get_running_loop()
        for callback in self._lost_callbacks.values():
            loop.call_soon(callback)
        self._lost_callbacks.clear()
        # If etcd still holds the lease (we only lost contact), revoke it so that our ephemeral
        # keys disappear now, matching what we just told our owner.
        self._revoke_task = loop.create_task(self._revoke_quietly())

    async def _revoke_quietly(self) -> None:
        with contextlib.suppress(MagnetarError, aiohttp.ClientError, TimeoutError):
            await self._call("lease/revoke", {"ID": str(self._lease)}, idempotent=True)

    async def _keep_alive(self, deadline: float) -> None:
        """Renew the lease every TTL/3. ``deadline`` is when the lease expires unless renewed:
        the send time of the last successful keepalive plus the TTL it granted."""
        interval = self._ttl / 3
        delay = interval
        while True:
            await asyncio.sleep(delay)
            if time.monotonic() >= deadline:
                self._lose_session(f"no keepalive succeeded within the {self._ttl}s lease TTL")
                return
            sent = time.monotonic()
            try:
                data = await self._call("lease/keepalive", {"ID": str(self._lease)}, idempotent=True)
            except (MagnetarError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("lease %x keepalive failed: %s", self._lease, exc)
                delay = min(interval, max(0.0, deadline - time.monotonic()) / 3, 0.5)
                continue
            ttl = int(data.get("result", {}).get("TTL", 0))
            if ttl <= 0:
                self._lose_session("etcd says the lease has expired or was revoked")
                return
            deadline = sent + ttl
            delay = interval

    # --- transport

    def _check_open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise AlreadyClosed("the metadata store is closed")
        if self._http is None:
            raise AlreadyClosed("the metadata store is not open (await store.open() or use connect())")
        return self._http

    def _observe(self, data: dict[str, Any]) -> None:
        header = data.get("header") or data.get("result", {}).get("header") or {}
        rev = int(header.get("revision", 0))
        if rev > self._revision:
            self._revision = rev

    async def _call(self, api: str, body: dict[str, Any], *, idempotent: bool) -> dict[str, Any]:
        """POST one gateway request, failing over between endpoints (see the module docstring)."""
        http = self._check_open()
        last: BaseException | None = None
        for attempt in range(len(self._endpoints)):
            endpoint = self._endpoints[self._current]
            try:
                async with http.post(f"{endpoint}/v3/{api}", json=body) as resp:
                    raw = await resp.read()
                    status = resp.status
            except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
                last = exc
                self._rotate(endpoint)
                continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = exc
                self._rotate(endpoint)
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

    def _rotate(self, failed: str) -> None:
        if self._endpoints[self._current] == failed:
            self._current = (self._current + 1) % len(self._endpoints)

    def _key(self, path: str) -> bytes:
        return (self._chroot + path).encode()

    def _path(self, key_b64: str) -> str | None:
        key = _unb64(key_b64).decode()
        if not key.startswith(self._chroot + "/"):
            return None
        return key[len(self._chroot) :]

    def _subtree(self, path: str) -> tuple[bytes, bytes]:
        """The key range strictly below ``path``: ``base/`` up to, not including, ``base0``."""
        base = self._chroot + ("" if path == "/" else path)
        return (base + "/").encode(), (base + "0").encode()

    async def _txn(
        self, compare: list[dict[str, Any]], success: list[dict[str, Any]], failure: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return await self._call(
            "kv/txn", {"compare": compare, "success": success, "failure": failure}, idempotent=False
        )

    def _version_compare(self, key: str, expected: int) -> list[dict[str, Any]]:
        if expected == MUST_NOT_EXIST:
            return [{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}]
        # A missing key has mod_revision 0 in etcd: also require existence, so expecting 0 fails.
        return [
            {"key": key, "target": "CREATE", "result": "GREATER", "create_revision": "0"},
            {"key": key, "target": "MOD", "result": "EQUAL", "mod_revision": str(expected)},
        ]

    @staticmethod
    def _failure_kv(data: dict[str, Any]) -> dict[str, Any] | None:
        responses = data.get("responses") or [{}]
        kvs = responses[0].get("response_range", {}).get("kvs") or []
        return kvs[0] if kvs else None

    # --- MetadataStore

    async def get(self, path: str) -> Versioned | None:
        data = await self._call("kv/range", {"key": _b64(self._key(check_path(path)))}, idempotent=True)
        kvs = data.get("kvs")
        if not kvs:
            return None
        kv = kvs[0]
        return Versioned(_unb64(kv.get("value")), Stat(int(kv["mod_revision"]), int(kv.get("lease", 0)) != 0))

    async def put(
        self, path: str, value: bytes, expected_version: int = ANY_VERSION, *, ephemeral: bool = False
    ) -> Stat:
        if check_path(path) == "/":
            raise ValueError("the root path holds no value")
        if ephemeral and self.session_lost.is_set():
            raise SessionLost(f"cannot create ephemeral {path}: {self._lost_reason}")
        key = _b64(self._key(path))
        request: dict[str, Any] = {"key": key, "value": _b64(bytes(value))}
        if ephemeral:
            request["lease"] = str(self._lease)
        try:
            if expected_version == MUST_NOT_EXIST or expected_version >= 0:
                data = await self._txn(
                    self._version_compare(key, expected_version),
                    [{"request_put": request}],
                    [{"request_range": {"key": key, "keys_only": True}}],
                )
                if not data.get("succeeded"):
                    current = self._failure_kv(data)
                    if expected_version == MUST_NOT_EXIST:
                        raise BadVersion(f"{path} already exists (version {current and current['mod_revision']})")
                    found = current["mod_revision"] if current else "none, the key does not exist"
                    raise BadVersion(f"{path}: expected version {expected_version}, found {found}")
            else:
                data = await self._call("kv/put", request, idempotent=True)
        except EtcdError as exc:
            if ephemeral and exc.grpc_code == _GRPC_NOT_FOUND:  # "requested lease not found"
                self._lose_session(str(exc))
                raise SessionLost(f"cannot create ephemeral {path}: the lease has expired") from exc
            raise
        if ephemeral:
            self._ephemeral.add(path)
        else:
            self._ephemeral.discard(path)
        return Stat(int(data["header"]["revision"]), ephemeral)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        key = _b64(self._key(check_path(path)))
        if expected_version >= 0:
            data = await self._txn(
                self._version_compare(key, expected_version),
                [{"request_delete_range": {"key": key}}],
                [{"request_range": {"key": key, "keys_only": True}}],
            )
            if not data.get("succeeded"):
                current = self._failure_kv(data)
                if current is None:
                    raise NotFound(f"{path} does not exist")
                raise BadVersion(f"{path}: expected version {expected_version}, found {current['mod_revision']}")
        else:
            data = await self._call("kv/deleterange", {"key": key}, idempotent=False)
            if int(data.get("deleted", 0)) == 0:
                raise NotFound(f"{path} does not exist")
        self._ephemeral.discard(path)

    async def children(self, path: str) -> list[str]:
        start, end = self._subtree(check_path(path))
        data = await self._call(
            "kv/range", {"key": _b64(start), "range_end": _b64(end), "keys_only": True}, idempotent=True
        )
        names = {_unb64(kv["key"])[len(start) :].partition(b"/")[0].decode() for kv in data.get("kvs", [])}
        return sorted(names)

    async def exists(self, path: str) -> bool:
        data = await self._call(
            "kv/range", {"key": _b64(self._key(check_path(path))), "count_only": True}, idempotent=True
        )
        return int(data.get("count", 0)) > 0

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        check_path(prefix)
        self._check_open()
        token = self._next_watch
        self._next_watch += 1
        w = _Watch(prefix, callback, start_revision=self._revision + 1)
        w.task = asyncio.get_running_loop().create_task(self._run_watch(w), name=f"etcd-watch-{prefix}")
        self._watches[token] = w

        def unsubscribe() -> None:
            gone = self._watches.pop(token, None)
            if gone is not None and gone.task is not None:
                gone.task.cancel()

        return unsubscribe

    async def increment(self, path: str) -> int:
        """A compare-and-set loop. Increments from this process queue on a per-path lock, so
        only other processes can make a round fail; a failed round retries with the value the
        failing txn read back, without another request."""
        if check_path(path) == "/":
            raise ValueError("the root path holds no value")
        key = _b64(self._key(path))
        lock = self._increment_locks.setdefault(path, asyncio.Lock())
        async with lock:
            data = await self._call("kv/range", {"key": key}, idempotent=True)
            current: dict[str, Any] | None = (data.get("kvs") or [None])[0]
            while True:
                if current is None:
                    new = 1
                    compare = self._version_compare(key, MUST_NOT_EXIST)
                    put: dict[str, Any] = {"key": key, "value": _b64(b"1")}
                else:
                    raw = _unb64(current.get("value"))
                    try:
                        new = int(raw.decode()) + 1
                    except ValueError:
                        raise ValueError(f"{path} does not hold a counter: {raw[:40]!r}") from None
                    compare = self._version_compare(key, int(current["mod_revision"]))
                    put = {"key": key, "value": _b64(str(new).encode())}
                    if int(current.get("lease", 0)):
                        put["ignore_lease"] = True  # an ephemeral counter stays ephemeral
                data = await self._txn(compare, [{"request_put": put}], [{"request_range": {"key": key}}])
                if data.get("succeeded"):
                    return new
                current = self._failure_kv(data)

    # --- watches

    async def _run_watch(self, w: _Watch) -> None:
        """One watch stream, reconnected (on the next endpoint) from the revision after the last
        event delivered, so that no event is lost or repeated across reconnects."""
        http = self._check_open()
        start, _ = self._subtree(w.prefix)
        key = start[:-1] if w.prefix != "/" else start  # the watched key itself and everything after it
        end = start[:-1] + b"0"
        next_revision = w.start_revision
        backoff = 0.05
        while True:
            endpoint = self._endpoints[self._current]
            body = {"create_request": {"key": _b64(key), "range_end": _b64(end), "start_revision": str(next_revision)}}
            try:
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
                            next_revision = self._on_watch_message(w, message, next_revision)
                            backoff = 0.05
                log.info("etcd watch stream on %s closed by the server; reconnecting", w.prefix)
            except _Compacted as exc:
                next_revision = exc.revision  # the events before it are gone: resume at the oldest left
            except (aiohttp.ClientError, TimeoutError, EtcdError, ValueError) as exc:
                log.warning("etcd watch on %s via %s failed (%s); reconnecting", w.prefix, endpoint, exc)
                self._rotate(endpoint)
            await asyncio.sleep(backoff)  # a reconnect delay, not a wait for an event
            backoff = min(backoff * 2, 1.0)

    def _on_watch_message(self, w: _Watch, message: dict[str, Any], next_revision: int) -> int:
        if "error" in message:
            raise EtcdError(0, json.dumps(message["error"])[:200])
        result = message.get("result", {})
        if result.get("canceled"):
            compacted = int(result.get("compact_revision", 0))
            if compacted:
                log.error("etcd watch on %s lost events before revision %d (compacted)", w.prefix, compacted)
                raise _Compacted(compacted)
            raise EtcdError(0, f"watch canceled: {result.get('cancel_reason', '')}")
        for event in result.get("events", ()):
            kv = event["kv"]
            revision = int(kv["mod_revision"])
            next_revision = revision + 1
            path = self._path(kv["key"])
            if path is not None and _under(path, w.prefix):
                note = Notification("delete" if event.get("type") == "DELETE" else "put", path)
                try:
                    w.callback(note)
                except Exception:
                    log.exception("metadata watcher %r failed on %s", w.callback, note)
            if revision > w.seen_revision:
                w.seen_revision = revision
                w.advanced.set()
        return next_revision


def _conformance() -> None:
    """Never called: makes mypy prove that ``EtcdMetadataStore`` implements ``MetadataStore``."""
    from magnetar.metadata.store import MetadataStore

    _impl: type[MetadataStore] = EtcdMetadataStore
