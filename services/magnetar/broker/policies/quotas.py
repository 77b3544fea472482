"""Backlog quota and retention policy values: their JSON forms, validation, and the rule between them.

Kept apart from ``backlog_quota`` (which enforces the quotas on live topics) so that
``model`` can validate a stored document without importing the enforcement side, which in turn
reads the model: values below, enforcement above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SIZE = "destination_storage"
AGE = "message_age"
QUOTA_TYPES = (SIZE, AGE)
HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"
BACKLOG_POLICIES = (HOLD, EXCEPTION, EVICTION)


# ---------------------------------------------------------------------------------- policy values
def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def normalize_retention(value: Any) -> dict[str, int]:
    """A ``RetentionPolicies`` value, checked as Pulsar's ``validateRetentionPolicies``."""
    if not isinstance(value, dict):
        raise ValueError("retention must be an object")
    minutes = _int(value.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", -1)
    size_mb = _int(value.get("retentionSizeInMB", 0), "retentionSizeInMB", -1)
    if (minutes == 0) != (size_mb == 0):
        raise ValueError(
            "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the "
            "limits has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. "
            "To disable retention both limits must be set to 0."
        )
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}


def normalize_quota(value: Any) -> dict[str, Any]:
    """One ``BacklogQuota`` (``limitSize`` or its older name ``limit``, ``limitTime``, ``policy``)."""
    if not isinstance(value, dict):
        raise ValueError("backlogQuota must be an object")
    policy = value.get("policy", HOLD)
    if policy not in BACKLOG_POLICIES:
        raise ValueError(f"backlog quota policy must be one of {', '.join(BACKLOG_POLICIES)}, got {policy!r}")
    size = _int(value.get("limitSize", value.get("limit", -1)), "limitSize", -1)
    seconds = _int(value.get("limitTime", -1), "limitTime", -1)
    return {"limit": size, "limitSize": size, "limitTime": seconds, "policy": policy}


def _quota_type(value: str | None) -> str:
    qtype = value or SIZE
    if qtype not in QUOTA_TYPES:
        raise ValueError(f"backlogQuotaType must be one of {', '.join(QUOTA_TYPES)}, got {qtype!r}")
    return qtype


def normalize_quota_map(value: Any) -> dict[str, Any] | None:
    """A whole ``backlog_quota_map`` (type -> quota), or one quota given alone (a size quota)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("backlogQuota must be an object")
    if any(k in QUOTA_TYPES for k in value):
        unknown = sorted(k for k in value if k not in QUOTA_TYPES)
        if unknown:
            raise ValueError(f"unknown backlog quota type(s) {', '.join(unknown)}; known: {', '.join(QUOTA_TYPES)}")
        out = {k: normalize_quota(v) for k, v in value.items() if v is not None}
        return out or None
    return {SIZE: normalize_quota(value)}


def update_quota_map(current: Any, value: Any, quota_type: str | None) -> dict[str, Any] | None:
    """Set (``value``) or remove (None) the quota of ``quota_type`` in the stored map ``current``."""
    qtype = _quota_type(quota_type)
    out = dict(current) if isinstance(current, dict) else {}
    if value is None:
        out.pop(qtype, None)
    elif isinstance(value, dict) and any(k in QUOTA_TYPES for k in value):
        return normalize_quota_map(value)  # a whole map, as the namespace document carries it
    else:
        out[qtype] = normalize_quota(value)
    return out or None


@dataclass(frozen=True, slots=True)
class Quota:
    kind: str  # SIZE or AGE
    limit: int  # bytes or seconds
    policy: str


def quotas_of(quota_map: Any) -> tuple[Quota | None, Quota | None]:
    """The (size, age) quotas a stored ``backlog_quota_map`` sets (module docstring)."""
    if not isinstance(quota_map, Mapping):
        return None, None
    size_doc = quota_map.get(SIZE) or {}
    age_doc = quota_map.get(AGE) or None
    size = None
    limit = int(size_doc.get("limitSize", size_doc.get("limit", -1)) or -1)
    if limit > 0:
        size = Quota(SIZE, limit, str(size_doc.get("policy", HOLD)))
    if age_doc is None and int(size_doc.get("limitTime", -1) or -1) > 0:
        age_doc = size_doc  # stored before the types were split: its limitTime is the age quota
    age = None
    if age_doc is not None and int(age_doc.get("limitTime", -1) or -1) > 0:
        age = Quota(AGE, int(age_doc["limitTime"]), str(age_doc.get("policy", HOLD)))
    return size, age


def quota_above_retention(retention: Any, quota_map: Any, changed: str | None, level: str) -> str | None:
    """Why these retention limits and backlog quotas cannot hold together, or None when they can.

    Pulsar's rule (``checkBacklogQuota``): with a positive retention size, the size quota must be
    below it; with a positive retention time, the age quota must be below it. The wording is
    Pulsar's (which call was refused) followed by the numbers."""
    if not isinstance(retention, Mapping):
        return None
    size_mb = int(retention.get("retentionSizeInMB", 0) or 0)
    minutes = int(retention.get("retentionTimeInMinutes", 0) or 0)
    size, age = quotas_of(quota_map)
    detail = None
    if size_mb > 0 and size is not None and size.limit >= size_mb * 1024 * 1024:
        detail = f"backlog quota limitSize {size.limit} bytes >= retention size {size_mb} MB"
    elif minutes > 0 and age is not None and age.limit >= minutes * 60:
        detail = f"backlog quota limitTime {age.limit} s >= retention time {minutes} min"
    if detail is None:
        return None
    if changed == "retention_policies":
        return f"Retention Quota must exceed configured backlog quota for {level} ({detail})"
    return (
        f"Backlog Quota exceeds configured retention quota for {level}. "
        f"Please increase retention quota and retry ({detail})"
    )


# ---------------------------------------------------------------------------------- measuring
