"""Load reports: each broker's usage, written to the metadata store for the leader and for placement.

Every ``loadBalancerHostUsageCheckIntervalMinutes`` the broker samples itself (``LoadSampler``) and
writes the result to ``/loadbalance/brokers/{id}`` (ephemeral: a dead broker's report goes with its
session) when Pulsar's update rules say it changed enough (``needs_update``): never more often than
``loadBalancerReportUpdateMinIntervalMillis``, always after ``loadBalancerReportUpdateMaxIntervalMinutes``,
and in between when a figure moved by more than ``loadBalancerReportUpdateThresholdPercentage``.
Writing every sample would make the store's write load grow with the broker count for no decision
that changes; writing only on change keeps a quiet cluster quiet.

What is measured, and why per process: several brokers may share a host (a local cluster, pods on
one node), so the host's CPU and NIC counters would charge each broker with the others' work.

- CPU: this process's CPU time over the interval, in percent of one core; the limit is 100 per core
  the process may run on.
- Memory: the resident set, in MB, of the host's total; direct memory: 0 of 0 (no such thing here).
- Bandwidth in/out: this broker's message bytes per second, in Kbit/s, against
  ``loadBalancerOverrideBrokerNicSpeedGbps`` or else the speed of the host's NICs (from /sys);
  0 = unknown, which counts as no usage.
- Per bundle (``lastStats``): the rates, throughputs, producers, consumers and topics of its loaded
  topics, rates averaged over the whole interval from the topics' counters (not the 1-second rate,
  which one burst makes jump).

``LoadReports`` also keeps every broker's latest report (a watch on ``/loadbalance/brokers``), which
the leader sheds from and placement chooses with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from magnetar.broker.cluster.ownership import Ownership, bundle_of
from magnetar.broker.loadbalance.model import BrokerLoad, BundleStats, ResourceUsage
from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore, Notification
from magnetar.protocol.errors import NotFound
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

__all__ = ["LoadReports", "LoadSampler", "needs_update", "nic_speed_kbps", "percent_change"]

KBIT = 1024.0  # bits per Kbit, as Pulsar counts NIC usage


class LoadSource(Protocol):
    """What the sampler reads of the broker service (broker/service.py): its loaded topics."""

    @property
    def broker_id(self) -> str: ...
    @property
    def ownership(self) -> Ownership | None: ...
    @property
    def bundles(self) -> int: ...
    @property
    def topics(self) -> Any: ...  # LoadedTopics: key -> PersistentTopic, with name_of(key)
    @property
    def non_persistent(self) -> Any: ...  # NonPersistentTopics: .topics, key -> NonPersistentTopic
    @property
    def web_url(self) -> str | None: ...
    @property
    def broker_url(self) -> str | None: ...


def percent_change(old: float, new: float) -> float:
    """Pulsar's ``percentChange``: how far ``new`` is from ``old`` in percent of ``old``; from 0 to
    anything else is an infinite change, so a broker's first traffic is reported at once."""
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return 100.0 * abs((old - new) / old)


def needs_update(last: BrokerLoad | None, current: BrokerLoad, now_ms: int, settings: LoadBalancerSettings) -> bool:
    """Whether ``current`` is to be written, ``last`` being the report written before (Pulsar's
    ``needBrokerDataUpdate`` with its minimum interval): the largest of the change in the highest
    resource usage (in points), in message rate, in throughput and in bundle count, against
    ``loadBalancerReportUpdateThresholdPercentage``."""
    if last is None:
        return True
    elapsed = now_ms - last.last_update
    if elapsed < settings.report_update_min_interval_millis:
        return False
    if elapsed > settings.report_update_max_interval_minutes * 60_000:
        return True
    change = max(
        100.0 * abs(last.max_resource_usage() - current.max_resource_usage()),
        percent_change(last.msg_rate, current.msg_rate),
        percent_change(last.throughput, current.throughput),
        percent_change(last.num_bundles, current.num_bundles),
    )
    return change > settings.report_update_threshold_percentage


def nic_speed_kbps(settings: LoadBalancerSettings, sys_net: Path = Path("/sys/class/net")) -> float:
    """The network limit bandwidth usage is measured against, in Kbit/s: the override, else the sum
    of the physical NICs' speeds (a NIC with a ``device`` link; /sys gives Mbit/s), else 0."""
    if settings.override_broker_nic_speed_gbps is not None:
        return settings.override_broker_nic_speed_gbps * KBIT * KBIT
    total = 0.0
    with contextlib.suppress(OSError):
        for nic in sys_net.iterdir():
            if not (nic / "device").exists():
                continue
            with contextlib.suppress(OSError, ValueError):
                speed = float((nic / "speed").read_text().strip())
                if speed > 0:
                    total += speed * KBIT
    return total


