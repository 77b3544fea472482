"""``spark.readStream.format("magnetar")``: topics as a Structured Streaming source.

    spark.readStream.format("magnetar").option("adminUrl", "http://broker:8080")
        .option("topic", "persistent://public/default/events").option("startingOffsets", "earliest").load()

Spark 4's Python streaming data source (``DataSourceStreamReader``). Each micro-batch is a batch
read of the batch source (``source``): the same columns and schema decoding, planned per ledger
range by ``topic_plan.plan_reads`` between the previous batch's end and this one's, and read from
the bookies by the Spark tasks (``source.read_range_batches``). The brokers are asked only for
metadata (internal stats) and to move the query's subscription.

Offsets are per partition topic (``stream_offsets``): the last entry handed to Spark. A batch ends
at each topic's ``lastConfirmedEntry`` at most, so only entries acknowledged to producers are read.
The topics are resolved again for every batch: partitions added to a partitioned topic, and topics
created in a namespace (or matching the pattern), are read from their earliest entry on.

Progress on the brokers: the query owns a durable subscription on every topic it reads, created
when the query starts (or first sees the topic) at its starting position, and moved by ``commit``
to the end of each finished batch (reset-cursor by message id, excluded, as the export's progress,
``export_progress``). So ``magnetar-admin topics stats`` shows a query's backlog like any
consumer's, and retention (the brokers' and the retention sweep's) never removes an entry the
query has not finished. The flip side, as for any subscription: a query stopped for good holds its
backlog until its subscription is deleted.

Options, besides the batch source's ``adminUrl``, ``topic`` / ``topics`` / ``namespace`` / ``topicsPattern``,
``decodeSchema``, ``entriesPerPartition`` and credentials:

- ``startingOffsets``: ``latest`` (the default, as Pulsar's Spark connector for a streaming
  query), ``earliest``, or JSON ``{"topic": "ledger:entry" | "earliest" | "latest"}`` (a position
  is the last entry *not* to read, as ``startAfter``; a topic left out starts at earliest). It
  applies only when a query starts; a restart goes on from the checkpoint.
- ``maxEntriesPerTrigger`` / ``maxBytesPerTrigger``: at most that many entries / bytes (from the
  ledgers' sizes) per micro-batch, shared fairly between the topics. ``Trigger.AvailableNow``
  reads what was confirmed when it started in batches within them; ``Trigger.Once`` lifts them.
- ``failOnDataLoss`` (default ``true``): when entries the query has not read were trimmed (its
  subscription moved ahead or deleted, then retention ran; seen when a batch is planned, or when
  a task finds the ledger of its range deleted since), fail the query with a message naming the
  topic and the missing range; ``false``: log a warning, count the gap in the offset's ``lost``
  (seen in ``query.lastProgress`` sources' ``endOffset``; a gap a task meets is only logged, by
  that task) and go on after it.
- ``predefinedSubscription``: the subscription that holds the progress; otherwise one named
  ``<subscriptionPrefix>-<random>`` (prefix default ``magnetar-stream``) is made when the query
  starts and kept in its checkpointed offsets, so a restart goes on with the same one.

Schema versions registered after the query started decode as null in ``value`` (the columns are
fixed when the query starts); restart the query to take them in.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from magnetar.jobs.admin_client import AdminClient, AdminError, topic_path
from magnetar.jobs.export_progress import ExportProgress
from magnetar.jobs.ledger_reads import EntryUnreadableError
from magnetar.jobs.source_reads import RangePartition, ReadOptions, read_range_batches, typed_schema
from magnetar.jobs.stream_offsets import (
    DataLossError,
    StreamOffset,
    TopicState,
    admit,
    normal_topic,
)
from magnetar.jobs.topic_plan import (
    PLAN_CONCURRENCY,
    LedgerRange,
    Position,
    TopicNotFoundError,
    parse_position,
    plan_reads,
)
from magnetar.jobs.value_schema import TypedValues

log = logging.getLogger(__name__)

DEFAULT_SUBSCRIPTION_PREFIX = "magnetar-stream"
FAIL_HINT = ". Set failOnDataLoss=false to skip what is gone and go on with the rest."


def _flag(value: str | None, name: str, default: bool) -> bool:
    text = (value or str(default)).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name} is true or false, not {value!r}")
    return text == "true"


def _limit(value: str | None, name: str) -> int | None:
    if value is None or value.strip() == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name} is a whole number, not {value!r}") from None
    if n < 1:
        raise ValueError(f"{name} must be at least 1, not {n}")
    return n


@dataclass(frozen=True)
class StreamOptions:
    """The options of one streaming read, checked when the query starts (module docstring)."""

    read: ReadOptions
    starting: str | dict[str, str]
    max_entries: int | None
    max_bytes: int | None
    fail_on_data_loss: bool
    subscription: str | None
    subscription_prefix: str

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StreamOptions:
        def opt(name: str) -> str | None:
            value = options.get(name)
            return None if value is None or str(value).strip() == "" else str(value)

        for batch_only in ("startAfter", "endAt"):
            if opt(batch_only) is not None:
                raise ValueError(f"{batch_only} is for batch reads; a streaming read starts at startingOffsets")
        read = ReadOptions.parse(options)
        raw = (opt("startingOffsets") or "latest").strip()
        starting: str | dict[str, str]
        if raw.lower() in ("earliest", "latest"):
            starting = raw.lower()
        else:
            try:
                doc = json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"startingOffsets is earliest, latest or a JSON object: {exc}") from None
            if not isinstance(doc, dict):
                raise ValueError("startingOffsets is earliest, latest or a JSON object {topic: 'ledger:entry'}")
            starting = {}
            for topic, pos in doc.items():
                text = str(pos).strip().lower()
                if text not in ("earliest", "latest"):
                    parse_position(text)  # refused here, before the query runs
                starting[normal_topic(str(topic))] = text
        return cls(
            read=read,
            starting=starting,
            max_entries=_limit(opt("maxEntriesPerTrigger"), "maxEntriesPerTrigger"),
            max_bytes=_limit(opt("maxBytesPerTrigger"), "maxBytesPerTrigger"),
            fail_on_data_loss=_flag(opt("failOnDataLoss"), "failOnDataLoss", True),
            subscription=opt("predefinedSubscription"),
            subscription_prefix=opt("subscriptionPrefix") or DEFAULT_SUBSCRIPTION_PREFIX,
        )


class QueryCursor(ExportProgress):
    """The query's subscription on its topics: the export's progress calls under another name."""

    def __init__(self, admin: AdminClient, subscription: str) -> None:
        self.admin = admin
        self.subscription = subscription

    def create_at(self, topic: str, after: Position) -> None:
        """Make the subscription with its mark-delete position on ``after`` (409: it exists)."""
        path = f"{topic_path(topic)}/subscription/{urllib.parse.quote(self.subscription, safe='')}"
        body = {"ledgerId": after[0], "entryId": after[1] + 1} if after[0] >= 0 else {"ledgerId": -1, "entryId": -1}
        try:
            self.admin.put(path, body)
        except AdminError as exc:
            if exc.status != 409:
                raise


@dataclass
class StreamPartition(RangePartition):
    """One Spark task of a micro-batch: one ledger range (None: the placeholder of an empty batch)."""


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans the micro-batches (driver, in one long-lived Python process) and reads their ranges
    (executors, pickled: so plain data, no client objects kept)."""

    def __init__(self, options: StreamOptions, values: TypedValues | None) -> None:
        self.options = options
        self.values = values
        self._subscription = options.subscription
        self._committed: dict[str, Position] = {}
        self._until: dict[str, Position] | None = None  # Trigger.AvailableNow: what was there at its start

    @classmethod
    def create(cls, options: Mapping[str, Any], schema: StructType) -> MagnetarStreamReader:
        parsed = StreamOptions.parse(options)
        values = parsed.read.values()
        expected = typed_schema(values)
        if schema != expected:
            raise ValueError(
                f"the magnetar source's columns are now {expected.simpleString()}, not {schema.simpleString()} "
                "(a schema version was added since the query started: start it again)"
            )
        return cls(parsed, values)

    # ------------------------------------------------------------------ driver
    def _admin(self) -> AdminClient:
        return self.options.read.admin()

    def _topics(self, admin: AdminClient) -> list[str]:
        return self.options.read.resolve(admin)

    def _states(self, admin: AdminClient, topics: list[str]) -> dict[str, TopicState]:
        def stats_of(topic: str) -> dict[str, Any]:
            try:
                return admin.internal_stats(topic)
            except AdminError as exc:
                if exc.status == 404:
                    raise TopicNotFoundError(f"topic {topic} does not exist ({exc.reason})") from None
                raise

        with ThreadPoolExecutor(max_workers=PLAN_CONCURRENCY) as pool:
            stats = list(pool.map(stats_of, topics))
        return {t: TopicState.from_stats(s) for t, s in zip(topics, stats, strict=True)}

    def _subscription_name(self, offset: StreamOffset | None = None) -> str:
        if self._subscription is None:
            self._subscription = (
                offset.subscription
                if offset is not None
                else f"{self.options.subscription_prefix}-{uuid.uuid4().hex[:16]}"
            )
        return self._subscription

    def _ensure(self, admin: AdminClient, states: Mapping[str, TopicState], positions: Mapping[str, Position]) -> None:
        cursor = QueryCursor(admin, self._subscription_name())
        for topic, state in states.items():
            if cursor.subscription not in state.cursors:
                cursor.create_at(topic, positions[topic])

    def initialOffset(self) -> dict[str, Any]:
        admin = self._admin()
        topics = self._topics(admin)
        states = self._states(admin, topics)
        starting = self.options.starting
        positions: dict[str, Position] = {}
        for topic, state in states.items():
            how = starting if isinstance(starting, str) else starting.get(topic, "earliest")
            if how == "earliest":
                positions[topic] = state.earliest()
            elif how == "latest":
                positions[topic] = state.confirmed
            else:
                positions[topic] = parse_position(how)
        self._ensure(admin, states, positions)
        return StreamOffset(self._subscription_name(), positions).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read what is confirmed now (in batches within the read limits),
        nothing published later and no topic that appears later, then let the query end."""
        admin = self._admin()
        self._until = {t: state.confirmed for t, state in self._states(admin, self._topics(admin)).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries is not None:
            return ReadMaxRows(self.options.max_entries)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = StreamOffset.from_json(start)
        subscription = self._subscription_name(begin)
        admin = self._admin()
        # Topics resolved again each batch; one no longer there keeps its position, unread.
        states = self._states(admin, self._topics(admin))
        if self._until is not None:
            until = self._until
            states = {t: replace(st, confirmed=min(st.confirmed, until[t])) for t, st in states.items() if t in until}
        starts: dict[str, Position] = {}
        lost = dict(begin.lost)
        losses: list[str] = []
        for topic, state in states.items():
            after = begin.positions.get(topic)
            if after is None:
                starts[topic] = state.earliest()  # a new partition or topic: from its first entry
                continue
            resume, loss = state.check_loss(topic, after, subscription)
            if loss is not None:
                losses.append(loss)
                lost[topic] = lost.get(topic, 0) + 1
            starts[topic] = resume
        if losses and self.options.fail_on_data_loss:
            raise DataLossError("; ".join(losses) + FAIL_HINT)
        for loss in losses:
            log.warning("magnetar stream: data loss skipped (failOnDataLoss=false): %s", loss)
        self._ensure(admin, states, starts)
        # Spark plans a batch only once the one before it has been written and logged as committed,
        # so everything up to ``start`` is landed: the subscription moves there now. Spark's own
        # ``commit`` of that batch comes only when it plans the next batch with data, so without
        # this an idle query's subscription (and its backlog) would stay one batch behind.
        self._move(subscription, {t: p for t, p in begin.positions.items() if t in states and starts.get(t) == p})
        unlimited = isinstance(limit, ReadAllAvailable)
        max_entries = None if unlimited else self.options.max_entries
        max_bytes = None if unlimited else self.options.max_bytes
        if isinstance(limit, ReadMaxRows):
            max_entries = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        ends = admit(states, starts, max_entries=max_entries, max_bytes=max_bytes)
        positions = dict(begin.positions)
        positions.update(ends)
        return StreamOffset(subscription, positions, lost).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        moved = [t for t, p in finish.positions.items() if begin.positions.get(t) != p]
        if not moved:
            return []
        plan = plan_reads(
            self._admin(),
            sorted(moved),
            start_after={t: begin.positions.get(t, (-1, -1)) for t in moved},
            end_at={t: finish.positions[t] for t in moved},
            entries_per_range=self.options.read.entries_per_partition,
        )
        return [StreamPartition(r) for r in plan.ranges]

    def commit(self, end: dict[str, Any]) -> None:
        """Move the query's subscription to the end of the finished batch, topic by topic. A broker
        that cannot be reached now only delays it: the next commit moves it further."""
        offset = StreamOffset.from_json(end)
        self._move(self._subscription_name(offset), offset.positions)

    def _move(self, subscription: str, positions: Mapping[str, Position]) -> None:
        cursor = QueryCursor(self._admin(), subscription)
        for topic, pos in positions.items():
            if self._committed.get(topic) == pos:
                continue
            try:
                try:
                    cursor.commit(topic, pos)
                except AdminError as exc:
                    if exc.status != 404:
                        raise
                    cursor.create_at(topic, pos)  # deleted meanwhile: made again where the query is
                self._committed[topic] = pos
            except AdminError as exc:
                log.warning("magnetar stream: cannot move subscription %s on %s: %s", cursor.subscription, topic, exc)

    # ------------------------------------------------------------------ executors
    def read(self, partition: InputPartition) -> Iterator[Any]:
        rng = getattr(partition, "range", None)
        if rng is None:
            return iter(())
        return self._read_range(rng)

    def _read_range(self, rng: LedgerRange) -> Iterator[Any]:
        """The range's rows; a ledger deleted since the batch was planned is data loss (the
        bookies no longer have it), anything else unreadable fails the task as in a batch read."""
        values = self.values.for_topic(rng.topic) if self.values is not None else None
        try:
            yield from read_range_batches(rng, credentials=self.options.read.credentials, values=values)
        except EntryUnreadableError as exc:
            if not self._ledger_gone(rng):
                raise
            loss = (
                f"topic {rng.topic}: entries from {rng.ledger_id}:{rng.first_entry} to {rng.ledger_id}:"
                f"{rng.last_entry} are gone (ledger {rng.ledger_id} was deleted before the query read it)"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(loss + FAIL_HINT) from exc
            log.warning("magnetar stream: data loss skipped (failOnDataLoss=false): %s", loss)

    def _ledger_gone(self, rng: LedgerRange) -> bool:
        try:
            ledgers = self._admin().internal_stats(rng.topic).get("ledgers", [])
        except AdminError as exc:
            return exc.status == 404
        return all(int(d["ledgerId"]) != rng.ledger_id for d in ledgers)
