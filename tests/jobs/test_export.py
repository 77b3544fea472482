"""The topic export on local Spark (``local[2]``) against a real cluster (etcd, 3 bookies, 1 broker).

What is checked, always by reading the committed Parquet back with Spark and comparing the set
of message ids (ledger, entry, batch index) with the ids the producer was acknowledged:

- 1,000,000 messages exported exactly once; a re-run with nothing new writes nothing and leaves
  every file as it was;
- re-runs after more messages export only those (a partitioned topic, file:// URL target);
- a crash at every step of a run (in process: the run stopped between its steps), each followed
  by a re-run: no duplicate, nothing missing;
- a real crash: the job as its own process (``python -m magnetar.cli.jobs``), killed with SIGKILL
  once its first staged file exists (mid-write), then re-run;
- a namespace export; Pulsar's createSubscription (the export's progress); the CLI's result line
  and exit codes.

Only ``file://`` targets run here (no HDFS or object store on these machines); the commit goes
through Hadoop's FileSystem API, the same code path an ``s3a://`` or ``hdfs://`` target takes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import LocalCluster
from tests.support.polling import wait_for

from magnetar.client import aio
from magnetar.jobs.admin_client import AdminClient, AdminError
from magnetar.jobs.export import ExportRun, export, run_id
from magnetar.jobs.export_progress import ExportProgress, parse_position, subscription_name

pytestmark = pytest.mark.spark

Id = tuple[int, int, int]
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ helpers
async def _produce(url: str, topic: str, n: int, first: int) -> list[Id]:
    """Send ``n`` small messages (payload: their number, from ``first``), batched; the ids acked."""
    ids: list[Id] = []
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, max_pending_messages=20_000, batching_max_messages=1000)
        receipts = []
        for i in range(first, first + n):
            receipts.append(await producer.send_async(b"%d" % i))
            if len(receipts) >= 20_000:
                ids.extend((m.ledger_id(), m.entry_id(), m.batch_index()) for m in await asyncio.gather(*receipts))
                receipts.clear()
        ids.extend((m.ledger_id(), m.entry_id(), m.batch_index()) for m in await asyncio.gather(*receipts))
        await producer.close()
    return ids


def produce(cluster: LocalCluster, topic: str, n: int, first: int = 0) -> list[Id]:
    return asyncio.run(_produce(cluster.service_url, topic, n, first))


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient(cluster.admin_urls[0])


def read_ids(spark: Any, target: str, topic: str | None = None) -> Any:
    """The committed rows' ids (and payloads) as a DataFrame, optionally of one partition topic."""
    df = spark.read.parquet(target)
    if topic is not None:
        df = df.where(df.topic == topic)
    return df.select("topic", "ledger_id", "entry_id", "batch_index", "payload", "date")


def assert_exactly(spark: Any, target: str, expected: dict[str, list[Id]]) -> None:
    """The target holds each topic's ``expected`` ids exactly once (and nothing else)."""
    from pyspark.sql import functions as F

    got = read_ids(spark, target)
    total = sum(len(v) for v in expected.values())
    rows = got.count()
    distinct = got.select("topic", "ledger_id", "entry_id", "batch_index").distinct().count()
    assert (rows, distinct) == (total, total), f"{rows} rows, {distinct} distinct ids, {total} expected"
    want = spark.createDataFrame(
        [(t, lid, eid, b) for t, ids in expected.items() for (lid, eid, b) in ids],
        "topic string, ledger_id long, entry_id long, batch_index int",
    )
    have = got.select("topic", "ledger_id", "entry_id", "batch_index")
    assert want.exceptAll(have).count() == 0, "acknowledged messages missing from the export"
    assert have.exceptAll(want).count() == 0, "the export holds messages nobody was acknowledged"
    # The date column is the publish date (UTC) and a partition of the dataset.
    assert got.where(F.col("date").isNull()).count() == 0


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: (size, mtime in ns)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def committed_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob("date=*/*.parquet"))


def mark_delete(cluster: LocalCluster, topic: str, name: str) -> tuple[int, int]:
    cursors = admin(cluster).internal_stats(topic)["cursors"]
    return parse_position(cursors[subscription_name(name)]["markDeletePosition"])


