"""The etcd store's watches: one gateway watch stream per ``watch`` call, kept going.

A stream starts at the revision after the last one the store has seen, so a write awaited before
``watch()`` is not reported and every write after it is, even though the stream connects
asynchronously. A stream that fails reconnects (on the next endpoint) from the revision after the
last event delivered, so no event is lost or repeated across reconnects; only etcd's compaction can
make events unrecoverable, and that is logged as an error. Each stream also records the last
revision it delivered, so that closing the store can wait until its own watchers have heard the
deletions its lease revocation caused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from magnetar.metadata.etcd_gateway import EtcdError, EtcdGateway, WatchCompacted, WatchEvent
from magnetar.metadata.etcd_keys import EtcdKeys
from magnetar.metadata.store import Notification, Watcher, is_under

# The etcd store logs under one name, whichever of its modules holds the code, so that a log
# filter set for it keeps catching every line.
log = logging.getLogger("magnetar.metadata.etcd_store")


@dataclass(eq=False)
class EtcdWatch:
    prefix: str
    callback: Watcher
    start_revision: int
    task: asyncio.Task[None] | None = None
    seen_revision: int = 0  # the revision of the last event this stream delivered
    advanced: asyncio.Event = field(default_factory=asyncio.Event)


class EtcdWatches:
    """The watch streams of one store. ``etcd`` is the store's gateway accessor (it refuses once
    the store is closed); ``keys`` maps the store's paths to etcd keys."""

    def __init__(self, etcd: Callable[[], EtcdGateway], keys: EtcdKeys) -> None:
        self._etcd = etcd
        self._keys = keys
        self._watches: dict[int, EtcdWatch] = {}
        self._next_watch = 0

    def add(self, prefix: str, callback: Watcher, start_revision: int) -> Callable[[], None]:
        """Start a stream for ``prefix`` from ``start_revision``; returns the function that stops it."""
        token = self._next_watch
        self._next_watch += 1
        w = EtcdWatch(prefix, callback, start_revision=start_revision)
        w.task = asyncio.get_running_loop().create_task(self._run_watch(w), name=f"etcd-watch-{prefix}")
        self._watches[token] = w

        def unsubscribe() -> None:
            gone = self._watches.pop(token, None)
            if gone is not None and gone.task is not None:
                gone.task.cancel()

        return unsubscribe

    async def hear(self, paths: list[str], revision: int) -> None:
        """Wait until every stream watching one of ``paths`` has delivered ``revision``."""
        waiting = [w for w in self._watches.values() if any(is_under(p, w.prefix) for p in paths)]
        for w in waiting:
            while w.seen_revision < revision:
                w.advanced.clear()
                await w.advanced.wait()

    async def stop(self) -> None:
        """Stop every stream."""
        watches = list(self._watches.values())
        self._watches.clear()
        for w in watches:
            if w.task is not None:
                w.task.cancel()
        await asyncio.gather(*(w.task for w in watches if w.task is not None), return_exceptions=True)

    async def _run_watch(self, w: EtcdWatch) -> None:
        """One watch stream, reconnected (on the next endpoint) from the revision after the last
        event delivered, so that no event is lost or repeated across reconnects."""
        gateway = self._etcd()
        start, _ = self._keys.subtree(w.prefix)
        key = start[:-1] if w.prefix != "/" else start  # the watched key itself and everything after it
        end = start[:-1] + b"0"
        next_revision = w.start_revision
        backoff = 0.05
        while True:
            endpoint = gateway.current_endpoint
            try:
                async with contextlib.aclosing(gateway.watch(endpoint, key, end, next_revision)) as stream:
                    async for events in stream:
                        next_revision = self._dispatch(w, events, next_revision)
                        backoff = 0.05
                log.info("etcd watch stream on %s closed by the server; reconnecting", w.prefix)
            except WatchCompacted as exc:
                log.error("etcd watch on %s lost events before revision %d (compacted)", w.prefix, exc.revision)
                next_revision = exc.revision  # the events before it are gone: resume at the oldest left
            except (aiohttp.ClientError, TimeoutError, EtcdError, ValueError) as exc:
                log.warning("etcd watch on %s via %s failed (%s); reconnecting", w.prefix, endpoint, exc)
                gateway.rotate(endpoint)
            await asyncio.sleep(backoff)  # a reconnect delay, not a wait for an event
            backoff = min(backoff * 2, 1.0)

    def _dispatch(self, w: EtcdWatch, events: list[WatchEvent], next_revision: int) -> int:
        """Tell ``w``'s callback about ``events`` under its prefix; returns the revision to resume
        the stream at."""
        for event in events:
            revision = event.kv.mod_revision
            next_revision = revision + 1
            path = self._keys.path(event.kv.key)
            if path is not None and is_under(path, w.prefix):
                note = Notification(event.kind, path)
                try:
                    w.callback(note)
                except Exception:
                    log.exception("metadata watcher %r failed on %s", w.callback, note)
            if revision > w.seen_revision:
                w.seen_revision = revision
                w.advanced.set()
        return next_revision
