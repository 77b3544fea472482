"""The load manager's leader: one broker of the cluster, elected through the metadata store.

Each broker tries to create ``/loadbalance/leader`` (ephemeral, create-only); the one that succeeds
leads until its session ends, and the others watch the key and try again when it goes, so a new
leader is in place within one lease of the old one's death (the lease is what ends a dead broker's
keys). The value is Pulsar's ``LeaderBroker`` JSON (``brokerId``, ``serviceUrl``), which
``GET /admin/v2/brokers/leaderBroker`` answers. The standalone's one broker elects itself the same
way.

A key left by an earlier run of this broker (same id, another incarnation: that process is dead,
since this one holds its port) is deleted at once rather than waited out, as ownership keys are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore, Notification
from magnetar.protocol.errors import BadVersion, NotFound

log = logging.getLogger(__name__)

__all__ = ["LeaderElection", "LeaderInfo"]


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    broker_id: str
    service_url: str
    incarnation: str = ""

    def to_doc(self) -> dict[str, str]:
        """Pulsar's ``LeaderBroker`` JSON."""
        return {"brokerId": self.broker_id, "serviceUrl": self.service_url}

    def to_json(self) -> bytes:
        return json.dumps({**self.to_doc(), "incarnation": self.incarnation}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LeaderInfo:
        doc: dict[str, Any] = json.loads(raw)
        return cls(str(doc.get("brokerId", "")), str(doc.get("serviceUrl", "")), str(doc.get("incarnation", "")))


class LeaderElection:
    """Campaigns for ``LOADBALANCE_LEADER``; ``on_change(is_leader)`` is called when that flips."""

    def __init__(self, store: MetadataStore, me: LeaderInfo, on_change: Callable[[bool], None] | None = None) -> None:
        self.store = store
        self.me = me
        self.on_change = on_change
        self.is_leader = False
        self.current: LeaderInfo | None = None
        self.elections = 0  # times this broker became the leader
        self._unwatch: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopped = False

    async def start(self) -> None:
        self._unwatch = self.store.watch(paths.LOADBALANCE_LEADER, self._changed)
        await self._campaign()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopped = True
        if self._unwatch is not None:
            self._unwatch()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.is_leader:
            self._set(False)
            with contextlib.suppress(NotFound, BadVersion, Exception):
                found = await self.store.get(paths.LOADBALANCE_LEADER)
                if found is not None and LeaderInfo.from_json(found.value) == self.me:
                    await self.store.delete(paths.LOADBALANCE_LEADER, found.version)

    async def leader(self) -> LeaderInfo | None:
        """The leader now, read from the store (not the cache, which a watch may not have updated)."""
        found = await self.store.get(paths.LOADBALANCE_LEADER)
        return LeaderInfo.from_json(found.value) if found is not None else None

    def _changed(self, note: Notification) -> None:
        if note.path == paths.LOADBALANCE_LEADER:
            self._wake.set()

    async def _run(self) -> None:
        """Campaign again whenever the key changes (a delete lets this broker in), and every few
        seconds anyway, so a missed notification cannot leave the cluster without a leader."""
        while not self._stopped:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 5.0)
            self._wake.clear()
            try:
                await self._campaign()
            except Exception as exc:  # the store is away for a moment: try on the next wake
                log.warning("leader election: %s", exc)

    async def _campaign(self) -> None:
        try:
            await self.store.put(paths.LOADBALANCE_LEADER, self.me.to_json(), MUST_NOT_EXIST, ephemeral=True)
        except BadVersion:
            found = await self.store.get(paths.LOADBALANCE_LEADER)
            if found is None:  # gone between the write and the read: the next wake tries again
                self._wake.set()
                return
            current = LeaderInfo.from_json(found.value)
            if current.broker_id == self.me.broker_id and current.incarnation != self.me.incarnation:
                log.info("removing the leader key of a previous run of %s", self.me.broker_id)
                with contextlib.suppress(NotFound, BadVersion):
                    await self.store.delete(paths.LOADBALANCE_LEADER, found.version)
                self._wake.set()
                return
            self.current = current
            self._set(current == self.me)
            return
        self.current = self.me
        self.elections += 1
        log.info("broker %s is now the load manager's leader", self.me.broker_id)
        self._set(True)

    def _set(self, leader: bool) -> None:
        if leader != self.is_leader:
            self.is_leader = leader
            if self.on_change is not None:
                self.on_change(leader)