def last_confirmed(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    return parse_position(admin(cluster).internal_stats(topic)["lastConfirmedEntry"])


@pytest.fixture(scope="module")
def cluster(jobs_cluster: LocalCluster) -> Iterator[LocalCluster]:
    yield jobs_cluster


# ------------------------------------------------------------------------------------------ tests
def test_create_subscription_is_pulsars(cluster: LocalCluster) -> None:
    """``PUT .../subscription/{sub}`` (Pulsar's createSubscription): the export's progress holder."""
    topic = "persistent://public/default/create-sub"
    ids = produce(cluster, topic, 10)
    a = admin(cluster)
    base = "persistent/public/default/create-sub/subscription"
    a.put(f"{base}/at-earliest", {"ledgerId": -1, "entryId": -1})
    a.put(f"{base}/at-latest")  # no body: MessageId.latest, as Pulsar
    first = ids[0]
    a.put(f"{base}/at-first", {"ledgerId": first[0], "entryId": first[1]})
    cursors = a.internal_stats(topic)["cursors"]
    assert cursors["at-earliest"]["markDeletePosition"] == f"{first[0]}:-1"
    assert cursors["at-latest"]["markDeletePosition"] == a.internal_stats(topic)["lastConfirmedEntry"]
    assert cursors["at-first"]["markDeletePosition"] == f"{first[0]}:{first[1] - 1}"
    with pytest.raises(AdminError) as exc:
        a.put(f"{base}/at-earliest", {"ledgerId": -1, "entryId": -1})
    assert exc.value.status == 409
    # Pulsar's deleteSubscription: how a user lets go of an export's hold on the backlog.
    a.delete(f"{base}/at-first")
    assert "at-first" not in a.internal_stats(topic)["cursors"]
    with pytest.raises(AdminError) as exc:
        a.delete(f"{base}/at-first")
    assert exc.value.status == 404
    # On a partitioned topic: one per partition.
    a.put("persistent/public/default/create-sub-p/partitions", 2)
    a.put("persistent/public/default/create-sub-p/subscription/s", {"ledgerId": -1, "entryId": -1})
    for i in range(2):
        assert "s" in a.internal_stats(f"persistent://public/default/create-sub-p-partition-{i}")["cursors"]


def test_export_a_million_messages_then_rerun_nothing_new(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    topic = "persistent://public/default/export-1m"
    t0 = time.monotonic()
    ids = produce(cluster, topic, 1_000_000)
    produced_s = time.monotonic() - t0
    target = tmp_path / "out"
    result = export(spark, cluster.admin_urls[0], topic=topic, target=str(target), name="big")
    print(f"\nproduce 1M: {produced_s:.1f}s, export: {result.seconds:.1f}s, {result.bytes / 1e6:.1f} MB Parquet")
    assert result.rows == 1_000_000
    assert result.summary()["rows"] == 1_000_000 and result.summary()["job"] == "export"
    assert mark_delete(cluster, topic, "big") == last_confirmed(cluster, topic)
    assert_exactly(spark, str(target), {topic: ids})
    # Every payload once: the rows are the messages, not just their ids.
    payloads = spark.read.parquet(str(target)).selectExpr("CAST(payload AS STRING) AS p")
    assert payloads.distinct().count() == 1_000_000
    # Layout: date=YYYY-MM-DD/<run>-<n>.parquet, nothing left in the export's work area.
    run = run_id("big", topic, (ids[0][0], -1))
    files = committed_files(target)
    assert files and all(f.startswith("date=") and Path(f).name.startswith(run + "-") for f in files)
    assert not (target / "_magnetar" / "big" / "staging").exists()
    assert not (target / "_magnetar" / "big" / "manifest.json").exists()
    assert result.bytes == sum((target / f).stat().st_size for f in files)

    before = snapshot(target)
    again = export(spark, cluster.admin_urls[0], topic=topic, target=str(target), name="big")
    assert (again.rows, again.bytes, again.files) == (0, 0, [])
    assert snapshot(target) == before, "a re-run with nothing new changed files"


def test_rerun_exports_only_what_is_new(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """A partitioned topic (two partitions), a file:// URL target, three runs."""
    topic = "persistent://public/default/export-inc"
    admin(cluster).put("persistent/public/default/export-inc/partitions", 2)
    parts = [f"{topic}-partition-{i}" for i in range(2)]
    target = f"file://{tmp_path}/out"
    expected: dict[str, list[Id]] = {p: [] for p in parts}
    sent = 0
    for round_, n in enumerate((3000, 1500, 700)):
        for p in parts:
            expected[p] += produce(cluster, p, n, sent)
            sent += n
        before = set(committed_files(tmp_path / "out"))
        result = export(spark, cluster.admin_urls[0], topic=topic, target=target, name="inc")
        assert result.rows == 2 * n, f"round {round_}"
        assert result.topics == 2
        new_files = set(committed_files(tmp_path / "out")) - before
        assert before <= set(committed_files(tmp_path / "out")), "earlier files must stay"
        new_rows = spark.read.parquet(*[f"{target}/{f}" for f in sorted(new_files)]).count()
        assert new_rows == 2 * n, "the new files hold exactly the new messages"
        assert_exactly(spark, target, expected)
        for p in parts:
            assert mark_delete(cluster, p, "inc") == last_confirmed(cluster, p)


def _crash_at(run: ExportRun, point: str) -> None:
    """Do ``run``'s steps up to ``point`` and stop there, as a killed job would."""
    run.plan()
    if point == "after-plan":
        return
    run.write()
    if point == "after-write":
        return
    moves = run.committer.plan_moves(run.runs.values())
    run.committer.write_manifest(moves)
    if point == "mid-move":
        first = next(iter(moves))
        run.committer.move({first: moves[first]})  # one topic's files moved, the other's not
        return
    run.committer.move(moves)
    if point == "after-move":
        return
    if point == "mid-commit":
        run.progress.commit(run.pending[0], run.ends[run.pending[0]])
        return
    assert point == "after-commit"
    for t in run.pending:
        run.progress.commit(t, run.ends[t])  # manifest and staging not yet dropped


@pytest.mark.parametrize("point", ["after-plan", "after-write", "mid-move", "after-move", "mid-commit", "after-commit"])
def test_crash_at_every_step_then_rerun(spark: Any, cluster: LocalCluster, tmp_path: Path, point: str) -> None:
    """Two topics; a run stops at ``point``; more messages come; the re-run leaves each message
    exactly once (and a third run with nothing new keeps it so)."""
    topics = [f"persistent://public/default/crash-{point}-{i}" for i in range(2)]
    target = str(tmp_path / "out")
    expected = {t: produce(cluster, t, 2500) for t in topics}
    crashed = ExportRun(spark, cluster.admin_urls[0], topics=",".join(topics), target=target, name="crash")
    _crash_at(crashed, point)
    if point in ("mid-move", "after-move", "mid-commit", "after-commit"):
        assert committed_files(tmp_path / "out"), "the crash point leaves committed files behind"
    for t in topics:
        expected[t] += produce(cluster, t, 500, 2500)
    result = export(spark, cluster.admin_urls[0], topics=",".join(topics), target=target, name="crash")
    assert_exactly(spark, target, expected)
    for t in topics:
        assert mark_delete(cluster, t, "crash") == last_confirmed(cluster, t)
    already = {"mid-commit": 2500, "after-commit": 5000}.get(point, 0)
    assert result.rows == 6000 - already
    assert not (tmp_path / "out" / "_magnetar" / "crash" / "manifest.json").exists()


def test_killed_mid_write_then_rerun(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """The job in its own process (``magnetar-jobs export``), SIGKILLed while Spark writes."""
    topic = "persistent://public/default/export-kill"
    ids = produce(cluster, topic, 300_000)
    target = tmp_path / "out"
    staging = target / "_magnetar" / "kill" / "staging"
    argv = [
        sys.executable,
        "-m",
        "magnetar.cli.jobs",
        "export",
        "--admin-url",
        cluster.admin_urls[0],
        "--topic",
        topic,
        "--target",
        str(target),
        "--name",
        "kill",
        "--entries-per-partition",
        "100",
    ]
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        wait_for(
            "a staged Parquet file (the job is writing)",
            lambda: job.poll() is not None or any(p.is_file() and p.suffix == ".parquet" for p in staging.rglob("*")),
            timeout=180,
            interval=0.02,
        )
        assert job.poll() is None, f"the job ended before it could be killed:\n{(tmp_path / 'job.log').read_text()}"
        os.killpg(job.pid, signal.SIGKILL)  # the driver and its JVM (same session)
        assert job.wait(30) == -signal.SIGKILL
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        log.close()
    # Every process of the job's session is gone (a surviving JVM could still write to staging).
    wait_for("the killed job's processes to exit", lambda: not _session_alive(job.pid), timeout=30)
    assert mark_delete(cluster, topic, "kill") == (ids[0][0], -1), "the killed run committed nothing"
    assert committed_files(target) == []
    more = produce(cluster, topic, 1000, 300_000)
    result = export(spark, cluster.admin_urls[0], topic=topic, target=str(target), name="kill")
    assert result.rows == 301_000
    assert_exactly(spark, str(target), {topic: ids + more})


def _session_alive(sid: int) -> bool:
    """Whether any process still runs in session ``sid``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            return True
    return False


def test_namespace_export(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    a = admin(cluster)
    a.put("namespaces/public/export-ns")
    a.put("persistent/public/export-ns/parted/partitions", 2)
    expected = {
        "persistent://public/export-ns/a": produce(cluster, "persistent://public/export-ns/a", 1200),
        "persistent://public/export-ns/b": produce(cluster, "persistent://public/export-ns/b", 300),
        "persistent://public/export-ns/parted-partition-0": produce(
            cluster, "persistent://public/export-ns/parted-partition-0", 400
        ),
        "persistent://public/export-ns/parted-partition-1": produce(
            cluster, "persistent://public/export-ns/parted-partition-1", 500
        ),
    }
    target = str(tmp_path / "out")
    result = export(spark, cluster.admin_urls[0], namespace="public/export-ns", target=target, name="ns")
    assert (result.rows, result.topics) == (2400, 4)
    assert_exactly(spark, target, expected)
    counts = {r["topic"]: r["count"] for r in spark.read.parquet(target).groupBy("topic").count().collect()}
    assert counts == {t: len(v) for t, v in expected.items()}
    partitions = {
        r["topic"]: r["partition"] for r in spark.read.parquet(target).select("topic", "partition").distinct().collect()
    }
    assert partitions["persistent://public/export-ns/a"] == -1
    assert partitions["persistent://public/export-ns/parted-partition-1"] == 1
    for t in expected:
        assert mark_delete(cluster, t, "ns") == last_confirmed(cluster, t)


def test_cli_prints_the_result_and_fails_with_a_nonzero_code(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    topic = "persistent://public/default/export-cli"
    ids = produce(cluster, topic, 2000)
    target = str(tmp_path / "out")
    base = [
        sys.executable,
        "-m",
        "magnetar.cli.jobs",
        "export",
        "--admin-url",
        cluster.admin_urls[0],
        "--target",
        target,
    ]
    done = subprocess.run(
        [*base, "--topic", topic, "--name", "cli"], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("MAGNETAR_RESULT ")]
    assert len(lines) == 1, done.stdout
    doc = json.loads(lines[0].split(" ", 1)[1])
    assert doc["job"] == "export" and doc["rows"] == 2000 and doc["topics"] == 1 and doc["target"] == target
    assert doc["bytes"] > 0 and doc["seconds"] > 0
    assert_exactly(spark, target, {topic: ids})
    missing = subprocess.run(
        [*base, "--topic", "persistent://public/default/no-such-topic"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert missing.returncode != 0 and "MAGNETAR_RESULT" not in missing.stdout
    assert "no-such-topic" in missing.stderr
    # The progress is an ordinary subscription: Pulsar's admin sees the export's backlog.
    progress = ExportProgress(admin(cluster), "cli")
    assert progress.position(topic) == last_confirmed(cluster, topic)


def test_spark_submit_runs_the_main_file(cluster: LocalCluster, tmp_path: Path) -> None:
    """What a SparkApplication (or the operator's submitter Job) runs: ``spark-submit`` of the
    file ``magnetar/jobs/main.py`` (here with a local master)."""
    import pyspark

    topic = "persistent://public/default/export-submit"
    produce(cluster, topic, 500)
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    main_file = REPO / "services" / "magnetar" / "jobs" / "main.py"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    argv = [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(main_file), "export"]
    argv += ["--admin-url", cluster.admin_urls[0], "--topic", topic, "--target", str(tmp_path / "out")]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("MAGNETAR_RESULT ")).split(" ", 1)[1])
    assert (doc["job"], doc["rows"]) == ("export", 500)
    assert mark_delete(cluster, topic, "export") == last_confirmed(cluster, topic)
