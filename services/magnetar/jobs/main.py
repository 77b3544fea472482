"""The jobs' entry point for ``spark-submit``: ``python -m magnetar.jobs.main export|retention-sweep ...``.

A SparkApplication's ``mainApplicationFile`` names this file (or the module), and its
``arguments`` are the command line below; master, executors and resources come from
``spark-submit``, so the session is ``cluster_session``. ``magnetar-jobs`` (``cli/jobs.py``) parses
the same command line and runs it on a local Spark instead.

Every run ends with one line ``MAGNETAR_RESULT {json}`` on stdout (the operator reads it from the
driver's log to fill the owner's status: rows, bytes, ...) and exit code 0; a failed run prints
the error on stderr and exits 1, with no result line.

    python -m magnetar.jobs.main export --admin-url http://broker:8080 \
        --topic persistent://public/default/orders --target s3a://bucket/orders [--name orders]
    python -m magnetar.jobs.main export --streaming --admin-url http://broker:8080 \
        --topic persistent://public/default/orders --target s3a://bucket/orders \
        --checkpoint /checkpoint/orders [--trigger-seconds 10]
    python -m magnetar.jobs.main retention-sweep --admin-url http://broker:8080 ...

``export --streaming`` (``streaming_export``) runs until SIGTERM/SIGINT, printing a
``MAGNETAR_PROGRESS {json}`` line per micro-batch, and its ``MAGNETAR_RESULT`` line when stopped.
A command line that cannot run is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

RESULT_PREFIX = "MAGNETAR_RESULT "
SessionFactory = Callable[[str], Any]


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--admin-url", required=True, help="a broker's admin URL, e.g. http://localhost:8080")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", help="a topic (a partitioned topic means all its partitions)")
    what.add_argument("--topics", help="several topics, comma-separated")
    what.add_argument("--namespace", help="tenant/namespace: every persistent topic in it")
    p.add_argument("--target", required=True, help="where the Parquet files go: a path or a Hadoop FS URL")
    p.add_argument(
        "--name",
        default="export",
        help="the export's name; its progress is the subscription magnetar-export-<name> (default: export)",
    )
    p.add_argument("--entries-per-partition", type=int, default=5000, help="entries per Spark input partition")
    streaming = p.add_argument_group(
        "streaming", "with --streaming: a Structured Streaming query that exports continuously until stopped"
    )
    streaming.add_argument(
        "--streaming", action="store_true", help="run continuously: land new messages every --trigger-seconds"
    )
    streaming.add_argument("--checkpoint", help="the query's checkpoint folder (required; the same at every restart)")
    streaming.add_argument("--trigger-seconds", type=float, help="seconds between micro-batches (default: 10)")
    streaming.add_argument("--max-entries-per-trigger", type=int, help="at most this many entries per micro-batch")
    streaming.add_argument("--max-bytes-per-trigger", type=int, help="at most about this many bytes per micro-batch")
    streaming.add_argument(
        "--starting-offsets",
        help="earliest (default), latest or JSON {topic: 'ledger:entry'}; only for a new checkpoint",
    )
    streaming.add_argument(
        "--no-fail-on-data-loss",
        dest="fail_on_data_loss",
        action="store_false",
        help="skip entries trimmed before the query read them (default: fail the query, naming them)",
    )
    p.add_argument(
        "--no-decode-schema",
        dest="decode_schema",
        action="store_false",
        help="keep only the raw payload of a topic with an Avro or JSON schema (no value struct column)",
    )


def build_parser(prog: str, *, common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The ``export`` and ``retention-sweep`` subcommands; ``common`` adds options to both."""
    parents = [common] if common is not None else []
    parser = argparse.ArgumentParser(prog=prog, description="Magnetar's Spark jobs: topic export and retention sweep.")
    subs = parser.add_subparsers(dest="job", required=True)
    export = subs.add_parser(
        "export", parents=parents, help="export topics to Parquet, partitioned by publish date (incremental)"
    )
    add_export_arguments(export)
    sweep = subs.add_parser(
        "retention-sweep", parents=parents, help="report (and with --apply, trim) what retention and TTL allow"
    )
    # Imported here, not at the top: run as a file, this module scrubs its folder from sys.path
    # first (see the end of the file).
    from magnetar.jobs import retention_sweep

    retention_sweep.add_arguments(sweep)
    return parser


