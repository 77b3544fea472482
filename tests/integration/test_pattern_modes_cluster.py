"""WIRE.md R107 in a real two-broker cluster: non-persistent topics loaded on either broker are
listed by both, and a ``NonPersistentOnly`` pattern consumer gets the messages of all of them."""

from __future__ import annotations

import asyncio
import re
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from tests.protocol.wire import session
from tests.support.cluster import LocalCluster, two_broker_cluster

import magnetar
from magnetar.protocol import commands as c

pytestmark = [pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "pattern-modes-cluster")


def owners(cluster: LocalCluster, topics: list[str]) -> dict[str, str | None]:
    async def ask() -> dict[str, str | None]:
        async with cluster.metadata() as md:
            return {t: await md.topic_owner(t) for t in topics}

    return asyncio.run(ask())


def create_namespace(cluster: LocalCluster, ns: str) -> None:
    request = urllib.request.Request(f"{cluster.admin_urls[0]}/admin/v2/namespaces/{ns}", method="PUT")
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 204


def test_r107_every_broker_lists_the_non_persistent_topics_loaded_on_any_broker(cluster: LocalCluster) -> None:
    prefix = f"np-{uuid.uuid4().hex[:8]}"
    with magnetar.Client(cluster.service_url, operation_timeout_seconds=30) as client:
        # A namespace's 4 bundles go to the brokers by rendezvous hashing of the bundle and the
        # brokers' ids (random ports): all 4 land on one broker in 1 run of 8. So namespaces are
        # tried until one has topics on both brokers (6 namespaces: all fail in 1 run of 262,144).
        for attempt in range(6):
            namespace = "public/default" if attempt == 0 else f"public/{prefix}-ns{attempt}"
            if attempt:
                create_namespace(cluster, namespace)
            topics = [f"non-persistent://{namespace}/{prefix}-{i}" for i in range(16)]
            producers = [client.create_producer(topic, batching_enabled=False) for topic in topics]
            if len({o for o in owners(cluster, topics).values() if o}) == 2:
                break
            for producer in producers:
                producer.close()
        assert len({o for o in owners(cluster, topics).values() if o}) == 2, "every namespace on one broker"
        for i in range(2):
            with session(cluster.broker_address(i).service_url) as wire:
                answer = wire.request(c.get_topics_of_namespace(namespace, mode=c.TOPICS_NON_PERSISTENT))
                listed = sorted(t for t in answer["topics"] if f"/{prefix}-" in t)
                assert listed == sorted(topics), f"broker {i}"
        consumer = client.subscribe(
            re.compile(f"{namespace}/{prefix}-.*"),
            "all",
            regex_subscription_mode=magnetar.RegexSubscriptionMode.NonPersistentOnly,
        )
        for i, producer in enumerate(producers):
            producer.send(b"%d" % i)
        got = sorted(consumer.receive(10_000).topic_name() for _ in topics)
        assert got == sorted(topics)