def _memory_mb() -> ResourceUsage:
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        rss_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        rss_pages = 0
    total = os.sysconf("SC_PHYS_PAGES") * page
    return ResourceUsage(rss_pages * page / (1024 * 1024), total / (1024 * 1024))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(slots=True)
class _Counters:
    msg_in: int
    bytes_in: int
    msg_out: int
    bytes_out: int


def _counters(topic: Any) -> _Counters | None:
    """A persistent topic's cumulative counters; None for a topic that keeps only rates."""
    out = getattr(topic, "_out_counts", None)
    if out is None:
        return None
    msg_out, bytes_out = out()
    return _Counters(int(topic.msg_in), int(topic.bytes_in), int(msg_out), int(bytes_out))


def _sessions(topic: Any) -> tuple[int, int]:
    producers = len(getattr(topic, "producers", {}))
    consumers = sum(len(s.dispatcher.consumers) for s in getattr(topic, "subscriptions", {}).values())
    return producers, consumers


class LoadSampler:
    """Samples the broker's usage: ``sample()`` gives a fresh ``BrokerLoad`` with rates over the
    time since the previous sample (or the topics' 1-second rates for a first look).

    ``sample(advance=False)`` (an admin's look) measures the same way but leaves the baseline where
    it was, so asking for the load report does not shorten the interval the next written report
    averages over: polling it would otherwise turn the reports into noise."""

    def __init__(self, source: LoadSource, settings: LoadBalancerSettings, version: str = "") -> None:
        self.source = source
        self.settings = settings
        self.version = version
        self._nic_kbps = nic_speed_kbps(settings)
        self._cores = _cores()
        self._last_wall = time.monotonic()
        self._last_cpu = time.process_time()
        self._last_cpu_percent = 0.0
        self._topic_counters: dict[int, tuple[Any, _Counters]] = {}

    def _bundle(self, name: TopicName) -> str:
        own = self.source.ownership
        if own is not None:
            return own.bundle_path(name).removeprefix(paths.OWNERSHIP + "/")
        return f"{name.tenant}/{name.namespace}/{bundle_of(name, self.source.bundles)}"

    def _topics(self) -> Iterable[tuple[TopicName, Any]]:
        topics = self.source.topics
        for key in list(topics):
            topic = topics.get(key)
            if topic is not None:
                yield topics.name_of(key), topic
        for key, topic in list(self.source.non_persistent.topics.items()):
            yield TopicName.parse(key), topic

    def sample(self, *, advance: bool = True) -> BrokerLoad:
        now = time.monotonic()
        elapsed = now - self._last_wall
        cpu_now = time.process_time()
        cpu_percent = self._last_cpu_percent
        if elapsed >= 0.5:  # a sample right after another keeps the last CPU figure
            cpu_percent = 100.0 * (cpu_now - self._last_cpu) / elapsed
            if advance:
                self._last_cpu_percent = cpu_percent
                self._last_cpu, self._last_wall = cpu_now, now
        stats: dict[str, BundleStats] = {}
        seen: dict[int, tuple[Any, _Counters]] = {}
        for name, topic in self._topics():
            bundle = self._bundle(name)
            entry = stats.setdefault(bundle, BundleStats())
            counters = _counters(topic)
            previous = self._topic_counters.get(id(topic))
            if counters is not None and previous is not None and previous[0] is topic and elapsed >= 0.5:
                old = previous[1]
                rate_in = (counters.msg_in - old.msg_in) / elapsed
                bytes_in = (counters.bytes_in - old.bytes_in) / elapsed
                rate_out = (counters.msg_out - old.msg_out) / elapsed
                bytes_out = (counters.bytes_out - old.bytes_out) / elapsed
            else:
                rate_in, bytes_in = topic.rate_in.msg_rate, topic.rate_in.bytes_rate
                rate_out = getattr(getattr(topic, "rate_out", None), "msg_rate", 0.0)
                bytes_out = getattr(getattr(topic, "rate_out", None), "bytes_rate", 0.0)
            if counters is not None:
                keep = previous if previous is not None and elapsed < 0.5 else (topic, counters)
                seen[id(topic)] = keep
            producers, consumers = _sessions(topic)
            entry.msg_rate_in += max(rate_in, 0.0)
            entry.msg_throughput_in += max(bytes_in, 0.0)
            entry.msg_rate_out += max(rate_out, 0.0)
            entry.msg_throughput_out += max(bytes_out, 0.0)
            entry.producer_count += producers
            entry.consumer_count += consumers
            entry.topics += 1
        if advance:
            self._topic_counters = seen
        return self._report(stats, cpu_percent)

    def _report(self, stats: Mapping[str, BundleStats], cpu_percent: float) -> BrokerLoad:
        own = self.source.ownership
        bundles = {p.removeprefix(paths.OWNERSHIP + "/") for p in own.owned} if own is not None else set(stats)
        bundles |= set(stats)
        thr_in = sum(s.msg_throughput_in for s in stats.values())
        thr_out = sum(s.msg_throughput_out for s in stats.values())
        return BrokerLoad(
            broker_id=self.source.broker_id,
            web_service_url=self.source.web_url or "",
            pulsar_service_url=self.source.broker_url or "",
            cpu=ResourceUsage(cpu_percent, 100.0 * self._cores),
            memory=_memory_mb(),
            direct_memory=ResourceUsage(0.0, 0.0),
            bandwidth_in=ResourceUsage(thr_in * 8 / KBIT, self._nic_kbps),
            bandwidth_out=ResourceUsage(thr_out * 8 / KBIT, self._nic_kbps),
            msg_rate_in=sum(s.msg_rate_in for s in stats.values()),
            msg_rate_out=sum(s.msg_rate_out for s in stats.values()),
            msg_throughput_in=thr_in,
            msg_throughput_out=thr_out,
            num_topics=sum(s.topics for s in stats.values()),
            num_bundles=len(bundles),
            num_consumers=sum(s.consumer_count for s in stats.values()),
            num_producers=sum(s.producer_count for s in stats.values()),
            bundles=bundles,
            last_stats=dict(stats),
            last_update=int(time.time() * 1000),
            broker_version=self.version,
        )


