"""What a read of topics is, shared by the batch reader (``source``) and the streaming one
(``stream_reader``): its options, its columns, and one ledger range read as Arrow batches.

Apart from ``source`` so that the streaming reader builds on the batch read without importing
the data source class that makes it (``MagnetarDataSource.streamReader``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.columnar.message_rows import COLUMNS, SCHEMA_VERSION_COLUMN, VALUE_COLUMN, RowColumns
from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.credentials import JobCredentials
from magnetar.jobs.ledger_reads import RangeReader
from magnetar.jobs.pushdown import DEFAULT_PUBLISH_TIME_SLACK_MS
from magnetar.jobs.topic_plan import DEFAULT_ENTRIES_PER_RANGE, LedgerRange, parse_positions, resolve_topics
from magnetar.jobs.value_schema import TypedValues, ValueDecoder, typed_values
from magnetar.protocol.topic_name import TopicName

# Rows per Arrow batch handed to Spark: big enough to amortise the per-batch cost, small enough
# to stream a range of large messages without holding it all in memory.
ROWS_PER_BATCH = 8192

SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("ledger_id", LongType()),
        StructField("entry_id", LongType()),
        StructField("batch_index", IntegerType()),
        StructField("publish_time", TimestampType()),
        StructField("event_time", TimestampType()),
        StructField("key", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("payload", BinaryType()),
        StructField("producer_name", StringType()),
        StructField("sequence_id", LongType()),
    ]
)
assert tuple(SCHEMA.fieldNames()) == COLUMNS


def typed_schema(values: TypedValues | None) -> StructType:
    """The columns of a read: ``SCHEMA``, then ``schema_version`` and ``value`` when typed."""
    if values is None:
        return SCHEMA
    return StructType(
        [
            *SCHEMA.fields,
            StructField(SCHEMA_VERSION_COLUMN, IntegerType()),
            StructField(VALUE_COLUMN, values.spark_type()),
        ]
    )


@dataclass
class RangePartition(InputPartition):
    """One Spark task: one ledger range (``None`` only for the placeholder of an empty read)."""

    range: LedgerRange | None


@dataclass(frozen=True)
class ReadOptions:
    """The options of one read, checked when the reader is made (before any network call)."""

    admin_url: str
    topic: str | None
    topics: str | None
    namespace: str | None
    start_after: dict[str, tuple[int, int]]
    end_at: dict[str, tuple[int, int]]
    entries_per_partition: int
    publish_time_slack_ms: int
    credentials: JobCredentials = field(default_factory=JobCredentials)
    decode_schema: bool = True
    topics_pattern: str | None = None

    @classmethod
    def parse(cls, options: Any) -> ReadOptions:
        def opt(name: str) -> str | None:
            value = options.get(name)
            return None if value is None or str(value).strip() == "" else str(value)

        admin_url = opt("adminUrl")
        if admin_url is None:
            raise ValueError("the magnetar source needs the option adminUrl (a broker's http://host:port)")
        chosen = [n for n in ("topic", "topics", "namespace", "topicsPattern") if opt(n) is not None]
        if len(chosen) != 1:
            raise ValueError(
                "the magnetar source needs exactly one of the options topic, topics, namespace, topicsPattern"
            )
        pattern = opt("topicsPattern")
        if pattern is not None:
            pattern_namespace(pattern)  # refused here, before any network call
        try:
            per_partition = int(opt("entriesPerPartition") or DEFAULT_ENTRIES_PER_RANGE)
            slack = int(opt("publishTimeSlackMs") or DEFAULT_PUBLISH_TIME_SLACK_MS)
        except ValueError as exc:
            raise ValueError(f"entriesPerPartition and publishTimeSlackMs are integers: {exc}") from None
        if per_partition < 1:
            raise ValueError("entriesPerPartition must be at least 1")
        decode = (opt("decodeSchema") or "true").lower()
        if decode not in ("true", "false"):
            raise ValueError(f"decodeSchema is true or false, not {opt('decodeSchema')!r}")
        return cls(
            admin_url=admin_url,
            topic=opt("topic"),
            topics=opt("topics"),
            namespace=opt("namespace"),
            start_after=parse_positions(opt("startAfter"), "startAfter"),
            end_at=parse_positions(opt("endAt"), "endAt"),
            entries_per_partition=per_partition,
            publish_time_slack_ms=slack,
            credentials=JobCredentials.from_options(options),
            decode_schema=decode == "true",
            topics_pattern=pattern,
        )

    def admin(self) -> AdminClient:
        return AdminClient(
            self.admin_url, token=self.credentials.admin_params(), ssl_context=self.credentials.admin_ssl_context()
        )

    def values(self) -> TypedValues | None:
        """The typed ``value`` column of this read (None: raw columns only)."""
        if not self.decode_schema:
            return None
        admin = self.admin()
        return typed_values(admin, self.resolve(admin))

    def resolve(self, admin: AdminClient) -> list[str]:
        """The partition topics this read names, as they are now (see ``resolve_topics``)."""
        if self.topics_pattern is not None:
            return topics_matching(admin, self.topics_pattern)
        return resolve_topics(admin, topic=self.topic, topics=self.topics, namespace=self.namespace)


def pattern_namespace(pattern: str) -> str:
    """The namespace a ``topicsPattern`` lists (``persistent://tenant/ns/<regex>``, as Pulsar's)."""
    domain, _, rest = (pattern if "://" in pattern else "persistent://" + pattern).partition("://")
    parts = rest.split("/", 2)
    if domain != "persistent" or len(parts) < 3 or not parts[0] or not parts[1]:
        raise ValueError(f"topicsPattern is persistent://tenant/namespace/<regex>, not {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"topicsPattern {pattern!r} is not a regular expression: {exc}") from None
    return f"{parts[0]}/{parts[1]}"


def topics_matching(admin: AdminClient, pattern: str) -> list[str]:
    """The partition topics of the pattern's namespace whose full name, or whose partitioned
    topic's name, the pattern matches whole (Pulsar's pattern subscription)."""
    full = pattern if "://" in pattern else "persistent://" + pattern
    regex = re.compile(full)
    out = []
    for name in resolve_topics(admin, namespace=pattern_namespace(pattern)):
        base = str(TopicName.parse(name).partitioned_base)
        if regex.fullmatch(name) or regex.fullmatch(base):
            out.append(name)
    return out


def read_range_batches(
    rng: LedgerRange,
    *,
    keep: Any = None,
    rows_per_batch: int = ROWS_PER_BATCH,
    credentials: JobCredentials | None = None,
    values: ValueDecoder | None = None,
) -> Iterator[Any]:
    """The rows of ``rng`` as ``pyarrow.RecordBatch``es, streamed window by window.

    A fresh event loop per range (``asyncio.Runner``): a Spark task runs in a Python worker that
    may be reused for other tasks, so nothing of one read's loop or connections may outlive it.
    """
    with asyncio.Runner() as runner:
        reader = RangeReader(rng, security=(credentials or JobCredentials()).bookie_security())
        cols = RowColumns(rng.topic, rng.partition, rng.ledger_id, keep=keep, values=values)
        try:
            for lo, hi in reader.windows():
                for entry in runner.run(reader.read_window(lo, hi)):
                    cols.add(entry)
                if len(cols) >= rows_per_batch:
                    yield cols.flush()
            if len(cols):
                yield cols.flush()
        finally:
            runner.run(reader.close())
