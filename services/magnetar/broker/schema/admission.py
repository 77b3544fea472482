"""Whether a producer or a consumer may use its schema on a topic (WIRE.md R119, R120, R124).

The broker refuses at creation time, not at the first message, because a schema that would break
the consumers must never reach storage: a refused producer gets ``IncompatibleSchema`` with the
reason from ``magnetar.schema.compatibility``, and nothing is registered. The three schema
policies are resolved on each admission from the metadata store (topic level, then namespace,
then broker config), so a changed policy applies to the next producer on every broker, and an
upload through the admin API (``admin/schemas.py``) uses the very same rules through
``effective_policies`` and ``check_new_schema``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.cluster.resources import Resources
from magnetar.broker.config import BrokerConfig
from magnetar.broker.schema.registry import SchemaRegistry, SchemaVersion
from magnetar.broker.topics.kinds import AnyTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import IncompatibleSchema, NamespaceNotFound
from magnetar.protocol.topic_name import PERSISTENT, TopicName
from magnetar.schema.compatibility import check_compatible, check_reader
from magnetar.schema.info import CompatibilityStrategy, SchemaInfo, SchemaType

# Schema types that mean "raw bytes, no schema" when a client sends them anyway.
_NO_SCHEMA = frozenset({SchemaType.NONE, SchemaType.BYTES, SchemaType.AUTO, SchemaType.AUTO_CONSUME})

AUTO_UPDATE_DISABLED = "Schema not found and schema auto updating is disabled."


@dataclass(frozen=True, slots=True)
class SchemaPolicies:
    """The schema policies a topic runs with, every level resolved."""

    strategy: CompatibilityStrategy
    validation_enforced: bool
    auto_update: bool


def schema_of(raw: Any) -> SchemaInfo | None:
    """The ``schema`` map of ``producer``/``subscribe`` (R118) as a ``SchemaInfo``; None for an
    absent one and for the bytes types. ``InvalidCommand`` names what is wrong."""
    if raw is None:
        return None
    info = SchemaInfo.from_wire(raw)
    return None if info.type in _NO_SCHEMA else info


def resolve(levels: list[Mapping[str, Any]], config: BrokerConfig) -> SchemaPolicies:
    """``levels`` = the topic's own policies, then its namespace's; the broker config is last.
    UNDEFINED (or unset) at a level asks the next one."""
    strategy = CompatibilityStrategy.UNDEFINED
    for level in levels:
        raw = level.get("schema_compatibility_strategy")
        if raw is not None:
            strategy = CompatibilityStrategy.parse(raw)
            if strategy is not CompatibilityStrategy.UNDEFINED:
                break
    if strategy is CompatibilityStrategy.UNDEFINED:
        strategy = CompatibilityStrategy.parse(config.schema_compatibility_strategy)
    if strategy is CompatibilityStrategy.UNDEFINED:
        strategy = CompatibilityStrategy.FULL

    def flag(name: str, default: bool) -> bool:
        for level in levels:
            value = level.get(name)
            if value is not None:
                return bool(value)
        return default

    return SchemaPolicies(
        strategy,
        flag("schema_validation_enforced", config.is_schema_validation_enforced),
        flag("is_allow_auto_update_schema", config.is_allow_auto_update_schema_enabled),
    )


async def effective_policies(resources: Resources, config: BrokerConfig, topic: TopicName) -> SchemaPolicies:
    """Read the topic-level and namespace policies of ``topic`` now (no cache: R124)."""
    levels: list[Mapping[str, Any]] = []
    # Topic-level policies live in the record of the (persistent) base topic.
    base = topic.partitioned_base
    record = await resources.get_topic(TopicName(PERSISTENT, base.tenant, base.namespace, base.local_name))
    if record is not None:
        levels.append(record[0].get("policies") or {})
    try:
        ns_doc, _ = await resources.get_namespace(topic.tenant, topic.namespace)
        levels.append(ns_doc)
    except NamespaceNotFound:
        pass
    return resolve(levels, config)


def check_new_schema(
    policies: SchemaPolicies, new: SchemaInfo, *, upload: bool = False
) -> Callable[[list[SchemaVersion]], None]:
    """The check ``SchemaRegistry.add`` runs before adding ``new`` as a version: the auto-update
    rule (not for an admin upload, which is how a schema gets in when auto-update is off), then
    the strategy against the live versions."""

    def check(live: list[SchemaVersion]) -> None:
        if not upload and not policies.auto_update:
            raise IncompatibleSchema(AUTO_UPDATE_DISABLED)
        check_compatible(new, [v.info for v in live], policies.strategy, [v.version for v in live])

    return check


async def register(
    store: MetadataStore,
    resources: Resources,
    config: BrokerConfig,
    topic: TopicName,
    info: SchemaInfo,
    *,
    upload: bool = False,
) -> int:
    """R119's steps 1-3 for ``info`` on ``topic``: its version, existing or new."""
    registry = SchemaRegistry(store)
    known = await registry.version_of(topic, info)
    if known is not None:  # the common case (every reconnection): one read, no policy needed
        return known
    policies = await effective_policies(resources, config, topic)
    version, _ = await registry.add(topic, info, check_new_schema(policies, info, upload=upload))
    return version


def is_idle(topic: AnyTopic) -> bool:
    """No producers, no consumers and nothing stored (R120): a consumer's schema may be registered."""
    if topic.producers:
        return False
    if any(sub.dispatcher.consumers for sub in topic.subscriptions.values()):
        return False
    return not (isinstance(topic, PersistentTopic) and topic.ml.total_entries > 0)


async def admit_producer(
    store: MetadataStore, resources: Resources, config: BrokerConfig, name: TopicName, schema: SchemaInfo | None
) -> int | None:
    """R119: the version a producer with ``schema`` writes with, or None without a schema;
    ``IncompatibleSchema`` when it is refused."""
    if schema is not None:
        return await register(store, resources, config, name, schema)
    if not await SchemaRegistry(store).live(name):  # the common case: one read, no policy needed
        return None
    if (await effective_policies(resources, config, name)).validation_enforced:
        raise IncompatibleSchema(
            f"Producer without a schema refused: topic {name} has a schema and schemaValidationEnforced is on"
        )
    return None


async def admit_consumer(
    store: MetadataStore,
    resources: Resources,
    config: BrokerConfig,
    name: TopicName,
    topic: AnyTopic,
    schema: SchemaInfo | None,
) -> None:
    """R120: a consumer (or reader) with ``schema``; ``IncompatibleSchema`` when it is refused."""
    if schema is None:
        return  # bytes read anything
    registry = SchemaRegistry(store)
    live = await registry.live(name)
    if not live:
        if is_idle(topic):
            await register(store, resources, config, name, schema)
        return
    if any(v.info.same_schema(schema) for v in live):
        return
    policies = await effective_policies(resources, config, name)
    check_reader(schema, [v.info for v in live], policies.strategy, [v.version for v in live])
