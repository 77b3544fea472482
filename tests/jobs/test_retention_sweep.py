"""The retention sweep on local Spark against a real broker and bookie, and Pulsar's ``trim-topic``.

The broker here runs in this process (a ``Standalone`` node on a thread of its own: real broker,
real bookie, real LMDB metadata, real TCP and HTTP) for one reason: its ``clock`` can be moved, so a
retention time limit (whole minutes) is crossed without waiting — the broker evaluates its rule two
hours ahead and the sweep is given the same ``now``. Ledger close times are then two hours old for a
one-hour limit: far from the limit both ways. Message TTL is measured on the real clock by the
broker's expire verb, so the TTL case uses a one-second TTL on ledgers closed seconds before.

Set-up that leaves the broker something to trim: topics are written and acknowledged under infinite
retention, unloaded, and only then given their real policies (a loaded topic would be trimmed by the
broker at once on the policy change or the next acknowledgement). The broker's periodic retention
and expiry checks are off, so nothing but the sweep's ``apply`` can remove a ledger. Pulsar brokers
behave alike: retention is enforced on loaded topics, at those moments and on a timer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar
from magnetar.broker.config import BrokerConfig
from magnetar.jobs.admin_client import AdminClient, topic_path
from magnetar.jobs.sweep_rules import TopicPolicies, verdict_of
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.node.standalone import Standalone, StandaloneConfig

T = TypeVar("T")
AHEAD = 7200.0  # the broker's clock and the sweep's ``now``: two hours ahead
PAYLOAD = b"x" * 40_000  # 10 entries a ledger: 400 KB ledgers
PER_LEDGER = 10
MESSAGES = 45  # four full ledgers and a half one, closed at unload: five closed ledgers
MB = 1024 * 1024


class ThreadedStandalone:
    """A ``Standalone`` node running on its own event loop thread, driven from the test's thread."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.node = Standalone(StandaloneConfig(data_dir, config, bookie_port=0))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sweep-broker", daemon=True)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> ThreadedStandalone:
        self.thread.start()
        self.call(self.node.start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self.node.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    @property
    def broker(self) -> Any:
        assert self.node.broker is not None
        return self.node.broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedStandalone]:
    config = BrokerConfig(
        port=0,
        web_port=0,
        retention_check_interval_seconds=0,  # off: only the sweep's apply trims
        message_expiry_check_interval_minutes=0,  # off: TTL applies only when the sweep asks
        managed_ledger=ManagedLedgerConfig(max_entries_per_ledger=PER_LEDGER, min_ledger_seconds=0),
    )
    with ThreadedStandalone(tmp_path_factory.mktemp("sweep") / "data", config) as node:
        node.broker.clock = lambda: time.time() + AHEAD
        yield node


