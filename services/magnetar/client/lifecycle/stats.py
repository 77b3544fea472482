"""``stats_interval_in_seconds``: the client logs each producer's and consumer's statistics periodically.

pulsar-client's C++ core logs, every ``stats_interval_in_seconds`` (600 by default, 0 disables), one
INFO line per producer and consumer with its counters since the last report. Magnetar does the same
on the client's loop, through the ``magnetar.client.lifecycle.stats`` logger (so the ``logger`` option
applies): per producer its topic, name, partitions, messages acknowledged by the broker since the
last report (from the sequence ids) and messages pending; per consumer its topic, subscription,
name, partitions, messages waiting in its receive queue and whether it is connected.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from magnetar.client.tasks import cancel_and_wait

log = logging.getLogger("magnetar.client.lifecycle.stats")

__all__ = ["StatsReporter"]


class StatsReporter:
    """Logs the statistics of ``producers()`` and ``consumers()`` every ``interval`` seconds."""

    def __init__(
        self,
        interval: float,
        producers: Callable[[], Sequence[Any]],
        consumers: Callable[[], Sequence[Any]],
    ) -> None:
        self.interval = float(interval)
        self._producers = producers
        self._consumers = consumers
        self._last_seq: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.reports = 0  # how many reports were logged (tests wait on it)

    def start(self) -> None:
        """Start reporting on the running loop (no-op when disabled or already started)."""
        if self.interval <= 0 or self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="magnetar-client-stats")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.report()
            except Exception:  # a report must never stop the reporting
                log.exception("could not log client statistics")

    def report(self) -> None:
        """Log one line per producer and consumer now."""
        for producer in list(self._producers()):
            parts = list(producer.partitions)
            acked = sum(max(p.last_sequence_id, -1) + 1 for p in parts)
            before = self._last_seq.get(id(producer), 0)
            self._last_seq[id(producer)] = acked
            pending = sum(int(getattr(p, "pending", 0)) for p in parts)
            log.info(
                "Producer stats: topic=%s producer_name=%s partitions=%d num_msgs_acked_since_last=%d pending=%d",
                producer.topic(),
                producer.producer_name(),
                len(parts),
                max(acked - before, 0),
                pending,
            )
        for consumer in list(self._consumers()):
            queue = getattr(consumer, "_queue", ())
            log.info(
                "Consumer stats: topic=%s subscription=%s consumer_name=%s partitions=%d queued=%d connected=%s",
                consumer.topic(),
                consumer.subscription_name(),
                consumer.consumer_name(),
                len(consumer.partitions),
                len(queue),
                consumer.is_connected(),
            )
        self.reports += 1
