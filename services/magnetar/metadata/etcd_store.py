"""The cluster metadata store: ``MetadataStore`` on etcd v3.

This module is the mapping of the contract onto etcd. How requests reach etcd (its JSON gRPC
gateway over aiohttp, endpoints and failover, base64, the JSON shapes) is ``etcd_gateway``'s
business, so that what follows reads without the wire format.

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
  renewed every TTL/3 (``etcd_lease``). ``close`` revokes it, which deletes every ephemeral key in
  one revision; if the process dies or is paused past the TTL, etcd expires the lease and the keys
  go too.
- Watches are one gateway watch stream per ``watch`` call, started at the revision after the last
  one this store has seen, so a write awaited before ``watch()`` is not reported and every write
  after it is, even though the stream connects asynchronously (``etcd_watches``).

Session loss. A broker that owns bundles through ephemeral keys must stop serving the moment it
can no longer prove it holds its lease. ``session_lost`` is set (and ``on_session_lost``
callbacks run) when a keepalive answers that the lease is gone, or when no keepalive has
succeeded for a whole TTL (``etcd_lease`` says how that is timed). After that, ephemeral puts
raise ``SessionLost``; plain keys keep working.

Failover between endpoints is the gateway's: a request that may have been applied (a
compare-and-set, a delete) is not repeated on another endpoint but raises ``NotConnected``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Self

import aiohttp

from magnetar.metadata.etcd_gateway import (
    DEFAULT_REQUEST_TIMEOUT,
    GRPC_NOT_FOUND,
    MAX_TXN_OPS,
    EtcdError,
    EtcdGateway,
    KeyValue,
    delete_op,
    normalize_endpoint,
    put_op,
    range_op,
)
from magnetar.metadata.etcd_keys import EtcdKeys, version_compare
from magnetar.metadata.etcd_lease import EtcdLease
from magnetar.metadata.etcd_watches import EtcdWatches
from magnetar.metadata.store import (
    ANY_VERSION,
    MUST_NOT_EXIST,
    Stat,
    Versioned,
    Watcher,
    check_path,
)
from magnetar.protocol.errors import AlreadyClosed, BadVersion, MagnetarError, NotFound

__all__ = [
    "DEFAULT_LEASE_TTL",
    "DEFAULT_PREFIX",
    "DEFAULT_REQUEST_TIMEOUT",
    "EtcdError",
    "EtcdMetadataStore",
    "SessionLost",
    "parse_etcd_url",
]

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/magnetar"
DEFAULT_LEASE_TTL = 10.0


class SessionLost(MagnetarError):
    """This store's lease has expired or was revoked: its ephemeral keys are gone and it can
    create no more. The owner must stop acting on anything those keys claimed."""


def _check_chroot(prefix: str) -> str:
    """A chroot is ``""`` (none) or an absolute path without a trailing slash."""
    if prefix in ("", "/"):
        return ""
    return check_path(prefix)


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
        self._gateway = EtcdGateway(endpoints, request_timeout=request_timeout)
        if lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, got {lease_ttl}")
        self._keys = EtcdKeys(_check_chroot(prefix))
        self._timeout = request_timeout
        self._started = False  # open() has begun (it is not repeated)
        self._closed = False
        # etcd counts whole seconds: round up.
        self._lease = EtcdLease(self._etcd, max(1, int(-(-lease_ttl // 1))), lambda: self._closed)
        self.session_lost = self._lease.lost
        self._ephemeral: set[str] = set()  # paths this session wrote with its lease
        self._watches = EtcdWatches(self._etcd, self._keys)
        self._increment_locks: dict[str, asyncio.Lock] = {}

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
        if self._started:
            return self
        self._started = True
        self._gateway.open()
        try:
            await self._lease.grant()
        except BaseException:
            await self._gateway.close()
            self._started = False
            raise
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
        if self._closed or not self._started:
            self._closed = True
            return
        await self._lease.stop_renewing()
        try:
            if self._lease.revoke_task is not None:
                await self._lease.revoke_task
            elif not self.session_lost.is_set():
                await self._revoke_and_drain()
        except (MagnetarError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("closing metadata session: lease %x not revoked (%s); etcd will expire it", self._lease.id, exc)
        finally:
            self._closed = True
            await self._watches.stop()
            await self._gateway.close()

    async def _revoke_and_drain(self) -> None:
        # Which of our ephemeral keys still carry our lease (another session may have overwritten
        # some): those are the deletions our own watchers must see before close returns.
        mine = await self._still_leased(sorted(self._ephemeral))
        revision = await self._etcd().lease_revoke(self._lease.id)
        try:
            async with asyncio.timeout(self._timeout):
                await self._watches.hear(mine, revision)
        except TimeoutError:
            log.warning("closing metadata session: watchers did not hear revision %d in time", revision)

    async def _still_leased(self, paths: list[str]) -> list[str]:
        mine: list[str] = []
        for i in range(0, len(paths), MAX_TXN_OPS):
            chunk = paths[i : i + MAX_TXN_OPS]
            read = await self._etcd().txn([], [range_op(self._keys.key(p)) for p in chunk])
            for path, kvs in zip(chunk, read.ranges, strict=True):
                if kvs and kvs[0].lease == self._lease.id:
                    mine.append(path)
        return mine

    # --- session

    @property
    def lease_ttl(self) -> int:
        """The TTL etcd granted, in whole seconds (etcd may raise a too-small request)."""
        return self._lease.ttl

    @property
    def lease_id(self) -> int:
        return self._lease.id

    @property
    def prefix(self) -> str:
        return self._keys.chroot

    @property
    def endpoints(self) -> list[str]:
        return self._gateway.endpoints

    @property
    def session_lost_reason(self) -> str:
        return self._lease.lost_reason

    def on_session_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (on the event loop, once) when the session is lost; at once if it
        already is. Returns an unregister function."""
        return self._lease.on_lost(callback)

    # --- keys

    def _etcd(self) -> EtcdGateway:
        """The gateway, if this store is open."""
        if self._closed:
            raise AlreadyClosed("the metadata store is closed")
        if not self._started:
            raise AlreadyClosed("the metadata store is not open (await store.open() or use connect())")
        return self._gateway

    # --- MetadataStore

    async def get(self, path: str) -> Versioned | None:
        kvs = await self._etcd().range(self._keys.key(check_path(path)))
        if not kvs:
            return None
        kv = kvs[0]
        return Versioned(kv.value, Stat(kv.mod_revision, kv.lease != 0))

    async def put(
        self, path: str, value: bytes, expected_version: int = ANY_VERSION, *, ephemeral: bool = False
    ) -> Stat:
        if check_path(path) == "/":
            raise ValueError("the root path holds no value")
        if ephemeral and self.session_lost.is_set():
            raise SessionLost(f"cannot create ephemeral {path}: {self._lease.lost_reason}")
        key = self._keys.key(path)
        lease = self._lease.id if ephemeral else 0
        try:
            if expected_version == MUST_NOT_EXIST or expected_version >= 0:
                result = await self._etcd().txn(
                    version_compare(key, expected_version),
                    [put_op(key, bytes(value), lease=lease)],
                    [range_op(key, keys_only=True)],
                )
                if not result.succeeded:
                    current = result.first()
                    if expected_version == MUST_NOT_EXIST:
                        raise BadVersion(f"{path} already exists (version {current and current.mod_revision})")
                    found = current.mod_revision if current else "none, the key does not exist"
                    raise BadVersion(f"{path}: expected version {expected_version}, found {found}")
                revision = result.revision
            else:
                revision = await self._etcd().put(key, bytes(value), lease=lease)
        except EtcdError as exc:
            if ephemeral and exc.grpc_code == GRPC_NOT_FOUND:  # "requested lease not found"
                self._lease.lose(str(exc))
                raise SessionLost(f"cannot create ephemeral {path}: the lease has expired") from exc
            raise
        if ephemeral:
            self._ephemeral.add(path)
        else:
            self._ephemeral.discard(path)
        return Stat(revision, ephemeral)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        key = self._keys.key(check_path(path))
        if expected_version >= 0:
            result = await self._etcd().txn(
                version_compare(key, expected_version),
                [delete_op(key)],
                [range_op(key, keys_only=True)],
            )
            if not result.succeeded:
                current = result.first()
                if current is None:
                    raise NotFound(f"{path} does not exist")
                raise BadVersion(f"{path}: expected version {expected_version}, found {current.mod_revision}")
        elif await self._etcd().delete_range(key) == 0:
            raise NotFound(f"{path} does not exist")
        self._ephemeral.discard(path)

    async def children(self, path: str) -> list[str]:
        start, end = self._keys.subtree(check_path(path))
        kvs = await self._etcd().range(start, end, keys_only=True)
        names = {kv.key[len(start) :].partition(b"/")[0].decode() for kv in kvs}
        return sorted(names)

    async def exists(self, path: str) -> bool:
        return await self._etcd().count(self._keys.key(check_path(path))) > 0

    def watch(self, prefix: str, callback: Watcher) -> Callable[[], None]:
        check_path(prefix)
        self._etcd()
        return self._watches.add(prefix, callback, self._gateway.revision + 1)

    async def increment(self, path: str) -> int:
        """A compare-and-set loop. Increments from this process queue on a per-path lock, so
        only other processes can make a round fail; a failed round retries with the value the
        failing txn read back, without another request."""
        if check_path(path) == "/":
            raise ValueError("the root path holds no value")
        key = self._keys.key(path)
        lock = self._increment_locks.setdefault(path, asyncio.Lock())
        async with lock:
            current: KeyValue | None = next(iter(await self._etcd().range(key)), None)
            while True:
                if current is None:
                    new = 1
                    compare = version_compare(key, MUST_NOT_EXIST)
                    put = put_op(key, b"1")
                else:
                    raw = current.value
                    try:
                        new = int(raw.decode()) + 1
                    except ValueError:
                        raise ValueError(f"{path} does not hold a counter: {raw[:40]!r}") from None
                    compare = version_compare(key, current.mod_revision)
                    # An ephemeral counter stays ephemeral.
                    put = put_op(key, str(new).encode(), ignore_lease=current.lease != 0)
                result = await self._etcd().txn(compare, [put], [range_op(key)])
                if result.succeeded:
                    return new
                current = result.first()


def _conformance() -> None:
    """Never called: makes mypy prove that ``EtcdMetadataStore`` implements ``MetadataStore``."""
    from magnetar.metadata.store import MetadataStore

    _impl: type[MetadataStore] = EtcdMetadataStore
