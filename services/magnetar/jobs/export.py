"""The topic export: a topic (or every topic of a namespace) to Parquet, incremental and idempotent.

One run, per partition topic T of the export named N:

1. **plan** — make sure the subscription ``magnetar-export-N`` exists on T (at the earliest message
   when it is new), read its mark-delete position S(T) (the last entry already exported), and plan
   the read of (S(T), E(T)] where E(T) is T's ``lastConfirmedEntry`` now (``topic_plan``). T's run
   id is R(T) = hash(N, T, S(T)): a function of the start alone, so a re-run after a crash, which
   starts from the same S(T), has the same R(T). Then clean up after a crashed run: delete the
   committed files of every R(T) listed in a leftover manifest, and empty the staging area;
2. **write** — Spark writes the rows of all pending topics to ``_magnetar/N/staging/run=R/date=D/``
   (``date``: the publish date in UTC);
3. **move** — write the manifest (every destination, per run), then move the staged files of R(T)
   to ``date=D/R(T)-n.parquet`` (``parquet_commit``);
4. **commit** — move each T's subscription to E(T) (reset-cursor with ``isExcluded``: mark-delete
   exactly on E(T)), then drop the manifest and the staging area.

Why a crash anywhere loses nothing and duplicates nothing (readers see only ``date=*/`` files;
"the cursor" is T's subscription; each step of a re-run is the same as the first run's):

- before the write, or in the middle of it: nothing was moved, the cursor is at S(T). Only staging
  holds (partial) files, and the re-run empties staging first, then exports (S(T), E'(T)] in full.
- in the middle of the moves: the manifest was written before the first move, so it names every
  file of R(T) that may be in place. The cursor is still at S(T), so the re-run computes the same
  R(T), deletes those files, and exports (S(T), E'(T)] anew: the rows of the partial commit are
  written once, by the re-run. (A manifest cut short while being written is ignored: no move
  starts before it is complete.)
- after the moves, before the cursor commit: the same — all of R(T)'s files are deleted and
  rewritten. With several topics, a crash between two cursor commits leaves some cursors moved
  and some not: for a moved one, S(T) is now E(T) and R(T) changes, so its files are kept (they
  are its committed data); for the others R(T) is unchanged and their files are redone. What the
  broker says the cursor is decides, never what the job believes it did (an answer lost after
  the broker applied a reset is harmless).
- after the cursor commit (before the manifest and staging are dropped): every R(T) in the
  manifest is stale (S(T) moved on), so the re-run deletes nothing; it drops the manifest and
  staging and exports only what is new.

Nothing is lost because E(T) is only ever committed after every row up to it is in its final
place, and the subscription keeps retention from trimming anything past the cursor. Entries are
read only up to ``lastConfirmedEntry``, so a producer still writing is never read past what it
was acknowledged. A topic with nothing new is not touched (no files, no cursor move), so a re-run
with nothing new changes nothing in the target.

Typed values: a topic with an AVRO or JSON schema is exported with the data source's
``schema_version`` and ``value`` columns (see ``source``), ``value`` being the merge of the
versions live at that run; files of runs with different versions hold different structs, which
``spark.read.option("mergeSchema", "true").parquet(target)`` merges by the same rule.
``decode_schema=False`` exports the raw columns only.

Limits: two runs of the same export name at the same time are not supported (they would share a
staging area); moving the export's subscription by hand (a reset back in time) re-exports from
there and may duplicate rows already exported.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.export_progress import ExportProgress, Position, format_position
from magnetar.jobs.parquet_commit import CommittedFile, ParquetCommitter
from magnetar.jobs.topic_plan import plan_reads, resolve_topics

DATE_COLUMN = "date"
RUN_COLUMN = "run"
# The publish date in UTC, whatever the session's time zone (unix_micros is zone-free).
DATE_EXPR = "date_from_unix_date(CAST(floor(unix_micros(publish_time) / 86400000000) AS INT))"


def run_id(name: str, topic: str, start_after: Position) -> str:
    """The id of topic ``topic``'s slice of a run of export ``name`` starting after ``start_after``."""
    key = f"{name}\0{topic}\0{format_position(start_after)}".encode()
    return hashlib.sha256(key).hexdigest()[:20]


@dataclass
class ExportResult:
    """What one run did: rows and Parquet bytes written, partition topics covered, wall time."""

    rows: int
    bytes: int
    topics: int
    seconds: float
    target: str
    files: list[CommittedFile] = field(default_factory=list)
    committed: dict[str, Position] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The job's ``MAGNETAR_RESULT`` document."""
        return {
            "job": "export",
            "rows": self.rows,
            "bytes": self.bytes,
            "topics": self.topics,
            "seconds": round(self.seconds, 3),
            "target": self.target,
        }