def fill(service_url: str, topic: str, *, ack: int) -> None:
    """Publish ``MESSAGES`` (one entry each) to ``topic`` and acknowledge the first ``ack`` of them."""
    with magnetar.Client(service_url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        results: list[Any] = []
        for _ in range(MESSAGES):
            producer.send_async(PAYLOAD, lambda res, _msg_id: results.append(res))
        producer.flush()
        assert results == [magnetar.Result.Ok] * MESSAGES
        for i in range(MESSAGES):
            msg = consumer.receive(timeout_millis=10_000)
            if i < ack:
                consumer.acknowledge(msg)
        consumer.close()


def closed_ledgers(stats: dict[str, Any]) -> list[dict[str, Any]]:
    return [doc for doc in stats["ledgers"] if doc["timestamp"] > 0]


@pytest.fixture(scope="module")
def topics(broker: ThreadedStandalone) -> dict[str, str]:
    """The topics of the sweep test, written, acknowledged, unloaded and then given their policies."""
    admin = AdminClient(broker.broker.web_url)
    forever = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    for tenant in ("sweep", "keep"):
        admin.put(f"tenants/{tenant}", {"adminRoles": [], "allowedClusters": []})
    none = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    layout: dict[str, tuple[str, str, int, dict[str, Any]]] = {
        "timed": ("sweep/timed", "t", MESSAGES, {"retention": {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}}),
        "sized": ("sweep/sized", "t", MESSAGES, {"retention": {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}}),
        "none": ("sweep/none", "consumed", MESSAGES, {"retention": none}),
        "half": ("sweep/none", "half", 25, {}),
        "unacked": ("sweep/none", "unacked", 0, {}),
        "override": ("sweep/none", "override", MESSAGES, {}),
        "forever": ("sweep/forever", "t", MESSAGES, {"retention": forever}),
        "ttl": ("keep/ttl", "t", 0, {"retention": none, "messageTTL": 1}),
    }
    names: dict[str, str] = {}
    for ns in {ns for ns, *_ in layout.values()}:
        admin.put(f"namespaces/{ns}")
        admin.post(f"namespaces/{ns}/retention", forever)  # nothing is trimmed while writing
    for key, (ns, local, ack, _) in layout.items():
        names[key] = f"persistent://{ns}/{local}"
        fill(broker.broker.broker_url, names[key], ack=ack)
    for name in names.values():
        admin.put(f"{topic_path(name)}/unload")
    wait_for("topics unloaded", lambda: not any(n in broker.broker.topics for n in names.values()))
    for ns, _, _, policies in layout.values():
        for path, body in policies.items():
            admin.post(f"namespaces/{ns}/{path}", body)
    # Topic level over namespace level: 0/0 in the namespace, infinite for this topic.
    admin.post(f"{topic_path(names['override'])}/retention", forever)
    return names


def all_stats(admin: AdminClient, names: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {key: admin.internal_stats(name) for key, name in names.items()}


def expected(stats: dict[str, dict[str, Any]]) -> dict[str, tuple[list[int], str]]:
    """What each topic may lose, worked out from its ledgers by hand (not through the rule)."""
    ids = {key: [doc["ledgerId"] for doc in closed_ledgers(s)] for key, s in stats.items()}
    for key in ("timed", "sized", "none", "ttl"):
        assert len(ids[key]) == 5, (key, stats[key]["ledgers"])  # four full ledgers, one half, all closed
    total = sum(doc["size"] for doc in stats["sized"]["ledgers"])
    sized: list[int] = []
    for doc in closed_ledgers(stats["sized"]):  # the oldest go while at least 1 MB stays
        if total - doc["size"] < MB:
            break
        total -= doc["size"]
        sized.append(doc["ledgerId"])
    assert 0 < len(sized) < 5
    return {
        "timed": (ids["timed"], "retention-time"),
        "sized": (sized, "retention-size"),
        "none": (ids["none"], "consumed-no-retention"),
        "half": (ids["half"][:2], "consumed-no-retention"),  # 25 acknowledged: two ledgers and a half
        "unacked": ([], ""),
        "override": ([], ""),
        "forever": ([], ""),
        "ttl": (ids["ttl"], "ttl"),
    }


def by_topic(rows: list[Any], names: dict[str, str]) -> dict[str, tuple[list[int], set[str]]]:
    out: dict[str, tuple[list[int], set[str]]] = {}
    for key, name in names.items():
        mine = [r for r in rows if r.topic == name]
        out[key] = ([r.ledger_id for r in mine], {r.reason for r in mine})
    return out


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_dry_run_reports_what_apply_then_trims_and_changes_nothing(
    spark: Any, broker: ThreadedStandalone, topics: dict[str, str], tmp_path: Path
) -> None:
    from magnetar.jobs.retention_sweep import add_arguments, retention_sweep, run_from_args

    admin = AdminClient(broker.broker.web_url)
    url = broker.broker.web_url
    before = all_stats(admin, topics)  # loads every topic; loading trims nothing
    want = expected(before)
    now = time.time() + AHEAD

    dry = retention_sweep(spark, url, dry_run=True, report=str(tmp_path / "dry"), now=now)
    assert all_stats(admin, topics) == before  # same ledgers, cursors, positions: nothing changed
    assert not dry.errors
    found = by_topic(dry.rows, topics)
    for key, (ledgers, reason) in want.items():
        assert found[key][0] == ledgers, (key, found[key], before[key]["ledgers"], before[key]["cursors"])
        assert found[key][1] == ({reason} if ledgers else set()), key
    assert dry.topics == len(topics)
    assert dry.ledgers == sum(len(ledgers) for ledgers, _ in want.values())

    # The report as written: the Parquet rows and the summary, per tenant and per namespace.
    written = spark.read.parquet(str(tmp_path / "dry" / "ledgers")).collect()
    assert sorted((r.topic, r.ledger_id, r.reason, r.bytes, r.messages) for r in written) == sorted(
        (r.topic, r.ledger_id, r.reason, r.bytes, r.messages) for r in dry.rows
    )
    sizes = {(key, d["ledgerId"]): (d["size"], d["messages"]) for key, s in before.items() for d in s["ledgers"]}
    for key, name in topics.items():
        for r in (r for r in dry.rows if r.topic == name):
            assert (r.bytes, r.messages) == sizes[(key, r.ledger_id)]
            assert r.messages == PER_LEDGER or r.ledger_id == want[key][0][-1]  # the half ledger: 5
    summary = (tmp_path / "dry" / "summary.md").read_text()
    assert "dry run" in summary
    sweep_bytes = sum(r.bytes for r in dry.rows if r.tenant == "sweep")
    assert f"| sweep | 4 | {sum(len(want[k][0]) for k in ('timed', 'sized', 'none', 'half'))} |" in summary
    assert f"| {sweep_bytes} (" in summary
    assert "| keep/ttl | 1 | 5 |" in summary

    # Apply, through the entry point's command line; the TTL topic's last ledger must be past its
    # one-second TTL on the real clock (the broker's expire verb measures it there).
    last_close = max(d["timestamp"] for d in before["ttl"]["ledgers"]) / 1000
    time.sleep(max(0.0, last_close + 3 - time.time()))
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--admin-url", url, "--report", str(tmp_path / "applied"), "--apply", "--now", str(now)])
    doc = run_from_args(spark, args)
    assert doc["job"] == "retention-sweep" and doc["applied"] is True
    assert doc["ledgers"] == dry.ledgers and doc["trimmedLedgers"] == dry.ledgers
    assert doc["bytes"] == dry.bytes and doc["messages"] == dry.messages and doc["errors"] == 0
    json.dumps(doc)  # what main prints after MAGNETAR_RESULT

    after = all_stats(admin, topics)
    for key in topics:
        gone = [d["ledgerId"] for d in before[key]["ledgers"] if d not in after[key]["ledgers"]]
        kept_before = [d for d in before[key]["ledgers"] if d["ledgerId"] not in gone]
        assert gone == want[key][0], (key, gone)  # exactly the reported ledgers were trimmed
        assert after[key]["ledgers"] == kept_before, key  # and nothing else changed
    # The subscription that was never acknowledged still has all its messages.
    assert after["unacked"]["cursors"]["s"] == before["unacked"]["cursors"]["s"]
    # The TTL topic's subscription was expired by the broker before the trim.
    assert after["ttl"]["cursors"]["s"]["markDeletePosition"] != before["ttl"]["cursors"]["s"]["markDeletePosition"]

    again = retention_sweep(spark, url, dry_run=True, now=now)
    assert again.rows == []  # nothing left to remove


def test_verdict_counts_a_ledger_expired_by_ttl_only_when_it_closed_before_now_minus_ttl() -> None:
    """TTL at ledger granularity, conservative (sweep_rules docstring): the rule runs without
    Spark or a broker, on internal stats as the broker serves them."""
    now = 10_000.0
    stats = {
        "state": "LedgerOpened",
        "lastConfirmedEntry": "4:2",
        "ledgers": [
            {"ledgerId": 1, "entries": 10, "size": 100, "timestamp": 8_000_000, "messages": 30},
            {"ledgerId": 2, "entries": 10, "size": 100, "timestamp": 9_000_000, "messages": 10},
            {"ledgerId": 3, "entries": 10, "size": 100, "timestamp": 9_950_000, "messages": 10},
            {"ledgerId": 4, "entries": 3, "size": 30, "timestamp": 0, "messages": 3},
        ],
        "cursors": {
            "s": {"markDeletePosition": "1:4"},
            "__compaction": {"markDeletePosition": "4:2"},
        },
        "retainFrom": None,
    }
    verdict = verdict_of("persistent://a/b/c", stats, TopicPolicies(0, 0, ttl_seconds=500), now)
    # Ledger 1 (closed 2000 s ago) and 2 (1000 s ago) are past the TTL, 3 (50 s ago) is not.
    assert [(r.ledger_id, r.reason, r.messages) for r in verdict.rows] == [(1, "ttl", 30), (2, "ttl", 10)]
    assert verdict.expire == ["s"]  # the compaction cursor is never expired
    no_ttl = verdict_of("persistent://a/b/c", stats, TopicPolicies(0, 0, 0), now)
    assert no_ttl.rows == [] and no_ttl.expire == []  # ledger 1 is only half acknowledged
    held = dict(stats, retainFrom="0:0")  # a broker feature still reads from before ledger 1
    assert verdict_of("persistent://a/b/c", held, TopicPolicies(0, 0, 500), now).rows == []


@pytest.fixture
def trim_standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    with run_standalone(
        tmp_path,
        "--managed-ledger-max-entries-per-ledger",
        "5",
        "--managed-ledger-min-ledger-rollover-time-minutes",
        "0",
        "--retention-check-interval-seconds",
        "3600",
    ) as sa:
        yield sa


def trim_topic(sa: StandaloneProcess, topic: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, "topics", "trim-topic", topic]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_trim_topic_verb_trims_every_partition_on_request(trim_standalone: StandaloneProcess) -> None:
    """``magnetar-admin topics trim-topic`` (Pulsar's ``POST .../trim``) on a partitioned topic."""
    admin = AdminClient(trim_standalone.admin_url)
    admin.put("namespaces/public/trim")
    admin.post("namespaces/public/trim/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    topic = "persistent://public/trim/p"
    admin.put(f"{topic_path(topic)}/partitions", 2)
    with magnetar.Client(trim_standalone.service_url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            producer.send(f"m{i}".encode())
        for _ in range(40):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        consumer.close()
    admin.put(f"{topic_path(topic)}/unload")
    admin.post("namespaces/public/trim/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    parts = [f"{topic}-partition-{i}" for i in range(2)]
    before = {p: [d["ledgerId"] for d in admin.internal_stats(p)["ledgers"]] for p in parts}
    assert all(len(ids) >= 3 for ids in before.values()), before  # loaded again: nothing trimmed yet
    out = trim_topic(trim_standalone, topic)
    assert out.returncode == 0, out.stderr
    for p in parts:
        after = [d["ledgerId"] for d in admin.internal_stats(p)["ledgers"]]
        assert after == before[p][-1:], (p, before[p], after)  # only the ledger being written is left
    missing = trim_topic(trim_standalone, "persistent://public/trim/nope")
    assert missing.returncode == 1 and "404" in missing.stderr
