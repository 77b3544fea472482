"""What a subscription reports about message expiry (Pulsar's SubscriptionStats names).

Its own module, in ``policies`` next to the TTL check (``expiry``) rather than with the
subscriptions: every subscription holds one, and the TTL check reads it through the subscription,
so the stats sit below both.
"""

from __future__ import annotations

from typing import Any


class ExpiryStats:
    """What a subscription reports about expiry (Pulsar's SubscriptionStats names)."""

    __slots__ = ("_last_t", "_last_total", "last_expire_ms", "rate", "total")

    def __init__(self) -> None:
        self.total = 0
        self.last_expire_ms = 0
        self.rate = 0.0
        self._last_total = 0
        self._last_t: float | None = None

    def record(self, messages: int, now_ms: int) -> None:
        """``messages`` were expired at ``now_ms`` (by TTL or by the admin verb)."""
        if messages > 0:
            self.total += messages
            self.last_expire_ms = now_ms

    def sample(self, now: float) -> None:
        """Recompute ``msgRateExpired`` over the time since the previous sample."""
        if self._last_t is not None and now > self._last_t:
            self.rate = (self.total - self._last_total) / (now - self._last_t)
        self._last_t, self._last_total = now, self.total

    def stats(self) -> dict[str, Any]:
        return {"msgRateExpired": self.rate, "totalMsgExpired": self.total, "lastExpireTimestamp": self.last_expire_ms}