def app_name(args: argparse.Namespace) -> str:
    if args.job != "export":
        return "magnetar-retention-sweep"
    return f"magnetar-streaming-export-{args.name}" if args.streaming else f"magnetar-export-{args.name}"


def run_job(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the job ``args`` names on ``spark``; its ``MAGNETAR_RESULT`` document."""
    if args.job == "export" and args.streaming:
        from magnetar.jobs import streaming_export

        return streaming_export.run(spark, args)
    if args.job == "export":
        from magnetar.jobs.export import export

        result = export(
            spark,
            args.admin_url,
            target=args.target,
            name=args.name,
            topic=args.topic,
            topics=args.topics,
            namespace=args.namespace,
            entries_per_partition=args.entries_per_partition,
            decode_schema=args.decode_schema,
        )
        return result.summary()
    from magnetar.jobs import retention_sweep

    doc = dict(retention_sweep.run_from_args(spark, args))
    doc.setdefault("job", "retention-sweep")
    return doc


def preflight(args: argparse.Namespace) -> None:
    """Check what can be checked before Spark starts (which takes many seconds): the names given,
    that the admin URL answers as a broker's admin API, and that a namespace given exists. A
    mistake here raises an ordinary error (``is_ordinary``) naming it."""
    from magnetar.jobs.admin_client import AdminClient
    from magnetar.jobs.streaming_export import check_arguments
    from magnetar.protocol.topic_name import TopicName, check_namespace

    if args.job == "export":
        check_arguments(args)
    for name in [getattr(args, "topic", None), *(str(getattr(args, "topics", None) or "").split(","))]:
        if name and name.strip():
            TopicName.parse(name.strip())
    namespace = getattr(args, "namespace", None)
    if namespace:
        tenant, _, local = str(namespace).partition("/")
        check_namespace(tenant, local)
    admin = AdminClient(args.admin_url, timeout=10.0)
    # JSON, and open to any role that may call the API at all; a binary port is AdminError there too.
    admin.get("/admin/v2/clusters")
    if namespace:
        admin.get(f"namespaces/{namespace}")


def is_ordinary(exc: BaseException) -> bool:
    """Whether ``exc`` is a user's or the world's mistake (a refused admin call, a bad name, an
    unreachable broker, an unreadable file), said in one line; anything else is a bug and keeps its
    traceback."""
    from magnetar.jobs.admin_client import AdminError
    from magnetar.jobs.streaming_export import QueryFailed
    from magnetar.protocol.errors import MagnetarError

    return isinstance(exc, AdminError | MagnetarError | OSError | ValueError | QueryFailed)


def _one_line(exc: BaseException) -> str:
    from magnetar.jobs.admin_client import AdminError
    from magnetar.jobs.streaming_export import ArgumentProblem, QueryFailed

    if isinstance(exc, AdminError):
        text = exc.reason + (f" (HTTP {exc.status})" if exc.status else "")
    elif isinstance(exc, ArgumentProblem | QueryFailed):
        text = str(exc)
    else:
        text = f"{exc.__class__.__name__}: {exc}"
    return " ".join(text.split())


def execute(args: argparse.Namespace, session: SessionFactory) -> int:
    """Check the arguments, start a session, run the job, print ``MAGNETAR_RESULT``; 0 on success,
    1 on failure, said in one line on stderr (with a traceback only for what is not ordinary)."""
    from magnetar.jobs.streaming_export import ArgumentProblem

    try:
        preflight(args)
    except Exception as exc:
        if not is_ordinary(exc):
            raise
        print(f"{args.job}: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 2 if isinstance(exc, ArgumentProblem) else 1
    try:
        spark = session(app_name(args))  # registers the source, with filter pushdown on
    except Exception as exc:
        print(f"{args.job}: cannot start Spark: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        doc = run_job(spark, args)
    except Exception as exc:
        if not is_ordinary(exc):
            traceback.print_exc()
        print(f"{args.job} failed: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    print(RESULT_PREFIX + json.dumps(doc, sort_keys=True), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from magnetar.jobs.session import cluster_session

    args = build_parser("magnetar.jobs.main").parse_args(argv)
    return execute(args, cluster_session)


if __name__ == "__main__":
    # Run as a file (a SparkApplication's mainApplicationFile), this folder is sys.path[0], where
    # the sibling modules (session.py, source.py, ...) could shadow top-level modules of the same
    # name: the package is imported by its full name instead.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.exit(main())
