"""The continuous export: ``export --streaming`` lands topics in Parquet within seconds, until stopped.

    magnetar-jobs export --streaming --admin-url http://localhost:8080 \\
        --topic persistent://public/default/orders --target /data/orders \\
        --checkpoint /data/checkpoints/orders --trigger-seconds 10

A Structured Streaming query: ``spark.readStream.format("magnetar")`` (``stream_reader``) into
Spark's Parquet file sink, one micro-batch every ``--trigger-seconds``, partitioned by the publish
date in UTC (``date=D/``, as the batch export). Exactly once across restarts: the checkpoint keeps
each batch's offsets before it is read, and the file sink's log (``_spark_metadata`` in the
target) lists a batch's files only once they are all written, so a batch replayed after a crash
writes files that replace nothing and that readers of the folder through Spark see once. Readers
must read the folder with Spark (or read ``_spark_metadata``), not list its files: a crashed
batch may leave files of its own that the log never lists.

The query's progress is also the subscription ``magnetar-streaming-<name>`` on every topic it
reads (the source's ``predefinedSubscription``), moved after each batch, so the brokers' backlog of
it is the query's lag and retention keeps what it has not exported. It is not the batch export's
``magnetar-export-<name>``: the two keep their own progress, and must have their own targets.

Why ``--starting-offsets earliest`` by default, where the source (as Pulsar's connector) starts at
latest: an export's first run lands what the topic already holds, as the batch export does. It
only applies to a new checkpoint; a restart goes on from the checkpoint.

Stopping: SIGTERM or SIGINT stops the query between two checks (one per second) and the job ends
with its ``MAGNETAR_RESULT`` line and exit code 0; a batch in flight is abandoned and done again
by the next start. Each finished batch prints ``MAGNETAR_PROGRESS {json}`` (batchId, timestamp,
numInputRows, inputRowsPerSecond, processedRowsPerSecond) and, when the driver runs in a
Kubernetes pod, writes the same document as the pod's ``magnetar.dev/streaming-progress``
annotation, which the operator mirrors into the Topic's or Namespace's status.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.jobs.export import DATE_COLUMN, DATE_EXPR

log = logging.getLogger(__name__)

PROGRESS_PREFIX = "MAGNETAR_PROGRESS "
PROGRESS_ANNOTATION = "magnetar.dev/streaming-progress"
SUBSCRIPTION_PREFIX = "magnetar-streaming-"
DEFAULT_TRIGGER_SECONDS = 10.0
DEFAULT_STARTING_OFFSETS = "earliest"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The options that mean nothing without --streaming (flag, argparse dest).
STREAMING_ONLY = (
    ("--checkpoint", "checkpoint"),
    ("--trigger-seconds", "trigger_seconds"),
    ("--max-entries-per-trigger", "max_entries_per_trigger"),
    ("--max-bytes-per-trigger", "max_bytes_per_trigger"),
    ("--starting-offsets", "starting_offsets"),
)


class ArgumentProblem(ValueError):
    """A command line that cannot be run, said in one line (no class name in front)."""


class QueryFailed(RuntimeError):
    """The streaming query stopped on an error (data loss, a broker that went away, ...)."""


def failure_line(text: str) -> str:
    """The line of a StreamingQueryException's text that says what went wrong: the Python
    error raised in the source (its last ``...Error: ...`` line), else the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    raised = [line for line in lines if not line.startswith(("at ", "File ")) and "Error: " in line]
    return (raised[-1] if raised else lines[0] if lines else "the query failed")[:2000]


def subscription(name: str) -> str:
    return SUBSCRIPTION_PREFIX + name


def _local(path: str) -> str | None:
    """The local path of a plain path or file: URL, None for other file systems."""
    parsed = urllib.parse.urlparse(path)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else path)
    return None


def check_arguments(args: Any) -> None:
    """Refuse, in one line, a streaming command line that cannot work (before Spark starts)."""
    if not getattr(args, "streaming", False):
        given = [flag for flag, dest in STREAMING_ONLY if getattr(args, dest, None) is not None]
        if getattr(args, "fail_on_data_loss", True) is False:
            given.append("--no-fail-on-data-loss")
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise ArgumentProblem(f"{', '.join(given)} only {verb} with --streaming")
        return
    if not args.checkpoint:
        raise ArgumentProblem(
            "--streaming needs --checkpoint DIR: where the query keeps its offsets, the same folder at every restart"
        )
    if args.trigger_seconds is not None and not args.trigger_seconds > 0:
        raise ArgumentProblem(f"--trigger-seconds must be more than 0, not {args.trigger_seconds:g}")
    for flag, dest in (
        ("--max-entries-per-trigger", "max_entries_per_trigger"),
        ("--max-bytes-per-trigger", "max_bytes_per_trigger"),
    ):
        value = getattr(args, dest, None)
        if value is not None and value < 1:
            raise ArgumentProblem(f"{flag} must be at least 1, not {value}")
    checkpoint, target = _local(args.checkpoint), _local(args.target)
    if checkpoint and target and (checkpoint == target or checkpoint.startswith(target.rstrip("/") + "/")):
        raise ArgumentProblem("--checkpoint must not be inside --target: Spark would read the checkpoint as data")


