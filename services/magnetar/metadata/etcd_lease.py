"""The etcd store's session: one lease for its ephemeral keys, renewed, and lost loudly.

The lease is granted when the store opens and renewed every TTL/3. A broker that owns bundles
through ephemeral keys must stop serving the moment it can no longer prove it holds its lease, so
the session is *lost* (``lost`` set, ``on_lost`` callbacks run) when a keepalive answers that the
lease is gone, or when no keepalive has succeeded for a whole TTL (the lease may have expired while
etcd could not be reached, or while the process was stopped). The TTL counts from the send of the
last keepalive that succeeded, which etcd received no earlier, so the session ends no later than
etcd expires the lease; a keepalive still unanswered at that moment is abandoned, so a silent etcd
(packets dropped, not refused) cannot stretch the session by a request timeout. A lost session
revokes the lease if etcd still holds it, so that the keys disappear when the owner is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import aiohttp

from magnetar.metadata.etcd_gateway import EtcdGateway
from magnetar.protocol.errors import MagnetarError

# The etcd store logs under one name, whichever of its modules holds the code, so that a log
# filter set for it keeps catching every line.
log = logging.getLogger("magnetar.metadata.etcd_store")


class EtcdLease:
    """The lease of one store session. ``etcd`` is the store's gateway accessor (it refuses once
    the store is closed); ``closed`` says whether the store has closed, after which a loss is no
    longer reported."""

    def __init__(self, etcd: Callable[[], EtcdGateway], requested_ttl: int, closed: Callable[[], bool]) -> None:
        self._etcd = etcd
        self._closed = closed
        self._requested_ttl = requested_ttl
        self.ttl = requested_ttl
        self.id = 0
        self.lost = asyncio.Event()
        self.lost_reason = ""
        self._keepalive: asyncio.Task[None] | None = None
        self._revoke_task: asyncio.Task[None] | None = None
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next_callback = 0

    async def grant(self) -> None:
        """Ask etcd for the lease and start renewing it."""
        self.id, self.ttl = await self._etcd().lease_grant(self._requested_ttl)
        self._keepalive = asyncio.get_running_loop().create_task(
            self._keep_alive(time.monotonic() + self.ttl), name=f"etcd-keepalive-{self.id:x}"
        )

    async def stop_renewing(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive

    @property
    def revoke_task(self) -> asyncio.Task[None] | None:
        """The revocation a lost session started, if any (closing waits for it)."""
        return self._revoke_task

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (on the event loop, once) when the session is lost; at once if it
        already is. Returns an unregister function."""
        token = self._next_callback
        self._next_callback += 1
        if self.lost.is_set():
            asyncio.get_running_loop().call_soon(callback)
        else:
            self._callbacks[token] = callback

        def unregister() -> None:
            self._callbacks.pop(token, None)

        return unregister

    def lose(self, reason: str) -> None:
        if self.lost.is_set() or self._closed():
            return
        log.error("metadata session lost (lease %x): %s", self.id, reason)
        self.lost_reason = reason
        self.lost.set()
        loop = asyncio.get_running_loop()
        for callback in self._callbacks.values():
            loop.call_soon(callback)
        self._callbacks.clear()
        # If etcd still holds the lease (we only lost contact), revoke it so that our ephemeral
        # keys disappear now, matching what we just told our owner.
        self._revoke_task = loop.create_task(self._revoke_quietly())

    async def _revoke_quietly(self) -> None:
        with contextlib.suppress(MagnetarError, aiohttp.ClientError, TimeoutError):
            await self._etcd().lease_revoke(self.id)

    async def _keep_alive(self, deadline: float) -> None:
        """Renew the lease every TTL/3. ``deadline`` is when the lease expires unless renewed:
        the send time of the last successful keepalive plus the TTL it granted."""
        interval = self.ttl / 3
        delay = interval
        while True:
            await asyncio.sleep(delay)
            if time.monotonic() >= deadline:
                self.lose(f"no keepalive succeeded within the {self.ttl}s lease TTL")
                return
            sent = time.monotonic()
            try:
                # No longer than the lease has left: a keepalive that hangs (etcd unreachable but
                # not refusing, a dropped-packet partition) would otherwise keep this session
                # "alive" for up to the request timeout after etcd expired the lease and let
                # another broker take our bundles (tests/faults/test_partitions.py, scenario a).
                async with asyncio.timeout(max(deadline - sent, 0.0)):
                    ttl = await self._etcd().lease_keepalive(self.id)
            except (MagnetarError, aiohttp.ClientError, TimeoutError) as exc:
                log.warning("lease %x keepalive failed: %s", self.id, exc)
                delay = min(interval, max(0.0, deadline - time.monotonic()) / 3, 0.5)
                continue
            if ttl <= 0:
                self.lose("etcd says the lease has expired or was revoked")
                return
            deadline = sent + ttl
            delay = interval
