"""Backlog quotas on a real standalone broker: the three policies end to end, with the error text a
user sees, by size and by age, topic level over namespace level, the rule that a quota stays
below retention on every path, and the magnetar-admin verbs.

The broker checks quotas every 0.2 s here (``--backlog-quota-check-interval-seconds``; Pulsar's
default is 60 s); tests poll with a deadline for the check to have run, never sleep for it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.admin import create_namespace, topic_stats
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar
from magnetar.client.errors import (
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    Timeout,
)

pytestmark = pytest.mark.timeout(120)

PAYLOAD = b"x" * 1000


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(
        tmp_path_factory.mktemp("quota"),
        "--backlog-quota-check-interval-seconds",
        "0.2",
        "--managed-ledger-max-entries-per-ledger",
        "10",
        "--managed-ledger-min-ledger-rollover-time-minutes",
        "0",
    ) as sa:
        yield sa


def namespace(sa: StandaloneProcess, **policies: Any) -> str:
    return create_namespace(sa, "q", **policies)


def fill(producer: magnetar.Producer, n: int) -> None:
    for _ in range(n):
        producer.send(PAYLOAD)


def test_producer_exception_fails_sends_and_producer_creation_at_once(standalone: StandaloneProcess) -> None:
    ns = namespace(standalone, backlogQuota={"limitSize": 10_000, "policy": "producer_exception"})
    topic = f"persistent://{ns}/t"
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False)
        fill(producer, 12)  # ~12 KB of backlog: over the 10,000-byte quota
        wait_for("the quota check", lambda: topic_stats(standalone, topic)["backlogQuotaExceeded"])
        started = time.monotonic()
        with pytest.raises(ProducerBlockedQuotaExceededException) as info:
            producer.send(b"one more")
        assert time.monotonic() - started < 2.0  # at once, not at the send timeout
        text = str(info.value)
        assert re.fullmatch(
            rf"backlog quota exceeded on {re.escape(topic)}: destination_storage \(size\): "
            r"backlog is \d+ bytes, limitSize is 10000 bytes \(policy producer_exception\)",
            text,
        ), text
        assert int(re.search(r"backlog is (\d+) bytes", text).group(1)) >= 10_000  # type: ignore[union-attr]
        with pytest.raises(ProducerBlockedQuotaExceededException, match="Cannot create producer on topic with backlog"):
            client.create_producer(topic)
        # The consumer catches up: the next check lifts the block and sends pass again.
        for _ in range(12):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        wait_for("the block to lift", lambda: topic_stats(standalone, topic)["backlogQuotaExceeded"] is None)
        producer.send(b"accepted again")
        assert consumer.receive(timeout_millis=5000).data() == b"accepted again"


def test_producer_request_hold_holds_sends_until_the_send_timeout_or_until_consumers_catch_up(
    standalone: StandaloneProcess,
) -> None:
    ns = namespace(standalone, backlogQuota={"limitSize": 10_000, "policy": "producer_request_hold"})
    topic = f"persistent://{ns}/t"
    with magnetar.Client(standalone.service_url, operation_timeout_seconds=2) as client:
        consumer = client.subscribe(topic, "slow")
        impatient = client.create_producer(topic, batching_enabled=False, send_timeout_millis=1500)
        patient = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
        fill(impatient, 12)
        wait_for("the quota check", lambda: topic_stats(standalone, topic)["backlogQuotaExceeded"])
        started = time.monotonic()
        with pytest.raises(Timeout, match="send_timeout_millis"):
            impatient.send(b"held until it times out")
        waited = time.monotonic() - started
        assert 1.3 < waited < 5.0, waited  # it waited for its send timeout, no more
        # Producer creation is refused: retried until the operation timeout, then reported.
        with pytest.raises(ProducerBlockedQuotaExceededError) as info:
            client.create_producer(topic)
        text = str(info.value)
        assert text.startswith("Cannot create producer on topic with backlog quota exceeded: "), text
        assert "destination_storage (size): backlog is" in text and "(policy producer_request_hold)" in text
        # A send that waits longer succeeds once the consumer acknowledges.
        results: list[Any] = []
        patient.send_async(b"waits", lambda res, msg_id: results.append(res))
        wait_for("the send to be held", lambda: topic_stats(standalone, topic)["publishHeldByBacklogQuota"] >= 2)
        assert results == []
        for _ in range(12):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        wait_for("the held send to be stored", lambda: results, timeout=15)
        assert results == [magnetar.Result.Ok]
        # Held sends are stored in the order they came (the timed-out one too: its outcome was unknown).
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
        assert got == [b"held until it times out", b"waits"]


def test_consumer_backlog_eviction_moves_the_slowest_subscription_within_the_quota(
    standalone: StandaloneProcess,
) -> None:
    ns = namespace(standalone, backlogQuota={"limitSize": 20_000, "policy": "consumer_backlog_eviction"})
    topic = f"persistent://{ns}/t"
    with magnetar.Client(standalone.service_url) as client:
        slow = client.subscribe(topic, "slow")
        fast = client.subscribe(topic, "fast")
        producer = client.create_producer(topic, batching_enabled=False)
        fill(producer, 60)  # ~60 KB: three times the quota
        for _ in range(60):
            fast.acknowledge(fast.receive(timeout_millis=5000))
        # Eviction may take more than one check (either subscription can be the slowest until
        # "fast" has acknowledged), and "fast"'s acknowledgments travel in groups, so the backlog
        # can be within the quota before the broker has all of them: wait for the state both must
        # reach, then check the slow one's share of it.
        after = wait_for(
            "eviction within the quota and every acknowledgment of 'fast' applied",
            lambda: (
                (st := topic_stats(standalone, topic))["backlogSize"] <= 20_000
                and st["subscriptions"]["fast"]["msgBacklog"] == 0
                and st
            ),
        )
        assert after["subscriptions"]["slow"]["msgBacklog"] <= 20  # ~1 KB each: within the quota
        # Sends are never refused under eviction.
        producer.send(b"still accepted")
        slow.close()


def test_time_quota_counts_the_age_of_the_oldest_unacknowledged_message(standalone: StandaloneProcess) -> None:
    ns = namespace(standalone)
    status, body = admin_call(
        standalone,
        "POST",
        f"/admin/v2/namespaces/{ns}/backlogQuota?backlogQuotaType=message_age",
        {"limitTime": 1, "policy": "producer_exception"},
    )
    assert status == 204, body
    quotas = admin_call(standalone, "GET", f"/admin/v2/namespaces/{ns}/backlogQuotaMap")[1]
    assert quotas == {"message_age": {"limit": -1, "limitSize": -1, "limitTime": 1, "policy": "producer_exception"}}
    topic = f"persistent://{ns}/t"
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"old")
        wait_for("the age quota", lambda: topic_stats(standalone, topic)["backlogQuotaExceeded"])
        with pytest.raises(ProducerBlockedQuotaExceededException) as info:
            producer.send(b"new")
        assert re.fullmatch(
            rf"backlog quota exceeded on {re.escape(topic)}: message_age \(time\): oldest unacknowledged message "
            r"\(subscription slow\) is \d+\.\d s old, limitTime is 1 s \(policy producer_exception\)",
            str(info.value),
        ), str(info.value)
        s = topic_stats(standalone, topic)
        assert s["backlogQuotaLimitTime"] == 1 and s["oldestBacklogMessageSubscriptionName"] == "slow"
        # Removing the age quota (by type) lifts the block at once.
        assert admin_call(standalone, "DELETE", f"/admin/v2/namespaces/{ns}/backlogQuota?backlogQuotaType=message_age")[
            0
        ] in (200, 204)
        wait_for("the block to lift", lambda: topic_stats(standalone, topic)["backlogQuotaExceeded"] is None)
        producer.send(b"accepted")


def test_age_eviction_acknowledges_what_is_older_than_the_quota(standalone: StandaloneProcess) -> None:
    ns = namespace(standalone)
    admin_call(
        standalone,
        "POST",
        f"/admin/v2/namespaces/{ns}/backlogQuota?backlogQuotaType=message_age",
        {"limitTime": 1, "policy": "consumer_backlog_eviction"},
    )
    topic = f"persistent://{ns}/t"
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "slow")
        producer = client.create_producer(topic, batching_enabled=False)
        fill(producer, 5)
        assert topic_stats(standalone, topic)["subscriptions"]["slow"]["msgBacklog"] == 5
        wait_for("age eviction", lambda: topic_stats(standalone, topic)["subscriptions"]["slow"]["msgBacklog"] == 0)


def test_topic_level_quota_overrides_the_namespace_quota(standalone: StandaloneProcess) -> None:
    ns = namespace(standalone, backlogQuota={"limitSize": 5_000, "policy": "producer_exception"})
    strict, relaxed = f"persistent://{ns}/strict", f"persistent://{ns}/relaxed"
    admin_call(standalone, "PUT", f"/admin/v2/persistent/{ns}/relaxed")
    status, body = admin_call(
        standalone,
        "POST",
        f"/admin/v2/persistent/{ns}/relaxed/backlogQuota",
        {"limitSize": 10_000_000, "policy": "producer_exception"},
    )
    assert status == 204, body
    with magnetar.Client(standalone.service_url) as client:
        for topic in (strict, relaxed):
            client.subscribe(topic, "slow")
            fill(client.create_producer(topic, batching_enabled=False), 10)
        wait_for("the strict topic's check", lambda: topic_stats(standalone, strict)["backlogQuotaExceeded"])
        with pytest.raises(ProducerBlockedQuotaExceededException, match="limitSize is 5000 bytes"):
            client.create_producer(strict)
        assert topic_stats(standalone, relaxed)["backlogQuotaLimitSize"] == 10_000_000
        assert topic_stats(standalone, relaxed)["backlogQuotaExceeded"] is None
        client.create_producer(relaxed).send(b"fine")


def test_a_quota_may_not_reach_retention_on_any_path(standalone: StandaloneProcess) -> None:
    def post(path: str, body: Any) -> tuple[int, Any]:
        return admin_call(standalone, "POST", path, body)

    mb = 1024 * 1024
    # Namespace retention, then a namespace quota above it.
    ns = namespace(standalone, retention={"retentionTimeInMinutes": 10, "retentionSizeInMB": 1})
    status, body = post(
        f"/admin/v2/namespaces/{ns}/backlogQuota", {"limitSize": 2 * mb, "policy": "producer_exception"}
    )
    assert status == 412 and body["reason"].startswith("Backlog Quota exceeds configured retention quota for namespace")
    assert "limitSize 2097152 bytes >= retention size 1 MB" in body["reason"]
    status, body = post(
        f"/admin/v2/namespaces/{ns}/backlogQuota?backlogQuotaType=message_age",
        {"limitTime": 600, "policy": "producer_exception"},
    )
    assert status == 412 and "limitTime 600 s >= retention time 10 min" in body["reason"]
    # A namespace quota, then namespace retention lowered under it.
    ns2 = namespace(standalone, backlogQuota={"limitSize": 2 * mb, "policy": "producer_exception"})
    status, body = post(f"/admin/v2/namespaces/{ns2}/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1})
    assert status == 412 and body["reason"].startswith(
        "Retention Quota must exceed configured backlog quota for namespace"
    )
    assert (
        post(f"/admin/v2/namespaces/{ns2}/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 3})[0] == 204
    )
    # A topic quota against the namespace's retention (effective values).
    admin_call(standalone, "PUT", f"/admin/v2/persistent/{ns}/t")
    status, body = post(
        f"/admin/v2/persistent/{ns}/t/backlogQuota", {"limitSize": 2 * mb, "policy": "producer_exception"}
    )
    assert status == 412 and body["reason"].startswith("Backlog Quota exceeds configured retention quota for topic")
    # A topic retention under the namespace's quota.
    admin_call(standalone, "PUT", f"/admin/v2/persistent/{ns2}/t")
    status, body = post(
        f"/admin/v2/persistent/{ns2}/t/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1}
    )
    assert status == 412 and body["reason"].startswith("Retention Quota must exceed configured backlog quota for topic")
    # A namespace retention lowered under a topic's own quota.
    assert (
        post(f"/admin/v2/persistent/{ns2}/t/backlogQuota", {"limitSize": mb // 2, "policy": "producer_exception"})[0]
        == 204
    )
    assert (
        post(f"/admin/v2/persistent/{ns2}/t/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1})[0]
        == 204
    )
    status, body = post(
        f"/admin/v2/persistent/{ns}/t/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 5}
    )
    assert status == 204, body  # the topic's own retention now leaves room under the namespace quota
    status, body = post(
        f"/admin/v2/namespaces/{ns2}/backlogQuota", {"limitSize": 4 * mb, "policy": "producer_exception"}
    )
    assert status == 412 and "retention" in body["reason"]  # the namespace's own 3 MB retention
    ns3 = namespace(standalone)
    admin_call(standalone, "PUT", f"/admin/v2/persistent/{ns3}/t")
    assert (
        post(f"/admin/v2/persistent/{ns3}/t/backlogQuota", {"limitSize": 2 * mb, "policy": "producer_exception"})[0]
        == 204
    )
    status, body = post(f"/admin/v2/namespaces/{ns3}/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 1})
    assert status == 412 and body["reason"].startswith(
        f"Retention Quota must exceed configured backlog quota for topic persistent://{ns3}/t"
    )
    # Pulsar's retention rule: one limit 0 with the other set is refused.
    status, body = post(f"/admin/v2/namespaces/{ns3}/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0})
    assert status == 400 and "Setting a single time or size limit to 0 is invalid" in body["reason"]


def admin_cli(sa: StandaloneProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_admin_cli_verbs(standalone: StandaloneProcess) -> None:
    ns = namespace(standalone)
    admin_cli(standalone, "namespaces", "set-retention", ns, "--size", "10M", "--time", "3h")
    assert '"retentionSizeInMB": 10' in admin_cli(standalone, "namespaces", "get-retention", ns)
    assert '"retentionTimeInMinutes": 180' in admin_cli(standalone, "namespaces", "get-retention", ns)
    admin_cli(standalone, "namespaces", "set-message-ttl", ns, "--messageTTL", "2m")
    assert admin_cli(standalone, "namespaces", "get-message-ttl", ns).strip() == "120"
    admin_cli(standalone, "namespaces", "remove-message-ttl", ns)
    admin_cli(standalone, "namespaces", "set-backlog-quota", ns, "--limit", "2M", "--policy", "producer_exception")
    admin_cli(
        standalone,
        "namespaces",
        "set-backlog-quota",
        ns,
        "-lt",
        "1h",
        "-p",
        "consumer_backlog_eviction",
        "-t",
        "message_age",
    )
    quotas = admin_cli(standalone, "namespaces", "get-backlog-quotas", ns)
    assert '"limitSize": 2097152' in quotas and '"limitTime": 3600' in quotas
    admin_cli(standalone, "namespaces", "remove-backlog-quota", ns, "-t", "message_age")
    assert "message_age" not in admin_cli(standalone, "namespaces", "get-backlog-quotas", ns)
    topic = f"persistent://{ns}/cli"
    admin_cli(standalone, "topics", "create", topic)
    admin_cli(standalone, "topics", "set-message-ttl", topic, "-ttl", "30")
    assert admin_cli(standalone, "topics", "get-message-ttl", topic).strip() == "30"
    admin_cli(standalone, "topics", "set-backlog-quota", topic, "-l", "1M", "-p", "producer_request_hold")
    assert "producer_request_hold" in admin_cli(standalone, "topics", "get-backlog-quotas", topic)
    admin_cli(standalone, "topics", "set-retention", topic, "-s", "-1", "-t", "-1")
    assert '"retentionSizeInMB": -1' in admin_cli(standalone, "topics", "get-retention", topic)
    ns_doc = admin_call(standalone, "GET", f"/admin/v2/namespaces/{ns}")[1]
    assert ns_doc["unenforced"] == []
