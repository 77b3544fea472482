"""A streaming query in a driver process of its own, so that a test can kill it with SIGKILL.

A Structured Streaming query is only as good as its restart from the checkpoint after the driver
died mid-batch; a query in the test's own Spark session cannot be killed that way. This module is
both the driver program and the test's handle on it.

The driver (``python tests/support/streaming.py SPEC.json``) builds its own SparkSession
(``local[2]``, the ``magnetar`` format registered), starts ``spark.readStream.format(...)`` with
``spec["options"]``, optionally keeps ``spec["columns"]``, and writes with ``writeStream`` to
``spec["format"]`` (default ``parquet``; with ``spec["sink_options"]``) at ``spec["output"]`` with
``checkpointLocation`` ``spec["checkpoint"]`` and a ``processingTime`` trigger of
``spec["trigger_seconds"]`` (default 0.5). It prints, one line each, flushed:

- ``STARTED <query id>`` once the query runs;
- ``PROGRESS <json>`` after every micro-batch: ``{"batchId", "numInputRows", "endOffset"}`` (the
  first source's end offset, decoded);
- ``FAILED <message>`` when the query stops on an error (exit status 1); ``STOPPED`` when it stops
  otherwise (after ``spec["stop_after_idle_batches"]`` batches in a row that read nothing, if given).

The handle, ``StreamDriver(spec, workdir)``: ``start()`` runs the program (output in
``workdir/driver-<n>.log``, one per start), ``wait_batch_in_flight(timeout)`` waits until the
checkpoint holds a micro-batch's offsets but not its commit (the batch is running: a kill then
lands mid-batch) and returns its id, ``wait_progress(predicate, timeout)`` waits for the
first progress line ``predicate`` accepts and returns it, ``wait_line(prefix, timeout)`` for any
line, ``kill9()`` sends SIGKILL to the driver and its JVM (the whole process group) and waits for
them, ``stop()`` the same with SIGTERM for the clean-up, ``progress`` lists the progress seen since
the last start, ``log()`` is the current log's text. Every wait is on a line the driver printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRESS = "PROGRESS "


# ---------------------------------------------------------------------------------------- driver


def _run(spec: dict[str, Any]) -> int:
    from magnetar.jobs.session import local_session

    spark = local_session(spec.get("app", "magnetar-stream-driver"), master=spec.get("master", "local[2]"))
    spark.sparkContext.setLogLevel("ERROR")
    reader = spark.readStream.format(spec.get("source", "magnetar"))
    for key, value in spec["options"].items():
        reader = reader.option(key, str(value))
    df = reader.load()
    if spec.get("columns"):
        df = df.select(*spec["columns"])
    writer = (
        df.writeStream.format(spec.get("format", "parquet"))
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(processingTime=f"{float(spec.get('trigger_seconds', 0.5))} seconds")
    )
    for key, value in (spec.get("sink_options") or {}).items():
        writer = writer.option(key, str(value))
    if spec.get("output"):
        writer = writer.option("path", spec["output"])
    query = writer.start()
    print(f"STARTED {query.id}", flush=True)
    seen = -1
    idle = 0
    stop_after_idle = spec.get("stop_after_idle_batches")
    try:
        while query.isActive:
            query.awaitTermination(0.2)
            for p in query.recentProgress:
                if p["batchId"] <= seen:
                    continue
                seen = p["batchId"]
                end = p["sources"][0]["endOffset"] if p.get("sources") else None
                doc = {
                    "batchId": p["batchId"],
                    "numInputRows": p["numInputRows"],
                    "endOffset": json.loads(end) if isinstance(end, str) else end,
                }
                print(PROGRESS + json.dumps(doc), flush=True)
                idle = idle + 1 if p["numInputRows"] == 0 else 0
                if stop_after_idle is not None and idle >= int(stop_after_idle):
                    query.stop()
    except Exception as exc:  # the query's own failure (StreamingQueryException)
        print("FAILED " + " ".join(str(exc).split()), flush=True)
        return 1
    failure = query.exception()
    if failure is not None:
        print("FAILED " + " ".join(str(failure).split()), flush=True)
        return 1
    print("STOPPED", flush=True)
    return 0


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    return _run(spec)


# ---------------------------------------------------------------------------------------- handle


class StreamDriver:
    """The test's handle on a driver process (see the module docstring)."""

    def __init__(self, spec: dict[str, Any], workdir: Path) -> None:
        self.spec = spec
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.spec_path = self.workdir / "spec.json"
        self.spec_path.write_text(json.dumps(spec))
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.progress: list[dict[str, Any]] = []
        self.starts = 0
        self._cond = threading.Condition()
        self._log_path: Path | None = None
        self._eof = False
        self._pumping: threading.Thread | None = None

    def start(self) -> StreamDriver:
        assert self.proc is None or self.proc.poll() is not None, "the driver is still running"
        if self._pumping is not None:
            self._pumping.join(30)  # the last run's output is all read before the next one's
        self.starts += 1
        self._log_path = self.workdir / f"driver-{self.starts}.log"
        with self._cond:
            self.lines, self.progress, self._eof = [], [], False
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(self.spec_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: the JVM dies with it on kill9
        )
        self._pumping = threading.Thread(target=self._pump, args=(self.proc, self._log_path), daemon=True)
        self._pumping.start()
        return self

    def _pump(self, proc: subprocess.Popen[str], path: Path) -> None:
        assert proc.stdout is not None
        with path.open("w") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                text = line.rstrip("\n")
                with self._cond:
                    self.lines.append(text)
                    if text.startswith(PROGRESS):
                        self.progress.append(json.loads(text[len(PROGRESS) :]))
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _wait(self, find: Callable[[], Any], timeout: float, what: str) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: find() or self._eof, timeout)
            value = find()
        if value:
            return value
        state = "exited" if self._eof else "timed out"
        raise AssertionError(f"driver {state} waiting for {what}; last lines:\n" + "\n".join(self.lines[-30:]))

    def wait_line(self, prefix: str, timeout: float = 120.0) -> str:
        """The first line since the last start that begins with ``prefix``."""
        return str(
            self._wait(lambda: next((ln for ln in self.lines if ln.startswith(prefix)), None), timeout, repr(prefix))
        )

    def wait_progress(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 120.0) -> dict[str, Any]:
        """The first progress line since the last start that ``predicate`` accepts."""
        return dict(
            self._wait(lambda: next((p for p in self.progress if predicate(p)), None), timeout, "a progress line")
        )

    def batch_in_flight(self) -> int | None:
        """The micro-batch whose offsets the checkpoint holds but whose commit it does not: the
        one the driver is running now (None between batches)."""
        checkpoint = Path(self.spec["checkpoint"])

        def ids(kind: str) -> set[int]:
            folder = checkpoint / kind
            return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()

        pending = sorted(ids("offsets") - ids("commits"))
        return pending[-1] if pending else None

    def wait_batch_in_flight(self, timeout: float = 120.0) -> int:
        """Wait until a micro-batch is being run (``batch_in_flight``) and return its id."""
        from tests.support.polling import wait_for

        def running() -> tuple[int] | None:
            batch = self.batch_in_flight()
            return None if batch is None else (batch,)  # batch 0 is an answer too

        return int(wait_for("a micro-batch in flight", running, timeout, interval=0.01)[0])

    def _signal(self, sig: int, timeout: float) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        proc.wait(timeout)

    def kill9(self, timeout: float = 30.0) -> None:
        """SIGKILL the driver and everything it started (its JVM, Python workers)."""
        self._signal(signal.SIGKILL, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """End the driver (SIGTERM to its process group, then SIGKILL if it lingers)."""
        try:
            self._signal(signal.SIGTERM, timeout)
        except subprocess.TimeoutExpired:
            self.kill9()

    def wait_exit(self, timeout: float = 120.0) -> int:
        assert self.proc is not None
        return int(self.proc.wait(timeout))

    def log(self) -> str:
        return self._log_path.read_text() if self._log_path is not None and self._log_path.exists() else ""


if __name__ == "__main__":
    sys.exit(main(sys.argv))
