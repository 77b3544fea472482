"""Message TTL on real brokers: unacknowledged messages older than the TTL are expired by moving
each subscription's cursor on the periodic check, stats say so, a topic's TTL overrides its
namespace's, delayed messages expire by publish time as in Pulsar, and expiry goes on after the
owning broker is killed -9 and the topic moves.

The check runs every 0.3 s here (``--message-expiry-check-interval-minutes 0.005``; Pulsar's
default is 5 minutes); tests poll with a deadline, never sleep for it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from tests.support.admin import create_namespace, sub_stats
from tests.support.cluster import LocalCluster
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar
from magnetar.client.errors import Timeout

pytestmark = pytest.mark.timeout(120)

CHECK_EVERY = ("--message-expiry-check-interval-minutes", "0.005")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(tmp_path_factory.mktemp("ttl"), *CHECK_EVERY) as sa:
        yield sa


def namespace(sa: StandaloneProcess, ttl: int | None) -> str:
    return create_namespace(sa, "ttl", **({} if ttl is None else {"messageTTL": ttl}))


def test_ttl_expires_unacknowledged_messages_on_every_subscription(standalone: StandaloneProcess) -> None:
    topic = f"persistent://{namespace(standalone, ttl=1)}/t"
    with magnetar.Client(standalone.service_url) as client:
        a = client.subscribe(topic, "a")
        client.subscribe(topic, "b")
        producer = client.create_producer(topic)  # batched: 5 messages in one entry count 5
        for i in range(5):
            producer.send_async(f"m{i}".encode(), lambda res, msg_id: None)
        producer.flush()
        started = time.time()
        for sub in ("a", "b"):
            assert sub_stats(standalone, topic, sub)["msgBacklog"] == 5
        wait_for("expiry", lambda: all(sub_stats(standalone, topic, s)["msgBacklog"] == 0 for s in ("a", "b")))
        assert time.time() - started >= 1.0  # not before the TTL
        for sub in ("a", "b"):
            st = sub_stats(standalone, topic, sub)
            assert st["totalMsgExpired"] == 5
            assert st["lastExpireTimestamp"] >= int(started * 1000)
            assert "msgRateExpired" in st
        # What was delivered but expired is not delivered again; what comes after the TTL is.
        a.redeliver_unacknowledged_messages()
        producer.send(b"fresh")
        got = []
        while True:
            try:
                got.append(a.receive(timeout_millis=500).data())
            except Timeout:
                break
        assert got[-1] == b"fresh" and b"m0" not in got[got.index(b"fresh") :]


def test_topic_ttl_overrides_the_namespace_ttl(standalone: StandaloneProcess) -> None:
    ns = namespace(standalone, ttl=1)
    short, long = f"persistent://{ns}/short", f"persistent://{ns}/long"
    admin_call(standalone, "PUT", f"/admin/v2/persistent/{ns}/long")
    assert admin_call(standalone, "POST", f"/admin/v2/persistent/{ns}/long/messageTTL", 3600)[0] == 204
    with magnetar.Client(standalone.service_url) as client:
        for topic in (short, long):
            client.subscribe(topic, "s")
            client.create_producer(topic, batching_enabled=False).send(b"x")
        wait_for("the short TTL", lambda: sub_stats(standalone, short, "s")["msgBacklog"] == 0)
        time.sleep(0.7)  # two more checks ran (0.3 s apart): the long-TTL topic must still hold its message
        assert sub_stats(standalone, long, "s")["msgBacklog"] == 1
        assert sub_stats(standalone, long, "s")["totalMsgExpired"] == 0


def test_no_ttl_expires_nothing(standalone: StandaloneProcess) -> None:
    topic = f"persistent://{namespace(standalone, ttl=None)}/t"
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "s")
        client.create_producer(topic, batching_enabled=False).send(b"x")
        time.sleep(1.5)  # several checks (0.3 s apart) past what a 1 s TTL would need
        assert sub_stats(standalone, topic, "s")["msgBacklog"] == 1


def test_a_delayed_message_expires_by_publish_time(standalone: StandaloneProcess) -> None:
    """Pulsar measures TTL from the publish time: a delay longer than the TTL loses the message."""
    topic = f"persistent://{namespace(standalone, ttl=1)}/t"
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"later", deliver_after=timedelta(seconds=60))
        wait_for("the delayed message to be tracked", lambda: sub_stats(standalone, topic, "s")["msgDelayed"] == 1)
        wait_for("expiry", lambda: sub_stats(standalone, topic, "s")["msgBacklog"] == 0)
        st = sub_stats(standalone, topic, "s")
        assert st["msgDelayed"] == 0 and st["totalMsgExpired"] == 1
        consumer.close()


@pytest.mark.faults
@pytest.mark.timeout(240)
def test_ttl_goes_on_after_the_owner_is_killed(tmp_path_factory: pytest.TempPathFactory) -> None:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed")
    base = tmp_path_factory.mktemp("ttl-cluster")
    with LocalCluster(
        base, bookies=1, brokers=2, ensemble_size=1, write_quorum=1, ack_quorum=1, broker_args=CHECK_EVERY
    ) as cluster:
        admin = cluster.admin_urls[0]

        def call(method: str, path: str, body: Any = None) -> None:
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(admin + path, data, method=method)
            req.add_header("Content-Type", "application/json")
            urllib.request.urlopen(req, timeout=10).close()

        call("PUT", "/admin/v2/namespaces/public/ttlc")
        call("POST", "/admin/v2/namespaces/public/ttlc/messageTTL", 2)
        topic = "persistent://public/ttlc/t"
        with magnetar.Client(cluster.service_url, operation_timeout_seconds=30) as client:
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(f"m{i}".encode())

            async def ask() -> str | None:
                async with cluster.metadata() as md:
                    return await md.topic_owner(topic)

            owner_id = asyncio.run(ask())
            assert owner_id is not None
            cluster.broker_by_id(owner_id).kill9()  # before the 2 s TTL has passed
            # The survivor takes the topic over (the consumer re-attaches there) and expires them.
            survivor = next(i for i, p in enumerate(cluster.brokers) if p.alive)

            def expired() -> bool:
                try:
                    st = cluster.topic_stats(topic, broker=survivor)
                except Exception:
                    return False
                sub = (st or {}).get("subscriptions", {}).get("s")
                return bool(sub) and sub["msgBacklog"] == 0 and sub["totalMsgExpired"] == 10

            wait_for("expiry on the new owner", expired, timeout=90)
            consumer.close()
