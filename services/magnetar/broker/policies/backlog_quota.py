"""Backlog quotas (Pulsar's ``backlog_quota_map``), retention values, and the rule between them.

Policy values (pure functions in ``quotas``, which ``model`` validates documents with):

* retention (``RetentionPolicies``): ``retentionTimeInMinutes`` and ``retentionSizeInMB``, each -1
  (no limit), 0 or positive; as in Pulsar, one limit 0 with the other non-zero is refused (0/0
  disables retention, -1 ignores a limit).
* backlog quotas are stored as Pulsar stores them, one per type: ``{"destination_storage":
  {limit, limitSize, limitTime, policy}, "message_age": {...}}``. The REST call names the type in
  ``?backlogQuotaType=`` (``destination_storage`` when absent). A size quota limits the backlog
  size in bytes (``limitSize``), an age quota the age in seconds of the oldest unacknowledged
  message (``limitTime``). Documents stored before the types were split hold one
  ``destination_storage`` entry with both limits: its ``limitTime`` still counts as the age quota
  when no ``message_age`` entry exists.
* a quota may not reach the retention limits (Pulsar's ``checkQuotas``: a size quota of at least
  the retention size, or an age quota of at least the retention time, is refused with 412).

Enforcement (``BacklogQuotaGuard``, one per loaded persistent topic), checked every
``backlogQuotaCheckIntervalInSeconds`` (``run_backlog_quota_checks``) and at producer creation:

* the topic's backlog is that of its slowest durable subscription: its size is Pulsar's estimate
  (``ManagedLedgerImpl.getEstimatedBacklogSize``: every ledger from the slowest mark-delete
  position's one on, less the part of that ledger already consumed, by average entry size), its
  age that of the first unacknowledged entry, by publish time — Pulsar's
  ``preciseTimeBasedBacklogQuotaCheck=true`` (one entry read per check), since the ledger-age
  approximation cannot honour a limit shorter than a ledger's life.
* ``producer_request_hold``: producer creation fails with ``ProducerBlockedQuotaExceededError``
  (retryable: a re-attaching producer keeps trying); sends of producers already attached are held
  by the broker, unacknowledged and in order, and stored once the backlog is back under the quota
  — the client sees them wait, and fail with ``Timeout`` at its ``send_timeout_millis``. Pulsar
  disconnects the producers instead and their client holds the messages; holding them here keeps
  the producer attached, so no receipt can be lost to a re-attach (which would resend, and without
  deduplication store twice).
* ``producer_exception``: producer creation and every send fail at once with
  ``ProducerBlockedQuotaExceededException`` (Pulsar disconnects the producers, whose re-attach then
  fails the pending sends with it: the user sees the same).
* ``consumer_backlog_eviction``: the slowest subscription is moved on until the backlog is under
  90 % of the quota (Pulsar's reduction factor), entries skipped by size, or acknowledged by
  publish time for an age quota.

Error texts say which quota, its limit and the current backlog, e.g. ``backlog quota exceeded on
persistent://t/ns/x: destination_storage (size) backlog is 1203456 bytes, limitSize is 1048576
bytes (policy producer_exception)``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.broker.policies.model import EffectivePolicies
from magnetar.broker.policies.quotas import (
    AGE,
    EVICTION,
    EXCEPTION,
    HOLD,
    SIZE,
    Quota,
    quotas_of,
)
from magnetar.broker.policies.targets import ExpireMessages, PolicySubscription, PolicyTopic
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol.entry import decode_entry
from magnetar.protocol.errors import (
    MagnetarError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
)

log = logging.getLogger(__name__)

# Eviction brings the backlog down to this share of the quota (Pulsar's reduction factor).
EVICTION_TARGET = 0.9

# Positions acknowledged per call while evicting a long backlog.
_ACK_CHUNK = 10_000


def slowest_subscription(topic: PolicyTopic) -> PolicySubscription | None:
    """The durable subscription with the oldest unacknowledged entry (its mark-delete is lowest)."""
    subs = [s for s in topic.subscriptions.values() if s.durable]
    return min(subs, key=lambda s: s.cursor.mark_delete) if subs else None


def estimated_backlog_size(ml: ManagedLedger, mark_delete: Position) -> int:
    """Bytes after ``mark_delete``: Pulsar's ``getEstimatedBacklogSize`` (module docstring)."""
    total = 0
    for lid in ml.ledger_ids:
        if lid < mark_delete.ledger_id:
            continue
        size, entries = ml.ledger_size(lid), ml.entries_in(lid)
        if lid == mark_delete.ledger_id and entries > 0:
            consumed = mark_delete.entry_id + 1
            size -= size if consumed >= entries else max(0, consumed) * (size // entries)
        total += size
    return total


def backlog_size(topic: PolicyTopic) -> int:
    slowest = slowest_subscription(topic)
    return 0 if slowest is None else estimated_backlog_size(topic.ml, slowest.cursor.mark_delete)


async def oldest_unacked(topic: PolicyTopic) -> tuple[PolicySubscription, int] | None:
    """The slowest durable subscription and the publish time (ms) of its first unacknowledged
    entry, or None when no durable subscription has a backlog."""
    slowest = slowest_subscription(topic)
    if slowest is None:
        return None
    ml = topic.ml
    first = ml.first_readable(ml.next_position(slowest.cursor.mark_delete))
    if first is None:
        return None
    got = await ml.read_entries(first, 1)
    if not got:
        return None
    meta, _ = decode_entry(got[0][1])
    return slowest, int(meta.get("pt", 0))


@dataclass(frozen=True, slots=True)
class Exceeded:
    """A quota the backlog is over: what a refused producer or send is told."""

    quota: Quota
    current: float  # bytes, or seconds of age
    topic: str
    subscription: str

    def describe(self) -> str:
        q = self.quota
        if q.kind == SIZE:
            what = f"{SIZE} (size): backlog is {int(self.current)} bytes, limitSize is {q.limit} bytes"
        else:
            what = (
                f"{AGE} (time): oldest unacknowledged message (subscription {self.subscription}) is "
                f"{self.current:.1f} s old, limitTime is {q.limit} s"
            )
        return f"backlog quota exceeded on {self.topic}: {what} (policy {q.policy})"

    def error(self, *, creating: bool) -> MagnetarError:
        prefix = "Cannot create producer on topic with backlog quota exceeded: " if creating else ""
        text = prefix + self.describe()
        if self.quota.policy == HOLD:
            return ProducerBlockedQuotaExceededError(text)
        return ProducerBlockedQuotaExceededException(text)


# ---------------------------------------------------------------------------------- enforcing
class BacklogQuotaGuard:
    """The backlog quota state of one topic: the quotas in force, the last verdict, held sends.

    ``expire`` is ``cursor_ops.expire``, which an age quota's eviction runs (``targets``)."""

    def __init__(self, topic: PolicyTopic, expire: ExpireMessages) -> None:
        self.topic = topic
        self._expire = expire
        self.size_quota: Quota | None = None
        self.age_quota: Quota | None = None
        # Set while a hold or exception policy refuses sends (``_send`` looks at it per send).
        self.blocked: Exceeded | None = None
        self._held: deque[Callable[[], None]] = deque()
        self.oldest_age_seconds = 0.0
        self.oldest_subscription: str | None = None
        self.evictions = 0
        self.apply(topic.policies)

    def apply(self, eff: EffectivePolicies) -> None:
        """Policy listener: take the effective quotas; a verdict no longer backed by one ends."""
        self.size_quota, self.age_quota = quotas_of(eff.get("backlog_quota_map"))
        blocked = self.blocked
        if blocked is not None:
            now = self.size_quota if blocked.quota.kind == SIZE else self.age_quota
            if now is None or now.policy not in (HOLD, EXCEPTION) or now.limit > blocked.quota.limit:
                self.release()

    @property
    def held(self) -> int:
        return len(self._held)

    # ---------------------------------------------------------------- verdicts
    async def exceeded(self, now: float) -> Exceeded | None:
        """The first quota the backlog is over at ``now`` (epoch seconds; size before age, as
        Pulsar checks), or None."""
        topic = self.topic
        size_q, age_q = self.size_quota, self.age_quota
        if size_q is not None:
            slowest = slowest_subscription(topic)
            if slowest is not None:
                size = estimated_backlog_size(topic.ml, slowest.cursor.mark_delete)
                if size >= size_q.limit:
                    return Exceeded(size_q, size, topic.name, slowest.name)
        found = await oldest_unacked(topic) if age_q is not None else None
        if found is None:
            self.oldest_age_seconds, self.oldest_subscription = 0.0, None
            return None
        sub, published_ms = found
        age = max(0.0, now - published_ms / 1000.0) if published_ms > 0 else 0.0
        self.oldest_age_seconds, self.oldest_subscription = age, sub.name
        if age_q is not None and age > age_q.limit:
            return Exceeded(age_q, age, topic.name, sub.name)
        return None

    async def admit_producer(self, now: float) -> None:
        """At producer creation: refuse it while a hold or exception quota is exceeded (Pulsar's
        ``checkBacklogQuotaExceeded``)."""
        if self.size_quota is None and self.age_quota is None:
            return
        verdict = await self.exceeded(now)
        if verdict is not None and verdict.quota.policy in (HOLD, EXCEPTION):
            raise verdict.error(creating=True)

    async def check(self, now: float) -> None:
        """The periodic check: evict, block or release according to the quota exceeded."""
        if self.size_quota is None and self.age_quota is None:
            self.release()
            return
        verdict = await self.exceeded(now)
        if verdict is None:
            self.release()
            return
        if verdict.quota.policy == EVICTION:
            self.release()
            await self._evict(verdict.quota, now)
            return
        if self.blocked is None:
            log.info("%s; sends are %s", verdict.describe(), "held" if verdict.quota.policy == HOLD else "refused")
        self.blocked = verdict

    # ---------------------------------------------------------------- sends
    def intercept(self, replay: Callable[[], None], fail: Callable[[MagnetarError], None]) -> bool:
        """Called by the connection for a send while ``blocked``: hold it (``replay`` runs it again
        once released) or fail it; True when the send was taken."""
        blocked = self.blocked
        if blocked is None:
            return False
        if blocked.quota.policy == HOLD:
            self._held.append(replay)
        else:
            fail(blocked.error(creating=False))
        return True

    def release(self) -> None:
        """Sends pass again; held ones go first, in the order they came, before anything newer."""
        self.blocked = None
        while self._held and self.blocked is None:
            replay = self._held.popleft()
            try:
                replay()
            except Exception:
                log.exception("a held send on %s failed when released", self.topic.name)

    # ---------------------------------------------------------------- eviction
    async def _evict(self, quota: Quota, now: float) -> None:
        if quota.kind == SIZE:
            await self._evict_by_size(quota)
        else:
            await self._evict_by_age(quota, now)

    async def _evict_by_size(self, quota: Quota) -> None:
        """Pulsar's ``dropBacklogForSizeLimit``: skip entries on the slowest subscription, in
        proportion to how far over 90 % of the quota the backlog is, until it is not."""
        topic, target = self.topic, EVICTION_TARGET * quota.limit
        previous: PolicySubscription | None = None
        while True:
            slowest = slowest_subscription(topic)
            if slowest is None or slowest is previous:
                return
            size = estimated_backlog_size(topic.ml, slowest.cursor.mark_delete)
            if size <= target:
                return
            entries = topic.ml.entries_after(slowest.cursor.mark_delete)
            skip = int((size - target) / size * entries)
            if skip <= 0:
                return
            await skip_entries(slowest, skip)
            self.evictions += 1
            log.info("evicted %d entries of %s/%s (backlog %d bytes over quota)", skip, topic.name, slowest.name, size)
            previous = slowest

    async def _evict_by_age(self, quota: Quota, now: float) -> None:
        """Acknowledge, on every durable subscription, what was published before 90 % of the
        quota's age (Pulsar's precise ``dropBacklogForTimeLimit``)."""
        cutoff_ms = int((now - EVICTION_TARGET * quota.limit) * 1000)
        for sub in [s for s in self.topic.subscriptions.values() if s.durable]:
            if await self._expire(sub, 0, cutoff_ms, count=False):
                self.evictions += 1

    # ---------------------------------------------------------------- stats and lifecycle
    def stats(self) -> dict[str, Any]:
        """Pulsar's topic stats fields for backlog quotas (PIP-323)."""
        return {
            "backlogSize": backlog_size(self.topic),
            "backlogQuotaLimitSize": self.size_quota.limit if self.size_quota else -1,
            "backlogQuotaLimitTime": self.age_quota.limit if self.age_quota else -1,
            "oldestBacklogMessageAgeSeconds": int(self.oldest_age_seconds),
            "oldestBacklogMessageSubscriptionName": self.oldest_subscription,
            "backlogQuotaExceeded": self.blocked.describe() if self.blocked else None,
            "publishHeldByBacklogQuota": len(self._held),
        }

    def close(self) -> None:
        """The topic is going away: replay held sends, which its connections now refuse (the
        producers were closed first), so their clients resend them to the next owner."""
        self.release()


async def skip_entries(sub: PolicySubscription, count: int) -> None:
    """Acknowledge the first ``count`` entries after the mark-delete position (acknowledged ones
    included, as Pulsar's ``skipEntries(..., Include)``), through the subscription."""
    ml, cursor = sub.ml, sub.cursor
    pending: list[Position] = []
    pos = ml.next_position(cursor.mark_delete)
    for _ in range(count):
        if not ml.is_readable(pos):
            break
        if not cursor.is_acked(pos):
            pending.append(pos)
        if len(pending) >= _ACK_CHUNK:
            await sub.ack_positions(pending)
            pending = []
        pos = ml.next_position(pos)
    if pending:
        await sub.ack_positions(pending)


class GuardedTopic(PolicyTopic, Protocol):
    """A loaded persistent topic with its guard (``topics.PersistentTopic``)."""

    @property
    def backlog_quota(self) -> BacklogQuotaGuard: ...


class QuotaBroker(Protocol):
    """The broker as the periodic check sees it (``BrokerService``): its clock and loaded topics."""

    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def topics(self) -> Mapping[str, GuardedTopic]: ...


async def run_backlog_quota_checks(service: QuotaBroker) -> None:
    """One round of ``backlogQuotaCheckIntervalInSeconds``: every loaded topic with a quota."""
    now = service.clock()
    for topic in list(service.topics.values()):
        guard = topic.backlog_quota
        if guard.size_quota is None and guard.age_quota is None and guard.blocked is None:
            continue
        try:
            await guard.check(now)
        except Exception as exc:  # a read failed (bookie away): try again next round
            log.warning("backlog quota check of %s failed: %s", topic.name, exc)
