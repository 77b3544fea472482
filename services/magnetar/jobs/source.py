"""The ``magnetar`` PySpark data source: topics read straight from the bookies, in parallel.

    spark.read.format("magnetar").option("adminUrl", "http://broker:8080").option("topic", t).load()

Spark 4's Python data source API (``pyspark.sql.datasource``). Planning runs once, on the driver
(``MagnetarReader.partitions``): the admin API names the ledgers of every partition topic and the
bookies holding them (``topic_plan``), the pushed-down filters drop what cannot match
(``pushdown``), and each remaining ledger range becomes one ``InputPartition``. Each Spark task then
reads its range from the bookies over TCP (``ledger_reads``: a replica of each entry's write set,
CRC-checked, failing over to another replica) and decodes the entries into rows (``rows``), handed
to Spark as Arrow record batches. The brokers are asked only for metadata, never for the data.

Options: ``adminUrl`` (required); one of ``topic`` / ``topics`` (comma-separated) / ``namespace``;
``startAfter`` and ``endAt`` (JSON ``{partition topic: "ledger:entry"}``, exclusive / inclusive);
``entriesPerPartition`` (default 5000); ``publishTimeSlackMs`` (see ``pushdown``, default 1000);
``authPluginClassName`` / ``authParams`` (Pulsar's Spark connector's names, also with its
``pulsar.client.`` prefix; default: the ``MAGNETAR_AUTH_TOKEN*`` environment, jobs/credentials.py)
for the admin API and the bookies; ``tlsTrustCertsFilePath`` (the same way) for TLS bookies and
an ``https://`` admin URL.
Rows are durable ones only: up to each topic's ``lastConfirmedEntry`` when the read was planned.

Typed values (``value_schema``): when a topic read has an AVRO or JSON schema (the registry's
``GET /admin/v2/schemas/{tenant}/{ns}/{topic}/schemas``), two columns follow the ones above:
``schema_version`` (int, the writer version of the message's entry; null without one) and
``value``, the message decoded with that version into the merge of every live version (a struct
for a record schema; fields a version lacks are null, int->long and float->double widen, any
other type change fails the read, naming the field). ``decodeSchema`` (default ``true``):
``false`` keeps the raw columns only, for a topic with a schema too. Without a schema (bytes
topics), the columns are the raw ones either way.

Filter pushdown needs ``spark.sql.python.filterPushdown.enabled=true`` (Spark refuses a reader
that implements ``pushFilters`` otherwise); ``enable_pushdown(spark)`` sets it, and the sessions
of ``magnetar.jobs.session`` should call it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
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

from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.credentials import JobCredentials
from magnetar.jobs.ledger_reads import RangeReader
from magnetar.jobs.pushdown import DEFAULT_PUBLISH_TIME_SLACK_MS, Pushed, prune, take_filters
from magnetar.jobs.rows import COLUMNS, RowColumns
from magnetar.jobs.topic_plan import (
    DEFAULT_ENTRIES_PER_RANGE,
    LedgerRange,
    ReadPlan,
    parse_positions,
    plan_reads,
    resolve_topics,
)
from magnetar.jobs.value_schema import SCHEMA_VERSION_COLUMN, VALUE_COLUMN, TypedValues, ValueDecoder, typed_values

FORMAT = "magnetar"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
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


def enable_pushdown(spark: Any) -> Any:
    """Let Spark push filters to Python data sources (off by default in Spark 4); returns ``spark``."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    return spark


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

    @classmethod
    def parse(cls, options: Any) -> ReadOptions:
        def opt(name: str) -> str | None:
            value = options.get(name)
            return None if value is None or str(value).strip() == "" else str(value)

        admin_url = opt("adminUrl")
        if admin_url is None:
            raise ValueError("the magnetar source needs the option adminUrl (a broker's http://host:port)")
        chosen = [n for n in ("topic", "topics", "namespace") if opt(n) is not None]
        if len(chosen) != 1:
            raise ValueError("the magnetar source needs exactly one of the options topic, topics, namespace")
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
        topics = resolve_topics(admin, topic=self.topic, topics=self.topics, namespace=self.namespace)
        return typed_values(admin, topics)


class MagnetarDataSource(DataSource):
    """``format("magnetar")``: a batch read of topics (see the module docstring for the options)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return typed_schema(ReadOptions.parse(self.options).values())

    def reader(self, schema: StructType) -> MagnetarReader:
        options = ReadOptions.parse(self.options)
        values = options.values()
        expected = typed_schema(values)
        if schema != expected:
            raise ValueError(
                f"the magnetar source's columns are {expected.simpleString()}, not {schema.simpleString()} "
                "(a schema version added while the read was planned changes them: load again)"
            )
        return MagnetarReader(options, values)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("magnetar")``: topics read as they grow (jobs/stream_reader.py)."""
        from magnetar.jobs.stream_reader import MagnetarStreamReader

        return MagnetarStreamReader.create(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write.format("magnetar")``: rows published to topics (jobs/topic_writer.py)."""
        from magnetar.jobs.topic_writer import TopicWriter

        return TopicWriter.create(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream.format("magnetar")``: micro-batches published exactly once (jobs/topic_writer.py)."""
        from magnetar.jobs.topic_writer import TopicStreamWriter

        return TopicStreamWriter.create(self.options, schema, overwrite)


class MagnetarReader(DataSourceReader):
    """Plans (driver) and reads (executors) one ``load()``; pickled to the executors, so plain data."""

    def __init__(self, options: ReadOptions, values: TypedValues | None = None) -> None:
        self.options = options
        self.values = values
        self.pushed = Pushed(slack_ms=options.publish_time_slack_ms)

    def pushFilters(self, filters: list[Any]) -> Any:
        return list(take_filters(filters, self.pushed))

    def plan(self) -> ReadPlan:
        """The read plan before pushdown (the export uses the same ``plan_reads``)."""
        o = self.options
        admin = o.admin()
        topics = resolve_topics(admin, topic=o.topic, topics=o.topics, namespace=o.namespace)
        return plan_reads(
            admin, topics, start_after=o.start_after, end_at=o.end_at, entries_per_range=o.entries_per_partition
        )

    def partitions(self) -> Sequence[InputPartition]:
        ranges = prune(self.plan().ranges, self.pushed)
        if not ranges:
            return [RangePartition(None)]  # Spark wants at least one partition; it reads nothing
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        rng = getattr(partition, "range", None)
        if rng is None:
            return iter(())
        keep = self.pushed.keep_entry if self.pushed.filters_entries else None
        values = self.values.for_topic(rng.topic) if self.values is not None else None
        return read_range_batches(rng, keep=keep, credentials=self.options.credentials, values=values)


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
