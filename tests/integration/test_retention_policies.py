"""Retention of acknowledged messages on real brokers, as Pulsar's ``RetentionPolicies``.

Ledgers roll over every 5 entries here (``--managed-ledger-max-entries-per-ledger``, with no
minimum age) so that a few messages make several ledgers; the retention check runs every 0.2 s
(``--retention-check-interval-seconds``). The time limit is in minutes, so the time test runs the
broker in this process and moves its clock (``BrokerService.clock``) instead of waiting: the
trim then comes from the periodic check alone, with no acknowledgement or roll-over to set it off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.admin import create_namespace, topic_stats
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar
import magnetar.asyncio as aio
from magnetar.broker.config import BrokerConfig
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.node.standalone import Standalone, StandaloneConfig

pytestmark = pytest.mark.timeout(120)

MB = 1024 * 1024
PAYLOAD = b"r" * (100 * 1024)  # 5 per ledger: ~0.5 MB ledgers


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(
        tmp_path_factory.mktemp("retention"),
        "--retention-check-interval-seconds",
        "0.2",
        "--managed-ledger-max-entries-per-ledger",
        "5",
        "--managed-ledger-min-ledger-rollover-time-minutes",
        "0",
    ) as sa:
        yield sa


def namespace(sa: StandaloneProcess, minutes: int, size_mb: int) -> str:
    return create_namespace(sa, "ret", retention={"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb})


def publish_and_consume(sa: StandaloneProcess, topic: str, n: int, *, ack: bool = True) -> None:
    with magnetar.Client(sa.service_url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(n):
            producer.send(PAYLOAD)
        for _ in range(n):
            msg = consumer.receive(timeout_millis=5000)
            if ack:
                consumer.acknowledge(msg)
        consumer.close()


def test_size_retention_keeps_at_least_the_limit_of_consumed_data(standalone: StandaloneProcess) -> None:
    topic = f"persistent://{namespace(standalone, -1, 1)}/t"
    publish_and_consume(standalone, topic, 30)  # ~3 MB in 6 ledgers, all acknowledged
    # Pulsar's rule: the oldest consumed ledgers go while the topic would still hold >= 1 MB.
    wait_for("trimming", lambda: len(topic_stats(standalone, topic)["ledgers"]) < 6)
    time.sleep(0.5)  # more checks (0.2 s apart) must not trim further
    after = topic_stats(standalone, topic)
    assert after["storageSize"] >= 1 * MB
    assert after["storageSize"] < 1 * MB + 2 * 5 * len(PAYLOAD), after["storageSize"]  # within one ledger of it


def test_no_retention_trims_everything_consumed_and_infinite_retention_nothing(standalone: StandaloneProcess) -> None:
    none = f"persistent://{namespace(standalone, 0, 0)}/t"
    forever = f"persistent://{namespace(standalone, -1, -1)}/t"
    for topic in (none, forever):
        publish_and_consume(standalone, topic, 20)
    wait_for("trimming", lambda: topic_stats(standalone, none)["storageSize"] <= 5 * len(PAYLOAD) + 4096)
    assert topic_stats(standalone, forever)["entries"] == 20


def test_unacknowledged_data_is_never_trimmed(standalone: StandaloneProcess) -> None:
    topic = f"persistent://{namespace(standalone, 0, 0)}/t"
    publish_and_consume(standalone, topic, 20, ack=False)
    time.sleep(0.6)  # three retention checks
    assert topic_stats(standalone, topic)["entries"] == 20
    assert topic_stats(standalone, topic)["subscriptions"]["s"]["msgBacklog"] == 20


async def test_time_retention_trims_consumed_ledgers_once_older_than_the_limit(tmp_path: Path) -> None:
    config = BrokerConfig(
        port=0,
        web_port=0,
        retention_check_interval_seconds=0.1,
        managed_ledger=ManagedLedgerConfig(max_entries_per_ledger=5, min_ledger_seconds=0),
    )
    node = Standalone(StandaloneConfig(tmp_path / "data", config, bookie_port=0))
    await node.start()
    try:
        broker = node.broker
        assert broker is not None
        await broker.resources.create_namespace("public", "timed", None)
        await broker.resources.set_namespace_policy(
            "public", "timed", "retention_policies", {"retentionTimeInMinutes": 1, "retentionSizeInMB": -1}
        )
        topic = "persistent://public/timed/t"
        client = aio.Client(broker.broker_url)
        try:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic, batching_enabled=False)
            for i in range(12):
                await producer.send(f"m{i}".encode())
            for _ in range(12):
                await consumer.acknowledge(await consumer.receive())
        finally:
            await client.close()
        ml = broker.topics[topic].ml
        before = ml.ledger_ids
        assert len(before) == 3  # two closed, the third being written
        await asyncio.sleep(0.5)  # five retention checks
        assert ml.ledger_ids == before  # within the minute: kept
        broker.clock = lambda: time.time() + 61  # a minute and a second later
        for _ in range(200):  # poll, up to 10 s
            if ml.ledger_ids == before[2:]:
                break
            await asyncio.sleep(0.05)
        assert ml.ledger_ids == before[2:]  # both closed ledgers expired; the current one stays
    finally:
        await node.stop()
