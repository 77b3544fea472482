"""``magnetar-jobs export --streaming``: its argument errors, and a real run on local Spark against a
real standalone that lands messages in Parquet within a trigger or two, stops cleanly on SIGTERM
(exit 0, its result line) and, started again from the same checkpoint, goes on exactly where it
stopped (every acknowledged message once in the output, read through Spark's file-sink log).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.cli.jobs import main as jobs_main
from magnetar.client import aio

REPO = Path(__file__).resolve().parents[2]
Id = tuple[int, int, int]


# ------------------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--streaming"], "export: --streaming needs --checkpoint DIR"),
        (["--trigger-seconds", "5"], "export: --trigger-seconds only applies with --streaming"),
        (
            ["--checkpoint", "/tmp/c", "--no-fail-on-data-loss"],
            "export: --checkpoint, --no-fail-on-data-loss only apply with --streaming",
        ),
        (
            ["--streaming", "--checkpoint", "/tmp/c", "--trigger-seconds", "0"],
            "export: --trigger-seconds must be more than 0, not 0",
        ),
        (
            ["--streaming", "--checkpoint", "/tmp/c", "--max-entries-per-trigger", "0"],
            "export: --max-entries-per-trigger must be at least 1, not 0",
        ),
        (
            ["--streaming", "--checkpoint", "/data/out/_checkpoint"],
            "export: --checkpoint must not be inside --target",
        ),
    ],
)
def test_argument_errors_are_one_line(extra: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before anything is asked of the broker (the admin URL is a closed port) or of Spark."""
    base = ["export", "--admin-url", "http://127.0.0.1:9", "--topic", "persistent://public/default/t"]
    code = jobs_main([*base, "--target", "/data/out", *extra])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(said), err


# ------------------------------------------------------------------------------------------ a real run
async def _produce(url: str, topic: str, n: int, first: int) -> list[Id]:
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, batching_max_messages=100)
        receipts = [await producer.send_async(b"%d" % i) for i in range(first, first + n)]
        ids = [(m.ledger_id(), m.entry_id(), m.batch_index()) for m in await asyncio.gather(*receipts)]
        await producer.close()
    return ids


def produce(sa: StandaloneProcess, topic: str, n: int, first: int) -> list[Id]:
    return asyncio.run(_produce(sa.service_url, topic, n, first))


class Job:
    """``magnetar-jobs export --streaming`` as a process of its own; its stdout lines, awaited."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.log = log
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable),
            start_new_session=True,  # its JVM in its process group: killed with it if the test fails
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("a") as log:
            for line in self.proc.stdout:
                log.write(line)
                self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, accept: Callable[[str], bool], what: str, timeout: float = 180.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
                ended = False
            else:
                ended = line is None
            if line is not None:
                self.seen.append(line)
                if accept(line):
                    return line
                continue
            state = "exited" if ended else "timed out"
            raise AssertionError(f"job {state} waiting for {what}:\n" + "\n".join(self.seen[-40:]))

    def rows_exported(self, total: int, timeout: float = 180.0) -> None:
        """Until the progress lines add up to ``total`` rows."""
        counted = [0]

        def accept(line: str) -> bool:
            if line.startswith("MAGNETAR_PROGRESS "):
                counted[0] += json.loads(line.split(" ", 1)[1])["numInputRows"]
            return counted[0] >= total

        self.wait_line(accept, f"{total} rows in the progress lines", timeout)

    def terminate(self, timeout: float = 120.0) -> tuple[int, dict[str, Any]]:
        """SIGTERM to the job (not its JVM: the job stops the query and Spark itself)."""
        self.proc.send_signal(signal.SIGTERM)
        line = self.wait_line(lambda ln: ln.startswith("MAGNETAR_RESULT "), "the result line", timeout)
        return self.proc.wait(timeout), json.loads(line.split(" ", 1)[1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.kill()  # never leave a JVM behind


def read_ids(spark: Any, target: str) -> list[tuple[int, int, int, str]]:
    rows = spark.read.parquet(target).select("ledger_id", "entry_id", "batch_index", "payload", "date").collect()
    assert all(r["date"] is not None for r in rows)
    return [(r["ledger_id"], r["entry_id"], r["batch_index"], bytes(r["payload"]).decode()) for r in rows]


@pytest.mark.spark
def test_streaming_export_lands_messages_stops_on_sigterm_and_resumes_exactly(
    standalone: StandaloneProcess, tmp_path: Path, jobs: list[Job], request: pytest.FixtureRequest
) -> None:
    topic = f"persistent://public/default/stream-cli-{os.getpid()}"
    target, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    argv = [
        sys.executable,
        "-m",
        "magnetar.cli.jobs",
        "export",
        "--streaming",
        "--admin-url",
        standalone.admin_url,
        "--topic",
        topic,
        "--target",
        str(target),
        "--checkpoint",
        str(checkpoint),
        "--trigger-seconds",
        "1",
        "--name",
        "cli",
    ]
    ids = produce(standalone, topic, 1000, 0)  # before the start: startingOffsets earliest
    started = time.monotonic()
    job = Job(argv, tmp_path / "job.log")
    jobs.append(job)
    job.rows_exported(1000)
    first_rows = time.monotonic() - started
    ids += produce(standalone, topic, 500, 1000)  # while it runs: the next trigger or two
    landed = time.monotonic()
    job.rows_exported(500, timeout=60)
    latency = time.monotonic() - landed
    code, result = job.terminate()
    assert code == 0, "\n".join(job.seen[-40:])
    assert result["streaming"] is True and result["rows"] == 1500 and result["subscription"] == "magnetar-streaming-cli"

    # the progress subscription: made by the query on the broker. Spark tells a source that a
    # batch is done when it plans the next one, so at most the last batch is still behind it
    status, stats = admin_call(standalone, "GET", f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
    assert status == 200 and stats["subscriptions"]["magnetar-streaming-cli"]["msgBacklog"] <= 500

    # stopped, messages keep coming; started again from the same checkpoint it reads only those
    ids += produce(standalone, topic, 300, 1500)
    again = Job(argv, tmp_path / "job.log")
    jobs.append(again)
    again.rows_exported(300)
    code, result = again.terminate()
    assert code == 0 and result["rows"] == 300

    spark = request.getfixturevalue("spark")  # only now: one JVM at a time on the shared cores
    rows = read_ids(spark, str(target))
    assert len(rows) == 1800 and len(set(rows)) == 1800, f"{len(rows)} rows, {len(set(rows))} distinct"
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted(ids)
    assert sorted(int(r[3]) for r in rows) == list(range(1800))
    print(f"\nfirst 1000 rows after {first_rows:.1f}s (Spark's start included); 500 more within {latency:.1f}s")
