"""Message deduplication, as Pulsar's MessageDeduplication: each message stored at most once per
(producer name, sequence id), across reconnections, broker crashes and failover.

Per topic the broker keeps, per producer name, the highest sequence id *pushed* (accepted for
storage, maybe not durable yet) and the highest *persisted* (durable). A ``send`` whose lowest
sequence id is at or below the persisted highest is a duplicate: it is answered at once with
position -1:-1 (Pulsar's answer) and not stored. One at or below the pushed highest but above the
persisted is a resend of a message still being written (typically by the same producer after a
reconnection): where Pulsar answers a ``PersistenceError`` and lets the client retry, this broker
answers with the outcome of the write of exactly the same sequence ids, its position once it is
durable (or its error, after which the client resends it); without such a write it answers as
Pulsar. Anything else is stored and becomes the new pushed highest.

A write that fails fences the sends of that producer name accepted before the failure (``guard``:
nothing accepted after the failed message may be stored ahead of it), and once none of that name's
writes is in flight any more, its pushed highest goes back to the persisted one, so that the
failed messages are accepted when resent; until then its new sends are refused (retryable).

Sequence ids come from the entry ``meta`` (WIRE.md R40a): ``pn`` the producer name, ``seq`` the
lowest, ``hs`` the highest when it is not ``seq + n - 1``. Of a chunked message only the last
chunk is checked (as Pulsar): the earlier chunks are stored whatever happens.

Persistence (Pulsar keeps the map in a cursor's properties): the persisted map is written, with
the position of the last entry it covers, to the managed ledger property ``dedup-snapshot`` every
``broker_deduplication_entries_interval`` stored entries, every snapshot interval of seconds when
something was stored, and when the topic is closed. Loading the topic reads the snapshot and
replays the metadata of every entry after its position (never the payloads), so the map is exact
after a kill -9 or on another broker. The managed ledger keeps the ledgers after the snapshot
position (``ManagedLedger.retain_from``), and the snapshot is written with compare-and-set on its
version, so a deposed owner cannot overwrite its successor's snapshot.

Enabled by the effective ``deduplicationEnabled`` policy (topic over namespace), else by the
broker's ``broker_deduplication_enabled``; switching it on or off applies to a loaded topic at
once. Switching it off forgets the state and deletes the snapshot; switching it on starts empty at
the end of the log (Pulsar does the same). Producer names not connected for
``broker_deduplication_producer_inactivity_timeout_minutes`` are forgotten, and a snapshot keeps
at most ``broker_deduplication_max_number_of_producers`` names, the most recently active first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.model import EffectivePolicies
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.metadata.store import MUST_NOT_EXIST
from magnetar.protocol.entry import EntryMeta, decode_entry
from magnetar.protocol.errors import BadVersion, NotFound, PersistenceError, ServiceNotReady

log = logging.getLogger(__name__)

# Pulsar's MessageDeduplication.Status names, reported as ``deduplicationStatus`` in topic stats.
DISABLED = "Disabled"
RECOVERING = "Recovering"
ENABLED = "Enabled"
FAILED = "Failed"

SNAPSHOT_PROPERTY = "dedup-snapshot"
# The receipt position of a duplicate (Pulsar answers ledger -1, entry -1).
DUPLICATE = Position(-1, -1)
# Entries read per request while replaying the log after the snapshot.
_REPLAY_CHUNK = 200


def sequence_range(meta: EntryMeta) -> tuple[str, int, int] | None:
    """(producer name, lowest, highest sequence id) of an entry, or None when deduplication does
    not apply to it: no producer name or sequence id, or a chunk other than its message's last."""
    name = meta.get("pn")
    seq = meta.get("seq")
    if not name or not isinstance(seq, int):
        return None
    chunks = meta.get("cn")
    if chunks is not None and meta.get("cid", 0) != chunks - 1:
        return None
    high = meta.get("hs")
    if not isinstance(high, int):
        high = seq + int(meta.get("n", 1)) - 1
    return name, seq, max(seq, high)


@dataclass(eq=False, slots=True)
class Ticket:
    """A send accepted for storage under deduplication; ``epoch`` is its name's failure count then."""

    name: str
    low: int
    high: int
    epoch: int
    future: asyncio.Future[Position] | None = None


