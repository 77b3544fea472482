"""The retention sweep: what retention and TTL allow to be removed, as a report, and on request, removed.

The driver lists tenants -> namespaces -> persistent topics (partitions one by one) through the
admin API and reads each namespace's policies once; Spark fans the per-topic work out over its
executors (``sweep_rules.sweep_topic``: the topic's internal stats and topic-level policies, then
the broker's own trimming rule). The driver then writes the report:

- ``<report>/ledgers``: a Parquet dataset, one row per removable ledger (tenant, namespace, topic,
  ledger_id, entries, messages, bytes, closed_at, reason: "retention-time" | "retention-size" |
  "consumed-no-retention" | "ttl" | "empty-ledger");
- ``<report>/summary.md``: bytes and messages per tenant and per namespace, and per reason; the same
  text is printed.

A dry run (the default) stops there and changes nothing: it only reads (internal stats and policies
through the admin API; reading an idle topic's internal stats loads it on its owner, as Pulsar's
does, which gives it a fresh ledger to write to, but no data, cursor or policy changes).

With ``apply`` (after the report is written, so that what is deleted was reported first — Pulsar
deletes without a report) each topic with removable ledgers is handed to its
broker: the subscriptions TTL condemns are expired (``POST .../subscription/{s}/expireMessages/{ttl}``),
then the topic is trimmed (``POST .../trim``). Spark never deletes bookie data: the brokers remain the
only writers of the log, and they apply the same rule again at that moment, so a consumer that moved
back or a policy that changed in between keeps its data (the result counts what was really trimmed).

Deliberate differences: "empty-ledger" is a reason beyond the four of the issue (an empty closed
ledger goes as soon as the walk reaches it, whatever the limits); the report is a directory holding
the Parquet dataset and the summary side by side, so one URL names both.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.sweep_rules import (
    RETENTION_FIELD,
    TTL_FIELD,
    ReportRow,
    TopicVerdict,
    apply_verdict,
    sweep_topic,
)

# Admin calls in flight per Spark task: the work is waiting on brokers, not computing.
THREADS_PER_TASK = 8
REPORT_COLUMNS = (
    ("tenant", "string"),
    ("namespace", "string"),
    ("topic", "string"),
    ("ledger_id", "bigint"),
    ("entries", "bigint"),
    ("messages", "bigint"),
    ("bytes", "bigint"),
    ("closed_at", "timestamp"),
    ("reason", "string"),
)
REPORT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in REPORT_COLUMNS)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True)
class SweepResult:
    """What a sweep found (and with ``applied``, what the brokers trimmed)."""

    topics: int
    rows: list[ReportRow]
    applied: bool
    seconds: float
    report: str | None
    summary: str
    trimmed_ledgers: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ledgers(self) -> int:
        return len(self.rows)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.rows)

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.rows)

    def document(self) -> dict[str, Any]:
        """The ``MAGNETAR_RESULT`` document (``topics``: topics examined)."""
        return {
            "job": "retention-sweep",
            "topics": self.topics,
            "ledgers": self.ledgers,
            "bytes": self.bytes,
            "messages": self.messages,
            "applied": self.applied,
            "seconds": round(self.seconds, 3),
            "report": self.report,
            "trimmedLedgers": self.trimmed_ledgers,
            "errors": len(self.errors),
        }


def namespaces_to_sweep(admin: AdminClient, tenant: str | None, namespace: str | None) -> list[str]:
    """``tenant/ns`` names: the one given, a tenant's, or every tenant's."""
    if namespace is not None:
        return [namespace if "/" in namespace or tenant is None else f"{tenant}/{namespace}"]
    tenants = [tenant] if tenant is not None else admin.tenants()
    return [ns for t in tenants for ns in admin.namespaces_of(t)]


def work_items(admin: AdminClient, namespaces: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """(topic, its namespace's retention and TTL policies) for every persistent (partition) topic."""
    items: list[tuple[str, dict[str, Any]]] = []
    for ns in namespaces:
        doc = admin.get(f"namespaces/{ns}") or {}
        policies = {RETENTION_FIELD: doc.get(RETENTION_FIELD), TTL_FIELD: doc.get(TTL_FIELD)}
        items.extend((topic, policies) for topic in admin.topics_of(ns))
    return items


def _threaded(fn: Any, items: Iterator[T]) -> Iterator[R]:
    """``map(fn, items)`` with a few admin calls in flight (runs inside one Spark task)."""
    with ThreadPoolExecutor(THREADS_PER_TASK) as pool:
        yield from pool.map(fn, list(items))


def _fan_out(spark: Any, fn: Any, items: list[T]) -> list[R]:
    """Run ``fn`` on every item on the executors; results in the order of ``items``."""
    if not items:
        return []
    sc = spark.sparkContext
    slices = max(1, min(len(items), sc.defaultParallelism * 2))
    return list(sc.parallelize(items, slices).mapPartitions(functools.partial(_threaded, fn)).collect())


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def summary_text(
    rows: list[ReportRow], *, topics: int, applied: bool, now: float, errors: list[str], trimmed: int = 0
) -> str:
    """The readable summary: totals, then bytes and messages per tenant, per namespace, per reason."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        f"# Retention sweep at {stamp} ({'applied' if applied else 'dry run: nothing was changed'})",
        "",
        f"Topics examined: {topics}; with removable ledgers: {len({r.topic for r in rows})}; errors: {len(errors)}",
        f"Removable: {len(rows)} ledgers, {sum(r.messages for r in rows)} messages, "
        f"{sum(r.bytes for r in rows)} bytes ({_human(sum(r.bytes for r in rows))})",
    ]
    if applied:
        lines.append(f"Trimmed by the brokers: {trimmed} of the {len(rows)} reported ledgers")
    for title, key in (
        ("tenant", lambda r: r.tenant),
        ("namespace", lambda r: f"{r.tenant}/{r.namespace}"),
        ("reason", lambda r: r.reason),
    ):
        groups: dict[str, list[ReportRow]] = defaultdict(list)
        for row in rows:
            groups[key(row)].append(row)
        lines += [
            "",
            f"## Per {title}",
            "",
            f"| {title} | topics | ledgers | messages | bytes |",
            "|---|---:|---:|---:|---:|",
        ]
        for name in sorted(groups):
            g = groups[name]
            lines.append(
                f"| {name} | {len({r.topic for r in g})} | {len(g)} | {sum(r.messages for r in g)} "
                f"| {sum(r.bytes for r in g)} ({_human(sum(r.bytes for r in g))}) |"
            )
    if errors:
        lines += ["", "## Errors", ""] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


def write_text(spark: Any, url: str, text: str) -> None:
    """Write ``text`` to ``url`` through Hadoop's FileSystem (a path, ``file:``, ``s3a:``, ``hdfs:``
    ...: wherever the Parquet report can go)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(url)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    out = fs.create(path, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


def write_report(spark: Any, report: str, rows: list[ReportRow], summary: str) -> None:
    base = report.rstrip("/")
    data = [
        (
            r.tenant,
            r.namespace,
            r.topic,
            r.ledger_id,
            r.entries,
            r.messages,
            r.bytes,
            datetime.fromtimestamp(r.closed_at_ms / 1000, UTC),
            r.reason,
        )
        for r in rows
    ]
    spark.createDataFrame(data, REPORT_SCHEMA).coalesce(1).write.mode("overwrite").parquet(f"{base}/ledgers")
    write_text(spark, f"{base}/summary.md", summary)


def retention_sweep(
    spark: Any,
    admin_url: str,
    *,
    tenant: str | None = None,
    namespace: str | None = None,
    dry_run: bool = True,
    report: str | None = None,
    now: float | None = None,
) -> SweepResult:
    """Sweep every topic of ``namespace`` ("tenant/ns"), of ``tenant``, or of the whole cluster.

    ``now`` (epoch seconds, default the driver's clock) is the time the rule is evaluated at; a
    test that moves a broker's clock passes the same. Returns the result; prints the summary."""
    started = time.monotonic()
    now = time.time() if now is None else now
    admin = AdminClient(admin_url)
    items = work_items(admin, namespaces_to_sweep(admin, tenant, namespace))
    verdicts: list[TopicVerdict] = _fan_out(spark, functools.partial(sweep_topic, admin_url, now), items)
    errors = [f"{v.topic}: {v.error}" for v in verdicts if v.error is not None]
    rows = [row for v in verdicts for row in v.rows]
    trimmed = 0
    if report is not None:
        pending = summary_text(rows, topics=len(items), applied=False, now=now, errors=errors)
        write_report(spark, report, rows, pending)  # before anything is deleted
    if not dry_run:
        doomed = [v for v in verdicts if v.rows and v.error is None]
        outcomes: list[tuple[str, list[int], str | None]] = _fan_out(
            spark, functools.partial(apply_verdict, admin_url), doomed
        )
        for verdict, (topic, left, error) in zip(doomed, outcomes, strict=True):
            trimmed += len(verdict.rows) - len(left)
            if error is not None:
                errors.append(f"{topic}: apply failed: {error}")
    summary = summary_text(rows, topics=len(items), applied=not dry_run, now=now, errors=errors, trimmed=trimmed)
    if report is not None and not dry_run:
        write_text(spark, f"{report.rstrip('/')}/summary.md", summary)
    print(summary, flush=True)
    return SweepResult(
        topics=len(items),
        rows=rows,
        applied=not dry_run,
        seconds=time.monotonic() - started,
        report=report,
        summary=summary,
        trimmed_ledgers=trimmed,
        errors=errors,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``retention-sweep`` command line (``magnetar.jobs.main``, ``magnetar-jobs``)."""
    parser.add_argument("--admin-url", required=True, help="a broker's admin URL, e.g. http://localhost:8080")
    parser.add_argument("--tenant", help="sweep only this tenant")
    parser.add_argument("--namespace", help="sweep only this namespace (tenant/namespace)")
    parser.add_argument(
        "--report", help="where the report goes (a directory: path or Hadoop FS URL); <report>/ledgers, summary.md"
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="ask the brokers to expire and trim what the report lists (default: a dry run that changes nothing)",
    )
    parser.add_argument("--now", type=float, help=argparse.SUPPRESS)  # tests: evaluate at this epoch second


def run_from_args(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the sweep the parsed command line describes; its ``MAGNETAR_RESULT`` document."""
    result = retention_sweep(
        spark,
        args.admin_url,
        tenant=args.tenant,
        namespace=args.namespace,
        dry_run=not args.apply,
        report=args.report,
        now=args.now,
    )
    return result.document()
