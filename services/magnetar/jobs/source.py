"""The ``magnetar`` PySpark data source: topics read straight from the bookies, in parallel.

    spark.read.format("magnetar").option("adminUrl", "http://broker:8080").option("topic", t).load()

Spark 4's Python data source API (``pyspark.sql.datasource``). Planning runs once, on the driver
(``MagnetarReader.partitions``): the admin API names the ledgers of every partition topic and the
bookies holding them (``topic_plan``), the pushed-down filters drop what cannot match
(``pushdown``), and each remaining ledger range becomes one ``InputPartition``. Each Spark task then
reads its range from the bookies over TCP (``ledger_reads``: a replica of each entry's write set,
CRC-checked, failing over to another replica) and decodes the entries into rows (``columnar.message_rows``), handed
to Spark as Arrow record batches. The brokers are asked only for metadata, never for the data.

Options: ``adminUrl`` (required); one of ``topic`` / ``topics`` (comma-separated) / ``namespace`` /
``topicsPattern`` (``persistent://tenant/ns/<regex>``, matched whole against the namespace's topics);
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

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from magnetar.jobs.pushdown import Pushed, prune, take_filters
from magnetar.jobs.source_reads import SCHEMA as SCHEMA
from magnetar.jobs.source_reads import RangePartition as RangePartition
from magnetar.jobs.source_reads import ReadOptions as ReadOptions
from magnetar.jobs.source_reads import read_range_batches as read_range_batches
from magnetar.jobs.source_reads import typed_schema as typed_schema
from magnetar.jobs.topic_plan import ReadPlan, plan_reads
from magnetar.jobs.value_schema import TypedValues

FORMAT = "magnetar"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def enable_pushdown(spark: Any) -> Any:
    """Let Spark push filters to Python data sources (off by default in Spark 4); returns ``spark``."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    return spark


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
        topics = o.resolve(admin)
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