class ExportRun:
    """One run of an export, step by step (``run`` does them all; tests stop between steps to
    play a crash at that point)."""

    def __init__(
        self,
        spark: Any,
        admin_url: str,
        *,
        target: str,
        name: str = "export",
        topic: str | None = None,
        topics: str | None = None,
        namespace: str | None = None,
        entries_per_partition: int = 5000,
        decode_schema: bool = True,
    ) -> None:
        self.spark = spark
        self.decode_schema = decode_schema
        self.admin_url = admin_url
        self.admin = AdminClient(admin_url)
        self.target = target.rstrip("/")
        self.name = name
        self.selection = {"topic": topic, "topics": topics, "namespace": namespace}
        self.entries_per_partition = entries_per_partition
        self.progress = ExportProgress(self.admin, name)
        self.committer = ParquetCommitter(spark, self.target, name)
        self.started = time.monotonic()
        self.topics: list[str] = []
        self.starts: dict[str, Position] = {}
        self.ends: dict[str, Position] = {}
        self.runs: dict[str, str] = {}  # pending topic -> run id
        self.rows = 0
        self.moves: dict[str, list[tuple[str, str]]] = {}
        self.files: list[CommittedFile] = []

    @property
    def pending(self) -> list[str]:
        """The topics with entries past their export position."""
        return list(self.runs)

    def plan(self) -> None:
        self.topics = resolve_topics(self.admin, **self.selection)
        self.starts = self.progress.start(self.topics)
        plan = plan_reads(
            self.admin,
            self.topics,
            start_after=dict(self.starts),
            entries_per_range=self.entries_per_partition,
        )
        for t in self.topics:
            end = plan.end_positions.get(t, self.starts[t])
            self.ends[t] = (int(end[0]), int(end[1]))
        self.runs = {t: run_id(self.name, t, self.starts[t]) for t in self.topics if self.ends[t] != self.starts[t]}
        self.committer.discard(self.runs.values())
        self.committer.drop_manifest()
        self.committer.clear_staging()

    def dataframe(self) -> Any:
        """The rows to export, with the ``date`` and ``run`` columns the files are split by."""
        from pyspark.sql import functions as F

        pending = self.pending
        df = (
            self.spark.read.format("magnetar")
            .option("adminUrl", self.admin_url)
            .option("topics", ",".join(pending))
            .option("startAfter", json.dumps({t: format_position(self.starts[t]) for t in pending}))
            .option("endAt", json.dumps({t: format_position(self.ends[t]) for t in pending}))
            .option("entriesPerPartition", str(self.entries_per_partition))
            .option("decodeSchema", str(self.decode_schema).lower())
            .load()
        )
        runs = F.create_map(*[F.lit(x) for t in pending for x in (t, self.runs[t])])
        return df.withColumn(DATE_COLUMN, F.expr(DATE_EXPR)).withColumn(RUN_COLUMN, runs[F.col("topic")])

    def write(self) -> int:
        """Write the pending topics' rows to staging; returns the number of rows."""
        if not self.runs:
            return 0
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        seen = Observation("magnetar-export")
        df = self.dataframe().observe(seen, F.count(F.lit(1)).alias("rows"))
        df.write.mode("overwrite").partitionBy(RUN_COLUMN, DATE_COLUMN).parquet(self.committer.staging)
        self.rows = int(seen.get["rows"])
        return self.rows

    def move(self) -> list[CommittedFile]:
        """Write the manifest, then move the staged files into place."""
        if not self.runs:
            return []
        self.moves = self.committer.plan_moves(self.runs.values())
        self.committer.write_manifest(self.moves)
        self.files = self.committer.move(self.moves)
        return self.files

    def commit(self) -> None:
        """Move each pending topic's subscription to the last exported entry, then tidy up."""
        for t in self.pending:
            self.progress.commit(t, self.ends[t])
        if self.runs:
            self.committer.drop_manifest()
            self.committer.clear_staging()

    def result(self) -> ExportResult:
        return ExportResult(
            rows=self.rows,
            bytes=sum(f.size for f in self.files),
            topics=len(self.topics),
            seconds=time.monotonic() - self.started,
            target=self.target,
            files=self.files,
            committed={t: self.ends[t] for t in self.pending},
        )

    def run(self) -> ExportResult:
        self.plan()
        self.write()
        self.move()
        self.commit()
        return self.result()


def export(
    spark: Any,
    admin_url: str,
    *,
    target: str,
    name: str = "export",
    topic: str | None = None,
    topics: str | None = None,
    namespace: str | None = None,
    entries_per_partition: int = 5000,
    decode_schema: bool = True,
) -> ExportResult:
    """Export what is new on ``topic`` / ``topics`` (comma-separated) / ``namespace`` since the
    last run of the export ``name`` to ``target`` (a path or Hadoop filesystem URL); a topic with
    an AVRO/JSON schema gets typed columns unless ``decode_schema`` is false."""
    return ExportRun(
        spark,
        admin_url,
        target=target,
        name=name,
        topic=topic,
        topics=topics,
        namespace=namespace,
        entries_per_partition=entries_per_partition,
        decode_schema=decode_schema,
    ).run()
