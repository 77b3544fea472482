"""Picking up partitions added to a topic, without restarting producers or consumers.

``magnetar-admin topics update-partitioned-topic`` (or the admin REST call) can raise a topic's
partition count while producers and consumers are attached to it. Pulsar's clients re-read the
count every ``partitionsUpdateInterval`` (a C++ client setting, 60 s by default; Java's
``autoUpdatePartitionsInterval``) and attach to the new partitions: a partitioned producer then
routes to them too, a consumer subscribes to them. ``PartitionsUpdater`` is that periodic task, one
per partitioned producer and per consumer; what an update does is the client's business
(``aio.Client._grow_producer`` / ``_grow_consumer``), so this module knows nothing of either.

A failed round (no broker reachable, a new partition without an owner yet) is logged and tried
again next period. The task ends by itself once its producer or consumer is closed, and the client
stops every one still running when it closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from magnetar.client.tasks import cancel_and_wait
from magnetar.protocol.errors import MagnetarError

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS_UPDATE_INTERVAL = 60.0  # seconds, as the C++ client's partitionsUpdateInterval


class PartitionsUpdater:
    """Calls ``update()`` every ``interval`` seconds until ``is_closed()`` or ``stop()``."""

    def __init__(
        self,
        what: str,
        interval: float,
        update: Callable[[], Awaitable[None]],
        is_closed: Callable[[], bool],
    ) -> None:
        if interval <= 0:
            raise ValueError("partitions_update_interval must be positive (0 disables the updates)")
        self.what = what
        self.interval = float(interval)
        self._update = update
        self._is_closed = is_closed
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # completed rounds (for tests and logs)

    def start(self, on_done: Callable[[PartitionsUpdater], None] | None = None) -> None:
        task = asyncio.get_running_loop().create_task(self._run(), name=f"magnetar-partitions-update {self.what}")
        self._task = task
        if on_done is not None:
            task.add_done_callback(lambda _: on_done(self))

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self._is_closed():
                return
            try:
                await self._update()
            except MagnetarError as exc:
                log.warning("%s: partition update failed (%s); retrying in %ss", self.what, exc, self.interval)
            self.rounds += 1

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            await cancel_and_wait(task)
