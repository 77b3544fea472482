"""Namespace and topic policies, with Pulsar's JSON field names, and their validation.

Policies are stored as given and validated before they are stored, so an impossible policy
(Qa > Qw, a backlog quota larger than the retention size) is refused with a reason and never
half-applied. ``ENFORCED`` lists what this broker acts on today; the rest is stored and reported
back as ``unenforced`` so that tools (the operator) can say "stored, not applied" instead of
pretending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.protocol.errors import InvalidCommand


class PolicyError(InvalidCommand):
    """A policy value that cannot be applied; ``status`` is the HTTP status the admin API uses."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# REST path segment -> (policy field, kind). Namespace and topic level share the fields.
POLICY_ENDPOINTS: dict[str, str] = {
    "persistence": "persistence",
    "retention": "retention_policies",
    "messageTTL": "message_ttl_in_seconds",
    "backlogQuota": "backlog_quota_map",
    "deduplication": "deduplicationEnabled",
    "maxProducersPerTopic": "max_producers_per_topic",
    "maxConsumersPerTopic": "max_consumers_per_topic",
    "maxProducers": "max_producers_per_topic",
    "maxConsumers": "max_consumers_per_topic",
}
FIELDS = (
    "persistence",
    "retention_policies",
    "message_ttl_in_seconds",
    "backlog_quota_map",
    "deduplicationEnabled",
    "max_producers_per_topic",
    "max_consumers_per_topic",
)
ENFORCED = frozenset({"persistence", "retention_policies", "max_producers_per_topic", "max_consumers_per_topic"})
BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


def _int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise PolicyError(f"{name} must be at least {minimum}, got {value}")
    return value


def normalize(field: str, value: Any) -> Any:
    """Validate one policy value; return the form that is stored."""
    if value is None:
        return None
    if field == "persistence":
        if not isinstance(value, dict):
            raise PolicyError("persistence must be an object")
        e = _int(value.get("bookkeeperEnsemble", 1), "bookkeeperEnsemble", 1)
        qw = _int(value.get("bookkeeperWriteQuorum", e), "bookkeeperWriteQuorum", 1)
        qa = _int(value.get("bookkeeperAckQuorum", qw), "bookkeeperAckQuorum", 1)
        if qw > e:
            raise PolicyError(f"write quorum ({qw}) must not exceed ensemble size ({e})")
        if qa > qw:
            raise PolicyError(f"ack quorum ({qa}) must not exceed write quorum ({qw})")
        return {
            "bookkeeperEnsemble": e,
            "bookkeeperWriteQuorum": qw,
            "bookkeeperAckQuorum": qa,
            "managedLedgerMaxMarkDeleteRate": value.get("managedLedgerMaxMarkDeleteRate", 0),
        }
    if field == "retention_policies":
        if not isinstance(value, dict):
            raise PolicyError("retention must be an object")
        return {
            "retentionTimeInMinutes": _int(value.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes", -1),
            "retentionSizeInMB": _int(value.get("retentionSizeInMB", 0), "retentionSizeInMB", -1),
        }
    if field == "message_ttl_in_seconds":
        return _int(value, "messageTTL", 0)
    if field == "backlog_quota_map":
        if isinstance(value, dict) and "destination_storage" in value:
            value = value["destination_storage"]
        if not isinstance(value, dict):
            raise PolicyError("backlogQuota must be an object")
        policy = value.get("policy", "producer_request_hold")
        if policy not in BACKLOG_POLICIES:
            raise PolicyError(f"backlog quota policy must be one of {', '.join(BACKLOG_POLICIES)}, got {policy!r}")
        return {
            "destination_storage": {
                "limitSize": _int(value.get("limitSize", -1), "limitSize", -1),
                "limitTime": _int(value.get("limitTime", -1), "limitTime", -1),
                "policy": policy,
            }
        }
    if field == "deduplicationEnabled":
        if not isinstance(value, bool):
            raise PolicyError(f"deduplication must be true or false, got {value!r}")
        return value
    if field in ("max_producers_per_topic", "max_consumers_per_topic"):
        return _int(value, field, 0)
    raise PolicyError(f"unknown policy {field!r}")


def check_consistent(policies: dict[str, Any]) -> None:
    """Cross-field rules: a backlog quota may not exceed the retention size (Pulsar returns 412)."""
    retention = policies.get("retention_policies") or {}
    quota = (policies.get("backlog_quota_map") or {}).get("destination_storage") or {}
    size_mb = retention.get("retentionSizeInMB", 0)
    limit = quota.get("limitSize", -1)
    if size_mb and size_mb > 0 and limit and limit > 0 and limit > size_mb * 1024 * 1024:
        raise PolicyError(
            f"backlog quota limitSize ({limit} bytes) exceeds the retention size ({size_mb} MB)", status=412
        )
    time_min = retention.get("retentionTimeInMinutes", 0)
    limit_t = quota.get("limitTime", -1)
    if time_min and time_min > 0 and limit_t and limit_t > time_min * 60:
        raise PolicyError(
            f"backlog quota limitTime ({limit_t} s) exceeds the retention time ({time_min} min)", status=412
        )


def normalize_all(doc: dict[str, Any]) -> dict[str, Any]:
    out = {f: normalize(f, doc.get(f)) for f in FIELDS}
    check_consistent(out)
    return out


def unenforced(policies: dict[str, Any]) -> list[str]:
    return sorted(f for f in FIELDS if policies.get(f) is not None and f not in ENFORCED)


@dataclass(frozen=True, slots=True)
class EffectivePolicies:
    """What a topic runs with: topic overrides, then namespace policies, then broker defaults.

    The typed attributes are what the broker used before policies became live; ``values`` is the
    merged view of every stored field (topic level over namespace level, field by field), which
    features read with ``get`` so that a new policy needs no new attribute here. A topic gets a
    new ``EffectivePolicies`` whenever a namespace or topic policy changes (``PersistentTopic.
    apply_policies``), so the values are never cached elsewhere.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    max_producers: int | None
    max_consumers: int | None
    retention_minutes: int = 0
    retention_mb: int = 0
    values: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        """The effective value of policy field ``name`` (topic over namespace), or ``default`` if unset."""
        value = self.values.get(name)
        return default if value is None else value

    @classmethod
    def resolve(cls, defaults: tuple[int, int, int], ns: dict[str, Any], topic: dict[str, Any]) -> EffectivePolicies:
        merged = {k: v for k, v in ns.items() if v is not None}
        merged.update({k: v for k, v in topic.items() if v is not None})

        def pick(name: str) -> Any:
            return merged.get(name)

        p = pick("persistence")
        e, qw, qa = defaults
        if p:
            e, qw, qa = p["bookkeeperEnsemble"], p["bookkeeperWriteQuorum"], p["bookkeeperAckQuorum"]
        mp, mc = pick("max_producers_per_topic"), pick("max_consumers_per_topic")
        retention = pick("retention_policies") or {}
        return cls(
            e,
            qw,
            qa,
            mp or None,
            mc or None,
            int(retention.get("retentionTimeInMinutes", 0)),
            int(retention.get("retentionSizeInMB", 0)),
            merged,
        )
