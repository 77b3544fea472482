"""Rate-limit policy values (publishRate, dispatchRate, subscriptionDispatchRate): their Pulsar
field names, REST segments and validation.

Kept apart from ``rate_limit`` (the limiters on live topics) so that ``policies`` validates a
stored document without importing the enforcement side, which in turn reads policies.
"""

from __future__ import annotations

from typing import Any

# Policy fields (names of Pulsar's namespace Policies document) -> the REST path segment.
PUBLISH_RATE = "publishMaxMessageRate"
TOPIC_DISPATCH_RATE = "topicDispatchRate"
SUBSCRIPTION_DISPATCH_RATE = "subscriptionDispatchRate"
RATE_ENDPOINTS = {
    "publishRate": PUBLISH_RATE,
    "dispatchRate": TOPIC_DISPATCH_RATE,
    "subscriptionDispatchRate": SUBSCRIPTION_DISPATCH_RATE,
}
RATE_FIELDS = (PUBLISH_RATE, TOPIC_DISPATCH_RATE, SUBSCRIPTION_DISPATCH_RATE)

_PUBLISH_KEYS = ("publishThrottlingRateInMsg", "publishThrottlingRateInByte")
_DISPATCH_KEYS = ("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte")


# ---------------------------------------------------------------------- policy values
def _limit(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < -1:
        raise ValueError(f"{name} must be -1 (no limit), 0 (no limit) or a positive rate, got {value}")
    return value


def _unwrap_cluster(value: Any, keys: tuple[str, ...]) -> Any:
    """Pulsar's Policies document keys rates by cluster (``{"standalone": {...}}``); accept that
    form with one cluster, as a whole-namespace document may carry it."""
    if isinstance(value, dict) and not any(k in value for k in (*keys, "ratePeriodInSecond")) and len(value) == 1:
        (inner,) = value.values()
        if isinstance(inner, dict):
            return inner
    return value


def normalize_rate(field: str, value: Any) -> dict[str, Any]:
    """Validate a PublishRate or DispatchRate JSON object; ``ValueError`` says what is wrong."""
    if field == PUBLISH_RATE:
        value = _unwrap_cluster(value, _PUBLISH_KEYS)
        if not isinstance(value, dict):
            raise ValueError(f"publishRate must be an object with {' and '.join(_PUBLISH_KEYS)}, got {value!r}")
        return {k: _limit(value.get(k, -1), k) for k in _PUBLISH_KEYS}
    value = _unwrap_cluster(value, _DISPATCH_KEYS)
    if not isinstance(value, dict):
        raise ValueError(f"dispatch rate must be an object with {' and '.join(_DISPATCH_KEYS)}, got {value!r}")
    out: dict[str, Any] = {k: _limit(value.get(k, -1), k) for k in _DISPATCH_KEYS}
    period = value.get("ratePeriodInSecond", 1)
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"ratePeriodInSecond must be a positive integer, got {period!r}")
    out["ratePeriodInSecond"] = period
    relative = value.get("relativeToPublishRate", False)
    if not isinstance(relative, bool):
        raise ValueError(f"relativeToPublishRate must be true or false, got {relative!r}")
    out["relativeToPublishRate"] = relative
    return out
