"""Message TTL, and the broker's periodic policy checks (TTL, retention, backlog quotas).

Message TTL (Pulsar's ``message_ttl_in_seconds``, topic level over namespace level; 0 or unset: no
TTL) is applied every ``messageExpiryCheckIntervalInMinutes``: on every subscription of every
loaded topic (readers included, as Pulsar's ``PersistentTopic.checkMessageExpiry``; a compaction
cursor excluded), the unacknowledged messages published more than TTL seconds ago are acknowledged
by moving the cursor: ``subscriptions.cursor_ops.expire``, the same as the ``expire-messages``
admin verb (handed in by the service, ``targets`` says why). Age is measured by publish time
(entry meta ``pt``); a delayed message not yet due expires like any other once its publish time is
older than the TTL (Pulsar computes it the same way, so a delay longer than the TTL loses the
message).

Each subscription reports Pulsar's ``msgRateExpired`` (messages per second over the last check
interval), ``totalMsgExpired`` and ``lastExpireTimestamp`` (ms; 0 before the first expiry).

``PolicyChecks`` runs the three periodic checks as tasks of the broker: TTL, retention
(``retentionCheckIntervalInSeconds``: every managed ledger trims what retention no longer keeps,
so a time limit takes effect without waiting for the next roll-over or acknowledgement) and
backlog quotas (``backlogQuotaCheckIntervalInSeconds``, ``backlog_quota.py``). Each uses the
broker's ``clock`` (epoch seconds), so that a test can move time on.

That clock is the guarded clock of ``managed_ledger.clock`` unless a test replaced it: it does not
follow a step of the broker's wall clock. Set an hour ahead, a plain wall clock would make every
unread message look an hour older and expire it at the next check (and trim retained ledgers, and
evict by backlog age, an hour early); the guarded clock lets data age at the pace of real time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.backlog_quota import QuotaBroker, run_backlog_quota_checks
from magnetar.broker.policies.targets import ExpireMessages, PolicySubscription, PolicyTopic

log = logging.getLogger(__name__)

# Pulsar's compaction cursor; TTL never moves it.
COMPACTION_SUBSCRIPTION = "__compaction"


class PolicyBroker(QuotaBroker, Protocol):
    """The broker as its periodic checks see it (``BrokerService``): config, clock, loaded topics."""

    @property
    def config(self) -> BrokerConfig: ...


async def expire_subscription(sub: PolicySubscription, ttl_seconds: int, now_ms: int, expire: ExpireMessages) -> int:
    """Expire what ``sub`` holds unacknowledged that was published more than ``ttl_seconds``
    before ``now_ms``; returns the number of messages expired (batch messages count one each)."""
    before = sub.cursor.backlog
    if before == 0:
        return 0
    await expire(sub, ttl_seconds, now_ms)  # counts them in ``sub.expiry``
    return max(0, before - sub.cursor.backlog)


async def expire_topic(topic: PolicyTopic, now: float, expire: ExpireMessages) -> int:
    """Apply the topic's message TTL to each of its subscriptions; returns messages expired."""
    ttl = int(topic.policies.get("message_ttl_in_seconds", 0) or 0)
    total = 0
    for sub in list(topic.subscriptions.values()):
        if ttl > 0 and not sub.name.startswith(COMPACTION_SUBSCRIPTION):
            total += await expire_subscription(sub, ttl, int(now * 1000), expire)
        sub.expiry.sample(now)
    return total


async def run_expiry_checks(service: PolicyBroker, expire: ExpireMessages) -> None:
    """One round of ``messageExpiryCheckIntervalInMinutes`` over every loaded topic."""
    now = service.clock()
    for topic in list(service.topics.values()):
        try:
            expired = await expire_topic(topic, now, expire)
        except Exception as exc:  # a read failed (bookie away): next round
            log.warning("message expiry on %s failed: %s", topic.name, exc)
            continue
        if expired:
            log.info("expired %d messages on %s (TTL)", expired, topic.name)


async def run_retention_checks(service: PolicyBroker) -> None:
    """One round of ``retentionCheckIntervalInSeconds``: trim what retention no longer keeps."""
    now = service.clock()
    for topic in list(service.topics.values()):
        topic.ml.schedule_trim(now)


class PolicyChecks:
    """The broker's periodic policy checks, each on its own interval (module docstring);
    ``expire`` is ``cursor_ops.expire``, which TTL runs (``targets``)."""

    def __init__(self, service: PolicyBroker, expire: ExpireMessages) -> None:
        self.service = service
        self._expire = expire
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        c = self.service.config
        checks: list[tuple[str, float, Callable[[PolicyBroker], Awaitable[None]]]] = [
            ("message expiry", c.message_expiry_check_interval_minutes * 60.0, self._run_expiry_checks),
            ("retention", c.retention_check_interval_seconds, run_retention_checks),
            ("backlog quota", c.backlog_quota_check_interval_seconds, run_backlog_quota_checks),
        ]
        loop = asyncio.get_running_loop()
        for name, interval, check in checks:
            if interval > 0:
                self._tasks.append(loop.create_task(self._every(name, interval, check), name=f"magnetar {name} check"))

    async def _run_expiry_checks(self, service: PolicyBroker) -> None:
        await run_expiry_checks(service, self._expire)

    async def _every(self, name: str, interval: float, check: Callable[[PolicyBroker], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await check(self.service)
            except Exception:
                log.exception("%s check failed", name)

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