class LoadReports:
    """This broker's report writer and every broker's latest report (``reports``)."""

    def __init__(
        self,
        store: MetadataStore,
        sampler: LoadSampler,
        settings: LoadBalancerSettings,
        *,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.sampler = sampler
        self.settings = settings
        self.reports: dict[str, BrokerLoad] = {}
        self.written: BrokerLoad | None = None
        self.writes = 0
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self._unwatch: Callable[[], None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()

    async def start(self) -> None:
        self._unwatch = self.store.watch(paths.LOADBALANCE_BROKERS, self._changed)
        await self.refresh()
        await self.update(force=True)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._unwatch is not None:
            self._unwatch()
        for task in list(self._pending):
            task.cancel()
        with contextlib.suppress(NotFound, Exception):
            await self.store.delete(paths.load_report(self.sampler.source.broker_id))

    async def _run(self) -> None:
        interval = max(self.settings.host_usage_check_interval_minutes * 60.0, 0.1)
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            try:
                await self.update()
            except Exception as exc:  # the store is away for a moment: the next round writes
                log.warning("load report not written: %s", exc)

    async def update(self, *, force: bool = False) -> BrokerLoad:
        """Sample now; write the report when the update rules (or ``force``) say so."""
        load = self.sampler.sample()
        if force or needs_update(self.written, load, load.last_update, self.settings):
            await self.store.put(paths.load_report(load.broker_id), load.to_json(), ephemeral=True)
            self.written = load
            self.writes += 1
            self.reports[load.broker_id] = load
        return load

    async def refresh(self) -> None:
        """Read every broker's report (at start, and whenever the watch says one changed)."""
        fresh: dict[str, BrokerLoad] = {}
        for name in await self.store.children(paths.LOADBALANCE_BROKERS):
            found = await self.store.get(paths.load_report(name))
            if found is not None:
                with contextlib.suppress(ValueError, TypeError):
                    fresh[name] = BrokerLoad.from_json(found.value, name)
        self.reports = fresh
        if self._on_change is not None:
            self._on_change()

    def _changed(self, note: Notification) -> None:
        name = note.path.removeprefix(paths.LOADBALANCE_BROKERS + "/")
        if "/" in name or name == note.path:
            return
        task = asyncio.get_running_loop().create_task(self._one_changed(note.kind, name))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _one_changed(self, kind: str, name: str) -> None:
        if kind == "delete":
            self.reports.pop(name, None)
        else:
            found = await self.store.get(paths.load_report(name))
            if found is None:
                self.reports.pop(name, None)
            else:
                with contextlib.suppress(ValueError, TypeError):
                    self.reports[name] = BrokerLoad.from_json(found.value, name)
        if self._on_change is not None:
            self._on_change()
