"""Pure translation between the CRDs' policy fields and the admin API's policy bodies.

Why a separate, IO-free module: the rules here (which endpoint a field maps to, what body it
sends, how the broker reports it back, which specs are impossible) are what users argue about,
and they are unit-tested without a broker. The CRD field names are the ones a Pulsar user types
(`persistence.ensembleSize`, `retention.timeInMinutes`, `backlogQuota.policy`, ...); the bodies
are Pulsar's REST bodies (`bookkeeperEnsemble`, `retentionTimeInMinutes`, `limitSize`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BACKLOG_TYPES = ("destination_storage", "message_age")


@dataclass(frozen=True)
class Policy:
    """One policy as the broker knows it: where to POST it, what to POST, how to read it back."""

    #: The CRD field, also the name reported in conditions and in status.appliedPolicies.
    field: str
    #: The admin API endpoint name (`.../{namespace}/<endpoint>` or `.../{topic}/<endpoint>`).
    endpoint: str
    body: Any
    #: Query parameters of the POST (the backlog quota's type).
    params: Mapping[str, str] | None = None
    #: The HTTP verb that sets it: POST, except where Pulsar's endpoint takes PUT.
    method: str = "POST"


class InvalidSpec(ValueError):
    """The spec asks for something impossible; the message says why, for the Ready condition."""

    #: The condition that repeats the refusal beside Ready (a schema error names SchemaApplied).
    condition_type: str = "PoliciesApplied"


# CRD field -> (namespace endpoint, topic endpoint, key in the namespace GET policies document).
_ENDPOINTS: dict[str, tuple[str, str, str]] = {
    "persistence": ("persistence", "persistence", "persistence"),
    "retention": ("retention", "retention", "retention_policies"),
    "messageTTLSeconds": ("messageTTL", "messageTTL", "message_ttl_in_seconds"),
    "backlogQuota": ("backlogQuota", "backlogQuota", "backlog_quota_map"),
    "deduplication": ("deduplication", "deduplication", "deduplicationEnabled"),
    "maxProducersPerTopic": ("maxProducersPerTopic", "maxProducers", "max_producers_per_topic"),
    "maxConsumersPerTopic": ("maxConsumersPerTopic", "maxConsumers", "max_consumers_per_topic"),
    # Schema policies (WIRE.md R124), names as pulsar-resources-operator's PulsarNamespace.
    "schemaCompatibilityStrategy": (
        "schemaCompatibilityStrategy",
        "schemaCompatibilityStrategy",
        "schema_compatibility_strategy",
    ),
    "schemaValidationEnforced": ("schemaValidationEnforced", "schemaValidationEnforced", "schema_validation_enforced"),
    "isAllowAutoUpdateSchema": ("isAllowAutoUpdateSchema", "isAllowAutoUpdateSchema", "is_allow_auto_update_schema"),
}
# What the broker means when one of them was never set (Pulsar's Policies defaults): a document
# that leaves the key out reads as this value, and dropping the field from the spec sets it back.
SCHEMA_POLICY_UNSET: dict[str, Any] = {
    "schemaCompatibilityStrategy": "UNDEFINED",
    "schemaValidationEnforced": False,
    "isAllowAutoUpdateSchema": True,
}
# Topic CRDs say maxProducers / maxConsumers, as pulsar-admin topics does.
_TOPIC_ALIASES = {"maxProducers": "maxProducersPerTopic", "maxConsumers": "maxConsumersPerTopic"}
POLICY_FIELDS = tuple(_ENDPOINTS)
TOPIC_POLICY_FIELDS = (
    "persistence",
    "retention",
    "messageTTLSeconds",
    "backlogQuota",
    "deduplication",
    "maxProducers",
    "maxConsumers",
)


def _canonical(field: str) -> str:
    return _TOPIC_ALIASES.get(field, field)


def validate(spec: Mapping[str, Any]) -> None:
    """Refuse what no broker can honour: quorums out of order, retention below the backlog quota."""
    persistence = spec.get("persistence")
    if persistence:
        e, qw, qa = persistence["ensembleSize"], persistence["writeQuorum"], persistence["ackQuorum"]
        if qa > qw:
            raise InvalidSpec(
                f"persistence.ackQuorum ({qa}) is larger than persistence.writeQuorum ({qw}): "
                "an entry cannot be acknowledged by more bookies than it is written to (need E >= Qw >= Qa)"
            )
        if qw > e:
            raise InvalidSpec(
                f"persistence.writeQuorum ({qw}) is larger than persistence.ensembleSize ({e}): "
                "an entry cannot be written to more bookies than the ensemble has (need E >= Qw >= Qa)"
            )
    retention, quota = spec.get("retention"), spec.get("backlogQuota")
    if retention and quota:
        kind = quota.get("type", "destination_storage")
        size_mb, limit_size = retention.get("sizeInMB", -1), quota.get("limitSize", -1)
        if kind == "destination_storage" and size_mb >= 0 and limit_size > size_mb * 1024 * 1024:
            raise InvalidSpec(
                f"retention.sizeInMB ({size_mb} MB) is smaller than backlogQuota.limitSize "
                f"({limit_size} bytes): retention must be at least the backlog quota"
            )
        minutes, limit_time = retention.get("timeInMinutes", -1), quota.get("limitTime", -1)
        if kind == "message_age" and minutes >= 0 and limit_time > minutes * 60:
            raise InvalidSpec(
                f"retention.timeInMinutes ({minutes} min) is shorter than backlogQuota.limitTime "
                f"({limit_time} s): retention must be at least the backlog quota"
            )


def _body(field: str, value: Any) -> tuple[Any, dict[str, str] | None]:
    if field == "persistence":
        return {
            "bookkeeperEnsemble": value["ensembleSize"],
            "bookkeeperWriteQuorum": value["writeQuorum"],
            "bookkeeperAckQuorum": value["ackQuorum"],
        }, None
    if field == "retention":
        return {
            "retentionTimeInMinutes": value["timeInMinutes"],
            "retentionSizeInMB": value["sizeInMB"],
        }, None
    if field == "backlogQuota":
        kind = value.get("type", "destination_storage")
        body = {
            "limitSize": value.get("limitSize", -1),
            "limitTime": value.get("limitTime", -1),
            "policy": value["policy"],
        }
        return body, ({"backlogQuotaType": kind} if kind != "destination_storage" else None)
    if field in ("deduplication", "schemaValidationEnforced", "isAllowAutoUpdateSchema"):
        return bool(value), None
    if field == "schemaCompatibilityStrategy":
        return str(value), None
    return int(value), None


def desired(spec: Mapping[str, Any], *, level: str) -> dict[str, Policy]:
    """The policies a Namespace (level="namespace") or Topic (level="topic") spec asks for."""
    out: dict[str, Policy] = {}
    fields = POLICY_FIELDS if level == "namespace" else TOPIC_POLICY_FIELDS
    for field in fields:
        if spec.get(field) is None:
            continue
        ns_ep, topic_ep, _ = _ENDPOINTS[_canonical(field)]
        body, params = _body(_canonical(field), spec[field])
        method = "PUT" if field == "schemaCompatibilityStrategy" else "POST"  # Pulsar's verb for it
        out[field] = Policy(field, ns_ep if level == "namespace" else topic_ep, body, params, method)
    return out


def endpoint_of(field: str, *, level: str) -> str:
    ns_ep, topic_ep, _ = _ENDPOINTS[_canonical(field)]
    return ns_ep if level == "namespace" else topic_ep


def backlog_type(spec: Mapping[str, Any]) -> str:
    quota = spec.get("backlogQuota") or {}
    return str(quota.get("type", "destination_storage"))


def from_namespace_document(field: str, policies: Mapping[str, Any], *, quota_type: str) -> Any:
    """The current value of one policy inside the namespace GET document (None when unset)."""
    value = policies.get(_ENDPOINTS[_canonical(field)][2])
    if value is None and field in SCHEMA_POLICY_UNSET:
        return SCHEMA_POLICY_UNSET[field]
    if field == "backlogQuota":
        return (value or {}).get(quota_type)
    return value


def from_topic_answer(field: str, answer: Any, *, quota_type: str) -> Any:
    """The current value from a topic-level GET; backlog quotas may come back as a type->quota map."""
    if field == "backlogQuota" and isinstance(answer, dict) and set(answer) & set(BACKLOG_TYPES):
        return answer.get(quota_type)
    if answer in ({}, ""):
        return None
    return answer


def matches(want: Any, have: Any) -> bool:
    """Whether the broker's value satisfies ours: every key we set is equal; extra keys are fine."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(matches(v, have.get(k)) for k, v in want.items())
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have or (want == have and type(want) is type(have))
    return bool(want == have)


def not_enforced(fields: list[str], unenforced: list[str] | None) -> list[str]:
    """Which of our fields the broker stores but says it does not enforce (its `unenforced` list)."""
    names = set(unenforced or [])
    out = []
    for field in fields:
        ns_ep, topic_ep, doc_key = _ENDPOINTS[_canonical(field)]
        if names & {field, _canonical(field), ns_ep, topic_ep, doc_key}:
            out.append(field)
    return out
