"""One topic's compaction: its state, the runs that produce it, and where it is recorded.

Pulsar's model. The compacted view (``view.CompactedView``) is recorded in the metadata store at
``paths.managed_ledger_compaction(topic)``, next to the managed ledger, so it survives restarts and
moves with the topic to whichever broker owns it next::

    {"ledger": id, "horizon": [ledger, entry], "entries": n, "size": bytes,
     "pending": id?, "stale": [id, ...]?}

``pending`` is a compacted ledger being written (deleted at load if a run died half way),
``stale`` ledgers of replaced views not yet deleted (deleted at load). A durable cursor named
``__compaction`` follows the horizon: like any subscription it holds back trimming of what it has
not passed, so data not yet compacted cannot be trimmed away before a compaction reads it, and once
compacted, ledgers before the horizon may go when retention and the other cursors allow. It is
listed with the topic's subscriptions, as in Pulsar.

A run (``trigger``) is a task of this broker; only one runs at a time (a second trigger is a
``AlreadyExists``, HTTP 409). The status is Pulsar's LongRunningProcessStatus, in memory (NOT_RUN on a
broker that has not compacted the topic since it loaded it, as Pulsar); the ``compaction``
section of the topic stats carries Pulsar's last-compaction figures.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Protocol

from magnetar.broker.compaction.compactor import CompactionResult, compact
from magnetar.broker.compaction.view import CompactedView
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.write_handle import WriteHandle
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AlreadyExists, NoSuchLedger, NotFound
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

COMPACTION_SUBSCRIPTION = "__compaction"
NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"


class CompactedTopic(Protocol):
    """What compaction needs of a topic (``topic.CompactedTopic``; a protocol, so that this
    package does not import the topic module that holds it)."""

    name: str
    ml: ManagedLedger
    subscriptions: dict[str, Subscription]
    compaction: TopicCompaction | None


async def _delete_ledger(ledgers: LedgerManager, ledger_id: int) -> None:
    try:
        await ledgers.delete(ledger_id)
    except NoSuchLedger:
        pass


async def delete_compaction_state(store: MetadataStore, ledgers: LedgerManager, topic: TopicName | str) -> None:
    """Delete a topic's compacted ledgers and record (the topic is being deleted)."""
    path = paths.managed_ledger_compaction(topic)
    found = await store.get(path)
    if found is None:
        return
    doc = json.loads(found.value)
    for lid in [doc.get("ledger"), doc.get("pending"), *doc.get("stale", [])]:
        if lid is not None:
            await _delete_ledger(ledgers, int(lid))
    try:
        await store.delete(path)
    except NotFound:
        pass


