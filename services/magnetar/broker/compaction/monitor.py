"""Automatic compaction: Pulsar's compaction monitor and ``compactionThreshold`` policy.

Every ``compaction_monitor_interval`` seconds (Pulsar's
``brokerServiceCompactionMonitorIntervalInSeconds``, 60) the broker looks at each topic it serves:
when the effective ``compaction_threshold`` (topic policy over namespace policy over the broker's
``compaction_threshold``; bytes, 0 = never) is below the bytes stored after the compaction horizon,
a compaction starts unless one is running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from magnetar.broker.compaction.controller import TopicCompaction


class MonitoredTopic(Protocol):
    @property
    def compaction(self) -> TopicCompaction | None: ...

    @property
    def policies(self) -> Any: ...  # policies.EffectivePolicies


class MonitoredService(Protocol):
    """What the monitor needs of ``service.BrokerService`` (a protocol: no import cycle)."""

    @property
    def config(self) -> Any: ...  # config.BrokerConfig

    @property
    def topics(self) -> Mapping[str, MonitoredTopic]: ...


log = logging.getLogger(__name__)

POLICY_FIELD = "compaction_threshold"


def threshold_of(topic: MonitoredTopic, default: int) -> int:
    value = topic.policies.get(POLICY_FIELD)
    return int(value) if value is not None else default


def check_topics(service: MonitoredService) -> list[str]:
    """One round: trigger the compactions due; returns the topics started."""
    started: list[str] = []
    default = service.config.compaction_threshold
    for name, topic in list(service.topics.items()):
        comp = topic.compaction
        if comp is None or comp.running:
            continue
        threshold = threshold_of(topic, default)
        if threshold > 0 and comp.uncompacted_bytes() > threshold:
            try:
                comp.trigger()
            except Exception as exc:
                log.info("automatic compaction of %s not started: %s", name, exc)
                continue
            started.append(name)
    return started


async def run_monitor(service: MonitoredService) -> None:
    """The periodic task (the service starts and cancels it)."""
    while True:
        await asyncio.sleep(service.config.compaction_monitor_interval)
        try:
            for name in check_topics(service):
                log.info("compaction threshold exceeded: compacting %s", name)
        except Exception:
            log.exception("compaction monitor round failed")
