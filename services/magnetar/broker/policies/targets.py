"""The topics and subscriptions the policy checks act on, as the checks see them.

Message TTL (``expiry``) and the backlog quota (``backlog_quota``) walk a persistent topic's
subscriptions and move their cursors, but the policies sit below the topics and subscriptions
packages (which read their limits from ``model`` and ``rate_limit`` at run time), so they name the
few members they use here instead of importing ``PersistentTopic`` and ``Subscription``.

Moving a cursor by publish time is ``subscriptions.cursor_ops.expire``, the admin verb's own code;
it sits above the policies too, so whoever builds a check (the topic, the service) hands it in as
an ``ExpireMessages``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Protocol

from magnetar.broker.policies.expiry_stats import ExpiryStats
from magnetar.broker.policies.model import EffectivePolicies
from magnetar.managed_ledger import ManagedCursor, ManagedLedger, Position


class PolicySubscription(Protocol):
    """A subscription as TTL and the backlog quota see it (``subscriptions.Subscription``)."""

    @property
    def name(self) -> str: ...
    @property
    def durable(self) -> bool: ...
    @property
    def ml(self) -> ManagedLedger: ...
    @property
    def cursor(self) -> ManagedCursor: ...
    @property
    def expiry(self) -> ExpiryStats: ...
    def ack_positions(self, positions: list[Position]) -> Awaitable[None]:
        """Acknowledge ``positions`` on behalf of no consumer (what skipping and expiring do)."""
        ...


class PolicyTopic(Protocol):
    """A persistent topic as TTL and the backlog quota see it (``topics.PersistentTopic``)."""

    @property
    def name(self) -> str: ...
    @property
    def ml(self) -> ManagedLedger: ...
    @property
    def policies(self) -> EffectivePolicies: ...
    @property
    def subscriptions(self) -> Mapping[str, PolicySubscription]: ...


class ExpireMessages(Protocol):
    """``subscriptions.cursor_ops.expire``: acknowledge what ``sub`` holds that was published more
    than ``expire_seconds`` before ``now_ms``, counted in its expiry stats unless ``count`` is
    False; returns how many entries that acknowledged."""

    def __call__(
        self, sub: PolicySubscription, expire_seconds: int, now_ms: int, *, count: bool = True
    ) -> Awaitable[int]: ...
