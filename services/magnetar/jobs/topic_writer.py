"""The ``magnetar`` sink: ``df.write.format("magnetar")`` and ``df.writeStream.format("magnetar")``.

    df.writeStream.format("magnetar").option("serviceUrl", "magnetar://broker:6650")
        .option("adminUrl", "http://broker:8080").option("topic", t)
        .option("checkpointLocation", path).start()

Columns (by name; others are ignored, so a frame read from a topic can be written back as it is):
``value`` (or ``payload``): binary or string, required; a struct with ``valueSchema``. ``key``
(string, the partition key), ``properties`` (map<string,string>), ``event_time`` (timestamp, or a
long of epoch milliseconds), ``topic`` (string: the row's target when the ``topic`` option is not
given; the option, when given, wins, as in Spark's Kafka sink). Null key / properties / event time
publish none.

Options: ``serviceUrl`` (also Pulsar's Spark connector's ``service.url``; required), ``adminUrl``
(also ``admin.url``; required unless ``deduplication`` is ``off``), ``topic``, ``writerId`` (see
below), ``deduplication`` (``check``, the default: refuse a topic without deduplication, naming the
``magnetar-admin`` command that turns it on; ``enable``: turn it on for the target's namespace
through the admin API; ``off``: no check, at least once; the ``topic`` option's target is checked on
the driver, a ``topic`` column's by each task the first time it meets it), ``valueSchema`` (an Avro
definition as JSON text, or ``topic`` for the target's registered schema; the ``value`` struct is
then encoded with it and the producer publishes under that schema) and ``valueSchemaType``
(``AVRO``, the default, or ``JSON``), ``sendTimeoutMs`` (default 30000), ``batchingMaxMessages``
(default 1000), ``maxPendingMessages`` (default 1000), ``producerBusyTimeoutMs`` (default 60000, see
below), and the credentials as the source's (``authPluginClassName`` / ``authParams`` /
``tlsTrustCertsFilePath`` or the ``MAGNETAR_AUTH_TOKEN*`` environment, jobs/credentials.py).

Exactly once, with broker-side deduplication (``broker/topics/dedup.py``): the broker stores each
message at most once per (producer name, sequence id) and drops one whose sequence id is not
above the highest it stored for that name. Every Spark task publishes under a deterministic
producer name, ``spark-<writerId>-<task partition>`` (one producer per partition of each target
topic, each with that name), and numbers its rows ``(batch id << 32) + row index in the task``.
A streaming query's ``writerId`` defaults to its query id, which a restart from the same
checkpoint keeps; the batch id is the micro-batch's. So when a micro-batch is written again
(a task retried, or the query restarted before the batch was recorded as committed), every
row it already stored carries a sequence id the broker has seen, and is not stored again. A
task first asks the broker for its name's last stored sequence id (``last_sequence_id()``) and
skips the rows at or below it, so that its batches never straddle the boundary (a batch is judged
by its first id). This holds as long as a replayed micro-batch hands each task the same rows in
the same order (a deterministic query: the file, Kafka-like and ``magnetar`` sources with
deterministic transformations do; ``repartition()`` without keys or ``rand()`` do not), and as
long as the broker remembers the name (deduplication not switched off in between, and names idle
for less than ``brokerDeduplicationProducerInactivityTimeoutMinutes``). Two queries writing one
topic need different ``writerId``s (a query id differs anyway).

A batch write (``df.write``) has no batch id: its rows are numbered by their index in the task,
and ``writerId`` defaults to a fresh random id per write, so task retries store nothing twice but
running the same write again publishes again. Give the write a ``writerId`` of its own to make
re-running it store nothing twice (a ``writerId`` names one write: a later write of new rows under
the same id is dropped as duplicates).

A task killed with its driver may leave its producer registered for a moment: a new producer of
the same name is refused (``ProducerBusy``) until the broker notices the closed connection, so
creation is retried for ``producerBusyTimeoutMs``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from magnetar.jobs.sink_options import SinkOptions, ensure_deduplication
from magnetar.jobs.topic_publishing import TaskPublisher

# Spark's local properties of a streaming task (set by MicroBatchExecution / StreamExecution).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
# Rows one task may write per micro-batch: the batch id goes in the bits above.
ROW_BITS = 32


@dataclass
class Published(WriterCommitMessage):
    """What one task did: rows handed to it, rows it sent, rows skipped as already stored."""

    partition: int
    rows: int
    sent: int
    skipped: int


def _task() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the magnetar sink's write runs in a Spark task")
    return context


def _checked(options: Mapping[str, Any], schema: StructType, overwrite: bool) -> SinkOptions:
    """The options of a batch or streaming write, refused at once if they cannot work: overwrite
    mode, or a fixed target topic without deduplication."""
    if overwrite:
        raise ValueError("the magnetar sink appends to topics: mode overwrite is not supported (use append)")
    parsed = SinkOptions.parse(options, schema)
    if parsed.topic is not None:
        ensure_deduplication(parsed, parsed.topic)
    return parsed


class TopicWriter(DataSourceWriter):
    """``df.write.format("magnetar")``: one producer per task and target partition (module docstring)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @classmethod
    def create(cls, options: Mapping[str, Any], schema: StructType, overwrite: bool) -> TopicWriter:
        parsed = _checked(options, schema, overwrite)
        if parsed.writer_id is None:  # a fresh id per write: task retries dedup, a re-run publishes again
            parsed = _with_writer_id(parsed, uuid.uuid4().hex)
        return cls(parsed)

    def write(self, iterator: Iterator[Any]) -> Published:
        context = _task()
        return publish_task(self.options, iterator, partition=context.partitionId(), batch_id=0)


class TopicStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("magnetar")``: each micro-batch exactly once (module docstring)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @classmethod
    def create(cls, options: Mapping[str, Any], schema: StructType, overwrite: bool) -> TopicStreamWriter:
        return cls(_checked(options, schema, overwrite))

    def write(self, iterator: Iterator[Any]) -> Published:
        context = _task()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        options = self.options
        if options.writer_id is None:
            query = context.getLocalProperty(QUERY_ID_PROPERTY)
            if query is None:
                raise RuntimeError("the magnetar sink's streaming task has no query id: give the option writerId")
            options = _with_writer_id(options, query)
        if batch is None:
            raise RuntimeError("the magnetar sink's streaming task has no micro-batch id")
        return publish_task(options, iterator, partition=context.partitionId(), batch_id=int(batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each row is durable when its task ends (the broker acknowledged it)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what was stored stays, and the replay of the batch skips it."""


def _with_writer_id(options: SinkOptions, writer_id: str) -> SinkOptions:
    return replace(options, writer_id=writer_id)


def producer_name(writer_id: str, partition: int) -> str:
    """The producer name of one task's partition: the same on every attempt and restart."""
    return f"spark-{writer_id}-{partition}"


def first_sequence_id(batch_id: int) -> int:
    """The sequence id of a micro-batch's first row in every task (row ``i`` adds ``i``)."""
    if batch_id < 0 or batch_id >= 1 << (63 - ROW_BITS):
        raise ValueError(f"micro-batch id {batch_id} is out of the sink's range")
    return batch_id << ROW_BITS


def publish_task(options: SinkOptions, rows: Iterator[Any], *, partition: int, batch_id: int) -> Published:
    """Publish one task's rows (executor side): the producers, then wait until all are stored."""
    assert options.writer_id is not None
    name = producer_name(options.writer_id, partition)
    with TaskPublisher(options, name, partition) as publisher:
        publisher.publish(rows, first_sequence_id(batch_id))
        publisher.flush()
        return Published(partition, publisher.rows, publisher.sent, publisher.skipped)