class Deduplication:
    """The deduplication state of one persistent topic (module docstring)."""

    def __init__(self, topic: str, ml: ManagedLedger, config: BrokerConfig, policies: EffectivePolicies) -> None:
        self.topic = topic
        self.ml = ml
        self.config = config
        self.status = DISABLED
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self.duplicates = 0  # sends answered without being stored (informational)
        self._inflight: dict[str, deque[Ticket]] = {}
        self._epochs: dict[str, int] = {}
        # Names whose pushed highest goes back to the persisted one once their writes in flight
        # have all ended (after a failed write); until then their new sends are refused.
        self._resetting: set[str] = set()
        self._connected: dict[str, int] = {}
        self._last_active: dict[str, float] = {}
        self._want = False
        self._interval_s = config.broker_deduplication_snapshot_interval_seconds
        self._transition: asyncio.Task[None] | None = None
        # Snapshots: the position of the last one stored (it holds back trimming), its version in
        # the store, and the one waiting to be written (latest wins).
        self._snapshot_at: Position | None = None
        self._version = MUST_NOT_EXIST
        self._wanted: tuple[Position, dict[str, int]] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._since_snapshot = 0
        self._snapshot_time = time.monotonic()
        self._last_pos: Position | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deposed = False
        self._closed = False
        ml.retain_from = self.retain_from
        self.apply(policies)

    # ------------------------------------------------------------------ enabling and disabling
    def apply(self, policies: EffectivePolicies) -> None:
        """A policy listener: enable or disable to match the effective policy, without reload."""
        value = policies.get("deduplicationEnabled")
        self._want = self.config.broker_deduplication_enabled if value is None else bool(value)
        interval = policies.get("deduplicationSnapshotIntervalSeconds")
        self._interval_s = self.config.broker_deduplication_snapshot_interval_seconds if interval is None else interval
        self._reconcile_soon()

    def configure(self, config: BrokerConfig, policies: EffectivePolicies) -> None:
        """Take the broker's settings (a topic may have been built without them) and re-apply."""
        if config is not self.config:
            self.config = config
            self.apply(policies)

    @property
    def enabled(self) -> bool:
        return self.status == ENABLED

    def _reconcile_soon(self) -> None:
        settled = self.status == (ENABLED if self._want else DISABLED)
        if self._closed or settled:
            return
        if self._transition is None or self._transition.done():
            self._transition = asyncio.get_running_loop().create_task(self._reconcile())

    async def _reconcile(self) -> None:
        """Move to the wanted state, one transition at a time (the policy may flip meanwhile)."""
        while not self._closed:
            if self._want and self.status != ENABLED:
                await self._enable()
                if self.status == FAILED:
                    return
            elif not self._want and self.status != DISABLED:
                await self._disable()
            else:
                return

    async def ready(self) -> None:
        """Wait for a transition under way (a producer needs the recovered map before it is told
        its last sequence id); raise a retryable error when deduplication failed to start."""
        self._reconcile_soon()
        if self._transition is not None and not self._transition.done():
            await asyncio.shield(self._transition)
        if self._want and self.status == FAILED:
            raise ServiceNotReady(f"deduplication of {self.topic} could not start; try again")

    async def _enable(self) -> None:
        self.status = RECOVERING
        store = self.ml.store
        path = self.ml.property_path(SNAPSHOT_PROPERTY)
        try:
            found = await store.get(path)
            persisted: dict[str, int] = {}
            if found is not None:
                doc = json.loads(found.value)
                start = Position(*doc["position"])
                persisted = {str(k): int(v) for k, v in doc["producers"].items()}
                self._version = found.version
                self._snapshot_at = start
            else:
                start = self.ml.last_confirmed
                self._version = MUST_NOT_EXIST
                self._snapshot_at = None
            replayed, last = await self._replay(start, persisted)
        except Exception as exc:
            self.status = FAILED
            log.warning("deduplication of %s failed to start: %r", self.topic, exc)
            return
        now = time.monotonic()
        self.persisted = persisted
        self.pushed = dict(persisted)
        self._last_active = dict.fromkeys(persisted, now)
        self._deposed = False
        self._last_pos = last
        self._since_snapshot = 0
        if found is None:
            # The first snapshot is stored before anything is accepted: until it exists a crash
            # would leave the next owner nothing to replay from (Pulsar likewise creates its
            # dedup cursor before deduplication is enabled).
            self._wanted = (last, self._capped())
            await self._write_snapshots()
            if self._version != MUST_NOT_EXIST:
                self._snapshot_at = last
        self.status = ENABLED
        log.info(
            "deduplication of %s enabled: %d producers from %s, %d entries replayed",
            self.topic,
            len(persisted),
            f"the snapshot at {start}" if found is not None else "nothing (no snapshot yet)",
            replayed,
        )
        # A first snapshot right away (there is none yet, or the replay was long): it is what
        # holds back trimming and what the next load starts from.
        if replayed or self._snapshot_at is None:
            self._request_snapshot(last)
        self._arm_timer()

    async def _replay(self, after: Position, persisted: dict[str, int]) -> tuple[int, Position]:
        """Fold the sequence ids of every entry after ``after`` into ``persisted`` (meta only)."""
        ml = self.ml
        pos = Position(after.ledger_id, after.entry_id + 1)
        last = after
        count = 0
        while True:
            got = await ml.read_entries(pos, _REPLAY_CHUNK)
            if not got:
                return count, last
            for at, data in got:
                meta, _ = decode_entry(data)
                seen = sequence_range(meta)
                if seen is not None:
                    name, _, high = seen
                    if high > persisted.get(name, -1):
                        persisted[name] = high
                count += 1
                last = at
            pos = Position(last.ledger_id, last.entry_id + 1)

    async def _disable(self) -> None:
        self.status = DISABLED
        self._forget_all()
        self._snapshot_at = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        writer = self._writer
        if writer is not None and not writer.done():
            await asyncio.gather(writer, return_exceptions=True)
        try:
            await self.ml.store.delete(self.ml.property_path(SNAPSHOT_PROPERTY))
        except NotFound:
            pass
        except Exception as exc:  # a stale snapshot is harmless: enabling again reads it
            log.warning("could not delete the deduplication snapshot of %s: %r", self.topic, exc)
        self._version = MUST_NOT_EXIST
        log.info("deduplication of %s disabled", self.topic)

    def _forget_all(self) -> None:
        self.pushed.clear()
        self.persisted.clear()
        self._inflight.clear()
        self._resetting.clear()
        self._last_active.clear()
        self._wanted = None

    # ------------------------------------------------------------------ the publish path
    def admit(self, meta: EntryMeta) -> Ticket | asyncio.Future[Position] | None:
        """Decide on one ``send``: None (store it, deduplication is off or does not apply), a
        ``Ticket`` (store it; report the outcome with ``stored``/``failed``), or the future that
        answers it without storing it (a duplicate)."""
        if self.status != ENABLED:
            return None
        seen = sequence_range(meta)
        if seen is None:
            return None
        name, low, high = seen
        pushed = self.pushed.get(name)
        if name in self._resetting or (pushed is not None and low <= pushed):
            self.duplicates += 1
            loop = asyncio.get_running_loop()
            if low <= self.persisted.get(name, -1):
                done: asyncio.Future[Position] = loop.create_future()
                done.set_result(DUPLICATE)
                return done
            original = self._original(name, low, high)
            if original is not None:
                return original
            unknown: asyncio.Future[Position] = loop.create_future()
            unknown.set_exception(
                PersistenceError(
                    f"[{self.topic}][{name}] Cannot determine whether the message is a duplicate at this time"
                )
            )
            return unknown
        self.pushed[name] = high
        ticket = Ticket(name, low, high, self._epochs.get(name, 0))
        self._inflight.setdefault(name, deque()).append(ticket)
        return ticket

    def _original(self, name: str, low: int, high: int) -> asyncio.Future[Position] | None:
        """The pending write of exactly these sequence ids of ``name`` (the latest, if several):
        its outcome is this resend's. A write of other ids, even overlapping ones, is not."""
        for ticket in reversed(self._inflight.get(name, ())):
            if ticket.low == low and ticket.high == high and ticket.future is not None:
                return ticket.future
        return None

    def guard(self, ticket: Ticket) -> BaseException | None:
        """At the moment of issue: refuse a send accepted before a failed write of its name."""
        if self._epochs.get(ticket.name, 0) != ticket.epoch:
            return PersistenceError(f"an earlier message of producer {ticket.name} was not stored; resend")
        return None

    def stored(self, ticket: Ticket, pos: Position) -> None:
        self._settle(ticket)
        if self.status != ENABLED:
            return
        name = ticket.name
        if ticket.high > self.persisted.get(name, -1):
            self.persisted[name] = ticket.high
        if self.pushed.get(name, -1) < self.persisted[name]:
            self.pushed[name] = self.persisted[name]
        self._last_active[name] = time.monotonic()
        self._last_pos = pos
        self._since_snapshot += 1
        if self._since_snapshot >= max(1, self.config.broker_deduplication_entries_interval):
            self._request_snapshot(pos)

    def failed(self, ticket: Ticket) -> None:
        """A write failed: what was accepted of this name after the persisted highest must be
        sent again, so the pushed highest goes back to the persisted one (Pulsar's
        resetHighestSequenceIdPushed) and the sends accepted before now are fenced."""
        name = ticket.name
        if ticket.epoch == self._epochs.get(name, 0):  # else fenced by an earlier failure
            self._epochs[name] = ticket.epoch + 1
            self._resetting.add(name)
        self._settle(ticket)

    def _settle(self, ticket: Ticket) -> None:
        pending = self._inflight.get(ticket.name)
        if not pending:
            self._reset_if_drained(ticket.name)
            return
        if pending[0] is ticket:
            pending.popleft()
        else:
            with contextlib.suppress(ValueError):
                pending.remove(ticket)
        if not pending:
            del self._inflight[ticket.name]
            self._reset_if_drained(ticket.name)

    def _reset_if_drained(self, name: str) -> None:
        """After a failure, once no write of ``name`` is in flight any more (none can still be
        stored), the pushed highest goes back to the persisted one: the failed messages are
        accepted again when resent (Pulsar resets when its fenced topic has drained)."""
        if name not in self._resetting or self._inflight.get(name):
            return
        self._resetting.discard(name)
        persisted = self.persisted.get(name)
        if persisted is None:
            self.pushed.pop(name, None)
        else:
            self.pushed[name] = persisted

    # ------------------------------------------------------------------ producers
    def last_sequence_id(self, name: str) -> int:
        """What ``producer_success`` tells a producer of this name: the highest sequence id pushed
        (as Pulsar's getLastPublishedSequenceId), -1 when unknown or deduplication is off."""
        return self.pushed.get(name, -1) if self.status == ENABLED else -1

    def producer_added(self, name: str) -> None:
        self._connected[name] = self._connected.get(name, 0) + 1

    def producer_removed(self, name: str) -> None:
        left = self._connected.get(name, 0) - 1
        if left > 0:
            self._connected[name] = left
        else:
            self._connected.pop(name, None)
        if name in self.pushed:
            self._last_active[name] = time.monotonic()

    def _purge_inactive(self, now: float) -> bool:
        limit = self.config.broker_deduplication_producer_inactivity_timeout_minutes * 60
        gone = [
            n
            for n, t in self._last_active.items()
            if n not in self._connected and n not in self._inflight and now - t > limit
        ]
        for name in gone:
            self.pushed.pop(name, None)
            self.persisted.pop(name, None)
            self._last_active.pop(name, None)
            self._epochs.pop(name, None)
        if gone:
            log.info("deduplication of %s forgot %d inactive producers", self.topic, len(gone))
        return bool(gone)

    # ------------------------------------------------------------------ snapshots
    def retain_from(self) -> Position | None:
        """For the managed ledger's trimming: keep what the next load must replay."""
        return self._snapshot_at if self.status in (ENABLED, RECOVERING) else None

    def _capped(self) -> dict[str, int]:
        limit = self.config.broker_deduplication_max_number_of_producers
        if len(self.persisted) <= limit:
            return dict(self.persisted)
        newest = sorted(
            self.persisted,
            key=lambda n: (n in self._connected, self._last_active.get(n, 0.0)),
            reverse=True,
        )[:limit]
        return {n: self.persisted[n] for n in newest}

    def _request_snapshot(self, pos: Position) -> None:
        self._since_snapshot = 0
        self._snapshot_time = time.monotonic()
        if self._deposed:
            return
        self._wanted = (pos, self._capped())
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_snapshots())

    async def _write_snapshots(self) -> None:
        while self._wanted is not None and not self._deposed:
            pos, producers = self._wanted
            self._wanted = None
            doc = json.dumps({"position": [pos.ledger_id, pos.entry_id], "producers": producers}).encode()
            try:
                stat = await self.ml.store.put(self.ml.property_path(SNAPSHOT_PROPERTY), doc, self._version)
            except BadVersion:
                # Another broker owns the topic now (or it was deleted): its snapshot is the one.
                self._deposed = True
                log.warning("deduplication snapshot of %s changed under us: no more snapshots here", self.topic)
                return
            except Exception as exc:  # the store is away: the next snapshot tries again
                log.warning("could not store the deduplication snapshot of %s: %r", self.topic, exc)
                return
            self._version = stat.version
            if self.status == ENABLED:
                self._snapshot_at = pos
                self.ml.schedule_trim()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        period = self._interval_s if self._interval_s and self._interval_s > 0 else 60
        self._timer = asyncio.get_running_loop().call_later(min(period, 60), self._on_timer)

    def _on_timer(self) -> None:
        """Periodic work: a snapshot when entries were stored since the last one and the interval
        passed (Pulsar's deduplicationSnapshotIntervalSeconds), and forgetting idle producers."""
        self._timer = None
        if self._closed or self.ml.closed or self.status != ENABLED:
            return
        now = time.monotonic()
        purged = self._purge_inactive(now)
        due = self._interval_s > 0 and now - self._snapshot_time >= self._interval_s and self._since_snapshot > 0
        if (due or purged) and self._last_pos is not None:
            self._request_snapshot(self._last_pos)
        self._arm_timer()

    async def close(self) -> None:
        """The topic is closing (after its managed ledger): store a last snapshot."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transition is not None and not self._transition.done():
            self._transition.cancel()
            await asyncio.gather(self._transition, return_exceptions=True)
        if self.status == ENABLED and self._since_snapshot and self._last_pos is not None:
            self._request_snapshot(self._last_pos)
        if self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {"deduplicationStatus": self.status}
