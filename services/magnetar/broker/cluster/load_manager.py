"""The load manager at run time: load reports, the leader's shedding and splitting, placement.

Every broker writes its load report (``load_reports.py``), keeps every broker's, campaigns for the
leadership (``leader.py``) and places the unowned bundles it is asked about by Pulsar's
``LeastResourceUsageWithWeight`` (or ``LeastLongTermMessageRate``) over those reports (``choose``,
the ownership's placement hook).

The leader, every ``loadBalancerSheddingIntervalMinutes``, asks the split conditions which bundles
are too big and splits each at its owner (``PUT .../{bundle}/split``), then asks Pulsar's
``ThresholdShedder`` which bundles to take off overloaded brokers and unloads each at its owner
over the admin API (``PUT .../{bundle}/unload?destinationBroker=``, the destination chosen by
placement among the other brokers). Splits go first so that a bundle just split is not also
unloaded on figures that predate the split. It calls the owners as any admin client would, with the
broker's own credentials, so an owner applies its own checks and the move is the same as an
operator's. Each move is remembered (``moves``): the grace period keeps a bundle from moving twice
in a row, and stats and metrics say what moved, from where, to where and why.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import urllib.parse
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from magnetar import __version__
from magnetar.broker.auth.broker_credentials import broker_token
from magnetar.broker.cluster.leader import LeaderElection, LeaderInfo
from magnetar.broker.cluster.load_reports import LoadReports, LoadSampler, LoadSource
from magnetar.broker.cluster.ownership import BrokerInfo
from magnetar.broker.config import BrokerConfig
from magnetar.broker.loadbalance.bundle_ranges import parse_bundle
from magnetar.broker.loadbalance.placement import strategy_for
from magnetar.broker.loadbalance.shedding import ThresholdShedder
from magnetar.broker.loadbalance.split_conditions import find_bundles_to_split, namespace_of
from magnetar.metadata.store import MetadataStore

log = logging.getLogger(__name__)

__all__ = ["LoadManager", "Move"]

RECENT_MOVES = 200  # moves kept for stats


class ManagedService(LoadSource, Protocol):
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def store(self) -> MetadataStore: ...


@dataclass(frozen=True, slots=True)
class Move:
    """One decision of the leader: an unload (``kind`` "unload") or a split ("split")."""

    kind: str
    bundle: str
    from_broker: str
    to_broker: str  # the destination asked for (unloads); "" for a split
    reason: str
    at: int  # milliseconds since the epoch
    ok: bool
    detail: str = ""

    def to_doc(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "bundle": self.bundle,
            "fromBroker": self.from_broker,
            "toBroker": self.to_broker,
            "reason": self.reason,
            "timestamp": self.at,
            "success": self.ok,
            "detail": self.detail,
        }


class LoadManager:
    def __init__(self, service: ManagedService) -> None:
        self.service = service
        self.settings = service.config.load_balancer
        self.reports = LoadReports(service.store, LoadSampler(service, self.settings, __version__), self.settings)
        me = LeaderInfo(service.broker_id, service.web_url or "", uuid.uuid4().hex)
        self.election = LeaderElection(service.store, me, self._leadership_changed)
        self.shedder = ThresholdShedder()
        self.recently_unloaded: dict[str, int] = {}  # bundle -> when the leader unloaded it (ms)
        self.moves: collections.deque[Move] = collections.deque(maxlen=RECENT_MOVES)
        # Counters for metrics (Pulsar's pulsar_lb_unload_bundle_total & co) on the leader.
        self.unloaded_bundles = 0
        self.unloaded_brokers = 0
        self.splits = 0
        self.shedding_rounds = 0
        self.skipped: dict[str, str] = {}  # broker -> why the last round shed nothing from it
        # Bundles this broker placed since each broker's report (placement counts them in).
        self._assigned: dict[str, set[str]] = {}
        self._assigned_at: dict[str, int] = {}
        self._leader_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self.settings.load_balancer_enabled:
            return
        await self.reports.start()
        own = self.service.ownership
        if own is not None:
            own.choose = self.choose
        await self.election.start()

    async def stop(self) -> None:
        if self._leader_task is not None:
            self._leader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._leader_task
            self._leader_task = None
        await self.election.stop()
        await self.reports.stop()

    def _leadership_changed(self, leader: bool) -> None:
        if leader and self._leader_task is None:
            self._leader_task = asyncio.get_running_loop().create_task(self._lead())
        elif not leader and self._leader_task is not None:
            self._leader_task.cancel()
            self._leader_task = None

    # ------------------------------------------------------------------ placement
    def choose(self, brokers: list[BrokerInfo], bundle: str) -> BrokerInfo:
        """Ownership's placement hook: the least used of ``brokers`` for ``bundle`` by the reports;
        the bundles placed since a broker's last report count towards its usage."""
        reports = self.reports.reports
        for broker, at in list(self._assigned_at.items()):
            report = reports.get(broker)
            if report is not None and report.last_update > at:
                self._assigned.pop(broker, None)
                self._assigned_at.pop(broker, None)
        history = self.shedder.history.snapshot()
        strategy = strategy_for(self.settings.load_placement_strategy, reports, self.settings, history)
        chosen = strategy.select([b.broker_id for b in brokers], bundle, self._assigned)
        pick = next((b for b in brokers if b.broker_id == chosen), brokers[0])
        self._assigned.setdefault(pick.broker_id, set()).add(bundle)
        self._assigned_at.setdefault(pick.broker_id, int(time.time() * 1000))
        return pick

    async def _destination(self, bundle: str, exclude: str, given: set[str]) -> str | None:
        """Where the leader sends an unloaded bundle: placement among the live brokers but its
        owner that the namespace isolation policies allow, and among those, the ones not yet given
        a bundle in this round while there are any. Placement picks among brokers of similar usage
        by a hash, so without that the several unloads of one round could all land on one broker,
        which the grace period would then keep overloaded."""
        own = self.service.ownership
        if own is None:
            return None
        brokers = [b for b in await own.live_brokers() if b.broker_id != exclude]
        if own.isolation is not None and brokers:
            with contextlib.suppress(Exception):
                allowed = set(await own.isolation.allowed(namespace_of(bundle), [b.broker_id for b in brokers]))
                brokers = [b for b in brokers if b.broker_id in allowed]
        if not brokers:
            return None
        fresh = [b for b in brokers if b.broker_id not in given]
        chosen = self.choose(fresh or brokers, bundle).broker_id
        given.add(chosen)
        return chosen

    # ------------------------------------------------------------------ the leader's loop
    async def _lead(self) -> None:
        interval = max(self.settings.shedding_interval_minutes * 60.0, 0.5)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reports.refresh()
                await self.split_once()  # first: a bundle split now is not also shed on stale figures
                await self.shed_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("load manager round failed: %s", exc)

    async def shed_once(self) -> list[Move]:
        """One shedding round (the leader's): unload what ThresholdShedder picks."""
        if not self.settings.shedding_enabled:
            return []
        now = int(time.time() * 1000)
        grace = self.settings.shedding_grace_period_minutes * 60_000
        self.recently_unloaded = {b: t for b, t in self.recently_unloaded.items() if now - t < grace}
        plan = self.shedder.find_bundles_to_unload(self.reports.reports, self.settings, now, self.recently_unloaded)
        self.shedding_rounds += 1
        self.skipped = dict(plan.skipped)
        done: list[Move] = []
        brokers: set[str] = set()
        given: set[str] = set()
        for unload in plan.unloads:
            destination = await self._destination(unload.bundle, unload.broker, given) or ""
            query = f"?destinationBroker={urllib.parse.quote(destination)}" if destination else ""
            ok, detail = await self._call_owner(unload.broker, "PUT", _bundle_path(unload.bundle, "unload") + query)
            reason = (
                f"{unload.reason}: usage {unload.broker_usage:.0%} over average {unload.average_usage:.0%}, "
                f"bundle {unload.throughput / 1024:.0f} KB/s"
            )
            move = Move("unload", unload.bundle, unload.broker, destination, reason, now, ok, detail)
            self.moves.append(move)
            done.append(move)
            if ok:
                self.recently_unloaded[unload.bundle] = now
                self.unloaded_bundles += 1
                brokers.add(unload.broker)
            log.info(
                "load manager: unload %s from %s to %s (%s): %s",
                unload.bundle,
                unload.broker,
                destination,
                reason,
                "done" if ok else detail,
            )
        self.unloaded_brokers += len(brokers)
        return done

    async def split_once(self) -> list[Move]:
        """One split round (the leader's): split the bundles over Pulsar's limits at their owners."""
        if not self.settings.auto_bundle_split_enabled:
            return []
        reports = self.reports.reports
        counts = await self._bundle_counts(namespace_of(b) for r in reports.values() for b in r.last_stats)
        now = int(time.time() * 1000)
        done: list[Move] = []
        unload = "true" if self.settings.auto_unload_split_bundles_enabled else "false"
        algorithm = self.settings.default_namespace_bundle_split_algorithm
        for split in find_bundles_to_split(reports, self.settings, counts):
            path = _bundle_path(split.bundle, "split") + f"?unload={unload}&splitAlgorithmName={algorithm}"
            ok, detail = await self._call_owner(split.broker, "PUT", path)
            move = Move("split", split.bundle, split.broker, "", f"over {split.reason} limit", now, ok, detail)
            self.moves.append(move)
            done.append(move)
            if ok:
                self.splits += 1
                for bundle in [split.bundle, *await self._parts_of(split.bundle)]:
                    self.recently_unloaded[bundle] = now  # its halves are being placed: not shed too
            log.info(
                "load manager: split %s on %s (%s): %s",
                split.bundle,
                split.broker,
                split.reason,
                "done" if ok else detail,
            )
        return done

    async def _parts_of(self, bundle: str) -> list[str]:
        """The namespace's bundles now inside ``bundle``'s range (its halves, once split).

        The owner's next load report already lists the halves, with the traffic the parent had
        before its clients moved: without the grace period, the shedding right after the split
        would unload a half again while its clients are still re-attaching, a second move for
        nothing."""
        own = self.service.ownership
        if own is None:
            return []
        ns, _, name = bundle.rpartition("/")
        tenant, _, namespace = ns.partition("/")
        try:
            lo, hi = parse_bundle(name)
            ranges, _ = await own.read_ranges(tenant, namespace)
        except Exception:  # the store is away or the name is odd: the grace period covers the parent only
            return []
        parts = []
        for part in ranges.names():
            p_lo, p_hi = parse_bundle(part)
            if lo <= p_lo and p_hi <= hi and part != name:
                parts.append(f"{ns}/{part}")
        return parts

    async def _bundle_counts(self, namespaces: Iterable[str]) -> dict[str, int]:
        own = self.service.ownership
        counts: dict[str, int] = {}
        for ns in set(namespaces):
            if own is None:
                counts[ns] = self.service.bundles
                continue
            tenant, _, name = ns.partition("/")
            with contextlib.suppress(Exception):
                ranges, _ = await own.read_ranges(tenant, name)
                counts[ns] = ranges.count
        return counts

    async def _call_owner(self, broker: str, method: str, path: str) -> tuple[bool, str]:
        """``method path`` on ``broker``'s admin API (its URL from its load report), with the
        broker's own credentials: (success, the error's text)."""
        report = self.reports.reports.get(broker)
        base = report.web_service_url if report is not None else ""
        if not base:
            return False, f"no admin URL for {broker}"
        token = broker_token(self.service.config)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
                session.request(method, base + path, headers=headers) as resp,
            ):
                text = await resp.text()
                return resp.status < 300, "" if resp.status < 300 else f"{resp.status} {text[:200]}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return False, f"{type(exc).__name__}: {exc}"

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, Any]:
        """Who owns which bundle (by the reports), the leader, and the recent moves with reasons."""
        owners = {b: broker for broker, r in sorted(self.reports.reports.items()) for b in r.bundles}
        current = self.election.current
        return {
            "leaderBroker": current.broker_id if current is not None else "",
            "isLeader": self.election.is_leader,
            "bundleOwners": dict(sorted(owners.items())),
            "recentMoves": [m.to_doc() for m in reversed(self.moves)],
            "lastShedding": {"rounds": self.shedding_rounds, "skipped": dict(sorted(self.skipped.items()))},
        }


def _bundle_path(bundle: str, verb: str) -> str:
    """``tenant/ns/0x.._0x..`` -> ``/admin/v2/namespaces/tenant/ns/0x.._0x../{verb}``."""
    return "/admin/v2/namespaces/" + "/".join(urllib.parse.quote(p, safe="") for p in bundle.split("/")) + "/" + verb