class TopicCompaction:
    def __init__(self, topic: CompactedTopic, store: MetadataStore, ledgers: LedgerManager) -> None:
        self.topic = topic
        self._store = store
        self._ledgers = ledgers
        self.path = paths.managed_ledger_compaction(topic.name)
        self.view: CompactedView | None = None
        self.retain_null_key = False
        self.status = NOT_RUN
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Pulsar's CompactionStats figures (topic stats ``compaction``).
        self.last_removed = 0
        self.last_succeed_ms = 0
        self.last_failed_ms = 0
        self.last_duration_ms = 0

    # ------------------------------------------------------------------ loading
    @classmethod
    async def load(
        cls, topic: CompactedTopic, store: MetadataStore, ledgers: LedgerManager, *, retain_null_key: bool = False
    ) -> TopicCompaction:
        """The topic's compaction as recorded (a view without its index: it is read on first use)."""
        comp = cls(topic, store, ledgers)
        comp.retain_null_key = retain_null_key
        found = await store.get(comp.path)
        if found is None:
            return comp
        doc = json.loads(found.value)
        leftovers = [int(x) for x in [doc.get("pending"), *doc.get("stale", [])] if x is not None]
        for lid in leftovers:
            await _delete_ledger(ledgers, lid)
        if doc.get("ledger") is not None:
            comp.view = CompactedView(
                ledgers,
                int(doc["ledger"]),
                Position(*doc["horizon"]),
                int(doc.get("entries", 0)),
                int(doc.get("size", 0)),
            )
        if leftovers:
            await comp._write_record()
        return comp

    def _record(self, **extra: Any) -> bytes:
        doc: dict[str, Any] = {}
        view = self.view
        if view is not None:
            doc = {
                "ledger": view.ledger_id,
                "horizon": list(view.horizon),
                "entries": view.entries,
                "size": view.size,
            }
        doc.update({k: v for k, v in extra.items() if v is not None})
        return json.dumps(doc).encode()

    async def _write_record(self, **extra: Any) -> None:
        await self._store.put(self.path, self._record(**extra))

    # ------------------------------------------------------------------ runs
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trigger(self) -> None:
        """Start a compaction now (``AlreadyExists`` if one is running: Pulsar's 409)."""
        if self.running:
            raise AlreadyExists("Compaction already in progress")
        if self._closed:
            raise AlreadyExists(f"topic {self.topic.name} is being unloaded")
        self.status, self.last_error = RUNNING, ""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def wait(self) -> None:
        """Until the current run (if any) ends."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _compaction_cursor(self) -> None:
        """Open ``__compaction`` (at the start of the topic the first time) and list it as a subscription."""
        topic = self.topic
        cursor = await topic.ml.open_cursor(COMPACTION_SUBSCRIPTION, start_at_earliest=True)
        if COMPACTION_SUBSCRIPTION not in topic.subscriptions:
            topic.subscriptions[COMPACTION_SUBSCRIPTION] = Subscription(topic.name, topic.ml, cursor, c.SUB_EXCLUSIVE)

    async def _run(self) -> None:
        started = time.monotonic()
        created: list[int] = []

        async def create_ledger() -> WriteHandle:
            cfg = self.topic.ml.config
            handle = await self._ledgers.create(
                cfg.ensemble_size, cfg.write_quorum, cfg.ack_quorum, custom={"compacted-topic": self.topic.name}
            )
            created.append(handle.ledger_id)
            await self._write_record(pending=handle.ledger_id)
            return handle

        try:
            await self._compaction_cursor()
            result = await compact(
                self.topic.ml, self._ledgers, self.view, create_ledger, retain_null_key=self.retain_null_key
            )
            if result is not None:
                await self._install(result)
            self.status = SUCCESS
            self.last_removed = result.removed if result is not None else 0
            self.last_succeed_ms = int(time.time() * 1000)
            log.info(
                "compacted %s up to %s: %s of %s messages kept",
                self.topic.name,
                result.view.horizon if result else "(nothing new)",
                result.messages_kept if result else 0,
                result.messages_read if result else 0,
            )
        except asyncio.CancelledError:
            self.status, self.last_error = ERROR, "cancelled: the topic was unloaded"
            self.last_failed_ms = int(time.time() * 1000)
            await self._discard(created)
            raise
        except Exception as exc:
            log.warning("compaction of %s failed: %s", self.topic.name, exc)
            self.status, self.last_error = ERROR, str(exc) or type(exc).__name__
            self.last_failed_ms = int(time.time() * 1000)
            await self._discard(created)
        finally:
            self.last_duration_ms = int((time.monotonic() - started) * 1000)

    async def _discard(self, created: list[int]) -> None:
        """A failed run: its ledger goes, the record goes back to the current view."""
        view = self.view
        for lid in created:
            if view is not None and view.ledger_id == lid:
                continue
            try:
                await _delete_ledger(self._ledgers, lid)
                await self._write_record()
            except Exception as exc:
                log.warning("could not clean up compacted ledger %s of %s: %s", lid, self.topic.name, exc)

    async def _install(self, result: CompactionResult) -> None:
        """Switch to the new view: record it, move ``__compaction`` to its horizon, retire the old one."""
        old = self.view
        new = result.view
        self.view = new
        await self._write_record(stale=[old.ledger_id] if old is not None else None)
        cursor = self.topic.ml.cursors.get(COMPACTION_SUBSCRIPTION)
        if cursor is not None and new.horizon > cursor.mark_delete:
            await cursor.ack_cumulative(new.horizon)
        if old is not None:
            await old.retire()
            await self._write_record()

    # ------------------------------------------------------------------ figures
    def uncompacted_bytes(self) -> int:
        """Estimated bytes stored after the horizon (all of them before the first compaction):
        what the compaction threshold is compared with."""
        ml = self.topic.ml
        total = ml.total_entries
        if total == 0:
            return 0
        after = ml.entries_after(self.view.horizon) if self.view is not None else total
        return ml.total_size * after // total

    def status_doc(self) -> dict[str, Any]:
        """Pulsar's LongRunningProcessStatus."""
        return {"status": self.status, "lastError": self.last_error}

    def stats(self) -> dict[str, Any]:
        """The ``compaction`` section of Pulsar's topic stats (CompactionStatsImpl)."""
        return {
            "lastCompactionRemovedEventCount": self.last_removed,
            "lastCompactionSucceedTimestamp": self.last_succeed_ms,
            "lastCompactionFailedTimestamp": self.last_failed_ms,
            "lastCompactionDurationTimeInMills": self.last_duration_ms,
        }

    def compacted_ledger_stats(self) -> dict[str, Any]:
        """``compactedLedger`` of Pulsar's internal stats (-1s when the topic was never compacted)."""
        view = self.view
        if view is None:
            return self.never_compacted()
        return {
            "ledgerId": view.ledger_id,
            "entries": view.entries,
            "size": view.size,
            "offloaded": False,
            "underReplicated": False,
        }

    @staticmethod
    def never_compacted() -> dict[str, Any]:
        return {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False}

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        """The topic is unloading: stop a run (the next owner may run it again)."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def compaction_stats(comp: TopicCompaction | None) -> dict[str, Any]:
    """The topic stats' ``compaction`` section (zeros for a topic without compaction state)."""
    if comp is not None:
        return comp.stats()
    return {
        "lastCompactionRemovedEventCount": 0,
        "lastCompactionSucceedTimestamp": 0,
        "lastCompactionFailedTimestamp": 0,
        "lastCompactionDurationTimeInMills": 0,
    }