def reader_options(args: Any) -> dict[str, str]:
    """The ``magnetar`` streaming source's options for this export."""
    options = {
        "adminUrl": args.admin_url,
        "startingOffsets": args.starting_offsets or DEFAULT_STARTING_OFFSETS,
        "failOnDataLoss": "true" if args.fail_on_data_loss else "false",
        "predefinedSubscription": subscription(args.name),
        "entriesPerPartition": str(args.entries_per_partition),
        "decodeSchema": "true" if args.decode_schema else "false",
    }
    for key, dest in (("topic", "topic"), ("topics", "topics"), ("namespace", "namespace")):
        if getattr(args, dest, None):
            options[key] = str(getattr(args, dest))
    if args.max_entries_per_trigger is not None:
        options["maxEntriesPerTrigger"] = str(args.max_entries_per_trigger)
    if args.max_bytes_per_trigger is not None:
        options["maxBytesPerTrigger"] = str(args.max_bytes_per_trigger)
    return options


def progress_document(progress: Any) -> dict[str, Any]:
    """What the operator mirrors, from a StreamingQueryProgress."""

    def number(value: Any) -> float:
        try:
            out = float(value)
        except (TypeError, ValueError):
            return 0.0
        return out if out == out else 0.0  # NaN (no time elapsed) is 0

    return {
        "batchId": int(progress.batchId),
        "timestamp": str(progress.timestamp),
        "numInputRows": int(progress.numInputRows),
        "inputRowsPerSecond": round(number(progress.inputRowsPerSecond), 3),
        "processedRowsPerSecond": round(number(progress.processedRowsPerSecond), 3),
    }


@dataclass
class DriverPod:
    """The driver's own pod, when it runs in one: where the progress annotation goes.

    Plain HTTPS with the pod's service account token (no Kubernetes client in the image). A
    failed patch is logged once and never stops the query: the annotation is only a report."""

    name: str
    namespace: str
    url: str
    token_file: Path
    ca_file: Path
    warned: bool = False

    @classmethod
    def find(cls, conf: Mapping[str, str]) -> DriverPod | None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
        name = conf.get("spark.kubernetes.driver.pod.name") or os.environ.get("POD_NAME")
        token = SERVICE_ACCOUNT / "token"
        if not (host and port and name and token.is_file()):
            return None
        namespace_file = SERVICE_ACCOUNT / "namespace"
        namespace = conf.get("spark.kubernetes.namespace") or (
            namespace_file.read_text().strip() if namespace_file.is_file() else "default"
        )
        host = f"[{host}]" if ":" in host else host
        return cls(name, namespace, f"https://{host}:{port}", token, SERVICE_ACCOUNT / "ca.crt")

    def annotate(self, doc: Mapping[str, Any]) -> None:
        body = json.dumps({"metadata": {"annotations": {PROGRESS_ANNOTATION: json.dumps(doc, sort_keys=True)}}})
        request = urllib.request.Request(
            f"{self.url}/api/v1/namespaces/{self.namespace}/pods/{self.name}",
            data=body.encode(),
            method="PATCH",
            headers={
                "Content-Type": "application/merge-patch+json",
                "Authorization": f"Bearer {self.token_file.read_text().strip()}",
            },
        )
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file.is_file() else None
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as resp:
                resp.read()
        except OSError as exc:
            if not self.warned:
                log.warning("cannot annotate pod %s/%s with the query's progress: %s", self.namespace, self.name, exc)
                self.warned = True


@dataclass
class Tally:
    """What the listener saw, for the job's result line."""

    batches: int = 0
    rows: int = 0
    last: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, doc: Mapping[str, Any]) -> None:
        with self.lock:
            self.batches += 1
            self.rows += int(doc.get("numInputRows") or 0)
            self.last = dict(doc)


def make_listener(tally: Tally, pod: DriverPod | None) -> Any:
    """A StreamingQueryListener that prints, counts and (in a pod) annotates every batch."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            doc = progress_document(event.progress)
            tally.add(doc)
            print(PROGRESS_PREFIX + json.dumps(doc, sort_keys=True), flush=True)
            if pod is not None:
                pod.annotate(doc)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return ProgressListener()


def start_query(spark: Any, args: Any) -> Any:
    """The streaming query of ``args`` (a parsed ``export --streaming`` command line), started."""
    frame = spark.readStream.format("magnetar").options(**reader_options(args)).load()
    frame = frame.withColumn(DATE_COLUMN, _expr(DATE_EXPR))
    seconds = float(args.trigger_seconds or DEFAULT_TRIGGER_SECONDS)
    return (
        frame.writeStream.format("parquet")
        .queryName(f"magnetar-streaming-export-{args.name}")
        .option("path", args.target)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy(DATE_COLUMN)
        .trigger(processingTime=f"{seconds:g} seconds")
        .outputMode("append")
        .start()
    )


def _expr(text: str) -> Any:
    from pyspark.sql import functions

    return functions.expr(text)


def run(spark: Any, args: Any) -> dict[str, Any]:
    """Run the query until SIGTERM/SIGINT (a clean stop: the result document) or until it fails
    (its error raised, a failOnDataLoss message among them)."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    tally = Tally()
    conf = dict(spark.sparkContext.getConf().getAll())
    listener = make_listener(tally, DriverPod.find(conf))
    spark.streams.addListener(listener)
    for sig in previous:
        signal.signal(sig, on_signal)
    query = None
    try:
        query = start_query(spark, args)
        print(f"export: streaming {args.topic or args.topics or args.namespace} to {args.target}", flush=True)
        while not stop.is_set():
            if query.awaitTermination(1.0):
                break
        error = query.exception()
        if error is not None and not stop.is_set():
            raise QueryFailed(failure_line(str(error)))
    finally:
        if query is not None and query.isActive:
            query.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        spark.streams.removeListener(listener)
    return {
        "job": "export",
        "streaming": True,
        "name": args.name,
        "subscription": subscription(args.name),
        "batches": tally.batches,
        "rows": tally.rows,
        "lastBatch": tally.last.get("batchId"),
        "stopped": "signal" if stop.is_set() else "ended",
    }
