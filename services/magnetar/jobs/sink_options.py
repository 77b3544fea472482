"""The options of the ``magnetar`` sink, the layout of the frame it writes, and the check that a
target topic deduplicates (what the sink's exactly-once rests on; jobs/topic_writer.py).

Checked on the driver when the query or write starts, so that a wrong option or column fails at
once with one line, before any task runs; then pickled to the tasks as plain data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructType, TimestampType

from magnetar.jobs.admin_client import AdminClient, AdminError, topic_path
from magnetar.jobs.credentials import JobCredentials
from magnetar.protocol.topic_name import TopicName

DEDUP_MODES = ("check", "enable", "off")
SCHEMA_TYPES = ("AVRO", "JSON")


def _first(options: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = options.get(name)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def _int_option(options: Mapping[str, Any], name: str, default: int) -> int:
    raw = _first(options, name)
    try:
        value = default if raw is None else int(raw)
    except ValueError:
        raise ValueError(f"the magnetar sink's option {name} is an integer, not {raw!r}") from None
    if value < 1:
        raise ValueError(f"the magnetar sink's option {name} must be at least 1, not {value}")
    return value


@dataclass(frozen=True)
class Columns:
    """Where each column the sink uses is in a row (None: absent) and how to read it."""

    value: int
    value_kind: str  # "binary", "string" or "struct"
    key: int | None = None
    properties: int | None = None
    event_time: int | None = None
    event_time_kind: str = "timestamp"  # or "long"
    topic: int | None = None

    @classmethod
    def of(cls, schema: StructType, *, typed: bool, topic_option: bool) -> Columns:
        """The layout of ``schema``, or a ``ValueError`` naming the column that is missing or wrong."""
        names = schema.fieldNames()
        types = {f.name: f.dataType for f in schema.fields}

        def wrong(name: str, want: str) -> ValueError:
            return ValueError(
                f"the magnetar sink's column {name} must be {want}, not {types[name].simpleString()} (cast it)"
            )

        value_name = "value" if "value" in types else "payload" if "payload" in types else None
        if value_name is None:
            raise ValueError(f"the magnetar sink needs a column value (or payload); the columns are {', '.join(names)}")
        vt = types[value_name]
        if typed:
            if not isinstance(vt, StructType):
                raise wrong(value_name, "a struct (valueSchema is set)")
            kind = "struct"
        elif isinstance(vt, BinaryType):
            kind = "binary"
        elif isinstance(vt, StringType):
            kind = "string"
        else:
            raise wrong(value_name, "binary or string (or a struct with the option valueSchema)")
        key = props = event = topic = None
        event_kind = "timestamp"
        if "key" in types:
            if not isinstance(types["key"], StringType):
                raise wrong("key", "a string")
            key = names.index("key")
        if "properties" in types:
            pt = types["properties"]
            if not (
                isinstance(pt, MapType) and isinstance(pt.keyType, StringType) and isinstance(pt.valueType, StringType)
            ):
                raise wrong("properties", "map<string,string>")
            props = names.index("properties")
        if "event_time" in types:
            et = types["event_time"]
            if isinstance(et, LongType):
                event_kind = "long"
            elif not isinstance(et, TimestampType):
                raise wrong("event_time", "a timestamp or a long (epoch milliseconds)")
            event = names.index("event_time")
        if "topic" in types and not topic_option:
            if not isinstance(types["topic"], StringType):
                raise wrong("topic", "a string")
            topic = names.index("topic")
        if topic is None and not topic_option:
            raise ValueError("the magnetar sink needs the option topic or a column topic (the row's target)")
        return cls(names.index(value_name), kind, key, props, event, event_kind, topic)


@dataclass(frozen=True)
class SinkOptions:
    """The options of one write, checked on the driver; pickled to the tasks, so plain data."""

    service_url: str
    admin_url: str | None
    topic: str | None
    columns: Columns
    writer_id: str | None = None
    deduplication: str = "check"
    value_schema: str | None = None  # an Avro definition as JSON text, or "topic"
    value_schema_type: str = "AVRO"
    send_timeout_ms: int = 30000
    batching_max_messages: int = 1000
    max_pending_messages: int = 1000
    producer_busy_timeout_ms: int = 60000
    credentials: JobCredentials = field(default_factory=JobCredentials)

    @classmethod
    def parse(cls, options: Mapping[str, Any], schema: StructType) -> SinkOptions:
        service_url = _first(options, "serviceUrl", "service.url")
        if service_url is None:
            raise ValueError("the magnetar sink needs the option serviceUrl (a broker's magnetar://host:6650)")
        dedup = (_first(options, "deduplication") or "check").lower()
        if dedup not in DEDUP_MODES:
            raise ValueError(
                f"the magnetar sink's option deduplication is one of {', '.join(DEDUP_MODES)}, not {dedup!r}"
            )
        admin_url = _first(options, "adminUrl", "admin.url")
        if admin_url is None and dedup != "off":
            raise ValueError(
                "the magnetar sink needs the option adminUrl (a broker's http://host:8080) to check the target's "
                "deduplication, or deduplication=off (at least once)"
            )
        value_schema = _first(options, "valueSchema")
        schema_type = (_first(options, "valueSchemaType") or "AVRO").upper()
        if schema_type not in SCHEMA_TYPES:
            raise ValueError(f"the magnetar sink's option valueSchemaType is AVRO or JSON, not {schema_type!r}")
        if value_schema is not None and value_schema != "topic":
            try:
                json.loads(value_schema)
            except ValueError as exc:
                raise ValueError(
                    f"the magnetar sink's option valueSchema is an Avro definition in JSON: {exc}"
                ) from None
        topic = _first(options, "topic")
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            topic=topic,
            columns=Columns.of(schema, typed=value_schema is not None, topic_option=topic is not None),
            writer_id=_first(options, "writerId"),
            deduplication=dedup,
            value_schema=value_schema,
            value_schema_type=schema_type,
            send_timeout_ms=_int_option(options, "sendTimeoutMs", 30000),
            batching_max_messages=_int_option(options, "batchingMaxMessages", 1000),
            max_pending_messages=_int_option(options, "maxPendingMessages", 1000),
            producer_busy_timeout_ms=_int_option(options, "producerBusyTimeoutMs", 60000),
            credentials=JobCredentials.from_options(options),
        )

    def admin(self) -> AdminClient:
        assert self.admin_url is not None
        return AdminClient(
            self.admin_url, token=self.credentials.admin_params(), ssl_context=self.credentials.admin_ssl_context()
        )


def ensure_deduplication(options: SinkOptions, topic: str) -> None:
    """Refuse (or, with ``deduplication=enable``, switch on) a target without deduplication.

    The effective setting is Pulsar's: the topic's policy, else its namespace's, else the broker's
    default (seen in a loaded topic's stats as ``deduplicationStatus``). ``enable`` sets the
    namespace's policy (a topic policy needs the topic to exist), or the topic's when the topic
    itself has it off. An unknown namespace is refused here, naming it."""
    if options.deduplication == "off":
        return
    name = TopicName.parse(topic)
    admin = options.admin()
    namespace = f"{name.tenant}/{name.namespace}"
    path = topic_path(topic)
    try:
        on_topic = admin.get(f"/admin/v2/{path}/deduplicationEnabled", ok_missing=True)
        on_namespace = admin.get(f"/admin/v2/namespaces/{namespace}/deduplication")
        if on_topic is True or (on_topic is None and on_namespace is True):
            return
        if on_topic is None and on_namespace is None:
            stats = admin.get(f"/admin/v2/{path}/stats", ok_missing=True) or {}
            if stats.get("deduplicationStatus") == "Enabled":
                return
        if options.deduplication == "enable":
            if on_topic is False:
                admin.post(f"/admin/v2/{path}/deduplicationEnabled", True)
            else:
                admin.post(f"/admin/v2/namespaces/{namespace}/deduplication", True)
            return
    except AdminError as exc:
        raise ValueError(f"the magnetar sink cannot publish to {topic}: {exc.reason}") from None
    where = (
        f"`magnetar-admin topics set-deduplication {topic} --enable`"
        if on_topic is False
        else f"`magnetar-admin namespaces set-deduplication {namespace} --enable`"
    )
    raise ValueError(
        f"the magnetar sink writes exactly once only to a topic with deduplication, and {topic} has it off: run "
        f"{where}, or set the sink's option deduplication=enable (or deduplication=off: at least once)"
    )
