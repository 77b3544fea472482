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

from magnetar.broker.policies import quotas as quota_policy
from magnetar.broker.policies.rates import RATE_ENDPOINTS, RATE_FIELDS, normalize_rate
from magnetar.protocol.errors import InvalidCommand
from magnetar.schema.info import CompatibilityStrategy


class PolicyError(InvalidCommand):
    """A policy value that cannot be applied; ``status`` is the HTTP status the admin API uses."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# REST path segment -> (policy field, kind). Namespace and topic level share the fields.
POLICY_ENDPOINTS: dict[str, str] = {
    **RATE_ENDPOINTS,
    "persistence": "persistence",
    "retention": "retention_policies",
    "messageTTL": "message_ttl_in_seconds",
    "backlogQuota": "backlog_quota_map",
    "backlogQuotaMap": "backlog_quota_map",
    "deduplication": "deduplicationEnabled",  # namespace level, Pulsar's path
    "deduplicationEnabled": "deduplicationEnabled",  # topic level, Pulsar's path
    "deduplicationSnapshotInterval": "deduplicationSnapshotIntervalSeconds",
    "maxProducersPerTopic": "max_producers_per_topic",
    "maxConsumersPerTopic": "max_consumers_per_topic",
    "maxProducers": "max_producers_per_topic",
    "maxConsumers": "max_consumers_per_topic",
    "compactionThreshold": "compaction_threshold",
    # Schema policies (WIRE.md R124): Pulsar's REST names; the topic level has the first two.
    "schemaCompatibilityStrategy": "schema_compatibility_strategy",
    "schemaValidationEnforced": "schema_validation_enforced",
    "isAllowAutoUpdateSchema": "is_allow_auto_update_schema",
}
FIELDS = (
    *RATE_FIELDS,
    "persistence",
    "retention_policies",
    "message_ttl_in_seconds",
    "backlog_quota_map",
    "deduplicationEnabled",
    "deduplicationSnapshotIntervalSeconds",
    "max_producers_per_topic",
    "max_consumers_per_topic",
    "compaction_threshold",
    "schema_compatibility_strategy",
    "schema_validation_enforced",
    "is_allow_auto_update_schema",
)
ENFORCED = frozenset(FIELDS)  # every stored field is acted on today


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
        try:
            return quota_policy.normalize_retention(value)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
    if field == "message_ttl_in_seconds":
        return _int(value, "messageTTL", 0)
    if field == "backlog_quota_map":
        try:
            return quota_policy.normalize_quota_map(value)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
    if field == "deduplicationEnabled":
        if not isinstance(value, bool):
            raise PolicyError(f"deduplication must be true or false, got {value!r}")
        return value
    if field == "deduplicationSnapshotIntervalSeconds":
        return _int(value, "deduplicationSnapshotInterval", 0)
    if field == "compaction_threshold":  # bytes after the compaction horizon (broker/compaction/monitor.py)
        return _int(value, "compactionThreshold", 0)
    if field == "schema_compatibility_strategy":  # a name, stored as Pulsar's enum name
        try:
            return CompatibilityStrategy.parse(value).name
        except InvalidCommand as exc:
            raise PolicyError(str(exc)) from None
    if field in ("schema_validation_enforced", "is_allow_auto_update_schema"):
        if not isinstance(value, bool):
            raise PolicyError(f"{field} must be true or false, got {value!r}")
        return value
    if field in ("max_producers_per_topic", "max_consumers_per_topic"):
        return _int(value, field, 0)
    if field in RATE_FIELDS:
        try:
            return normalize_rate(field, value)
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
    raise PolicyError(f"unknown policy {field!r}")


def check_consistent(policies: dict[str, Any], changed: str | None = None, level: str = "namespace") -> None:
    """Cross-field rules: a backlog quota must stay below the retention limits (Pulsar returns 412);
    ``changed`` names the field being set, which picks Pulsar's wording (quotas.py)."""
    problem = quota_policy.quota_above_retention(
        policies.get("retention_policies"), policies.get("backlog_quota_map"), changed, level
    )
    if problem is not None:
        raise PolicyError(problem, status=412)


def updated(field: str, current: Any, value: Any, params: Mapping[str, str] | None = None) -> Any:
    """The value to store when ``value`` is set (None: removed) on ``field``, given the REST query
    ``params``: a backlog quota is set or removed per ``backlogQuotaType``, as in Pulsar."""
    if field == "backlog_quota_map":
        try:
            return quota_policy.update_quota_map(current, value, (params or {}).get("backlogQuotaType"))
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
    return normalize(field, value)


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
