"""WIRE.md R107 in a real two-broker cluster: non-persistent topics loaded on either broker are
listed by both, and a ``NonPersistentOnly`` pattern consumer gets the messages of all of them."""

from __future__ import annotations

import asyncio
import re
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


def test_r107_every_broker_lists_the_non_persistent_topics_loaded_on_any_broker(cluster: LocalCluster) -> None:
    prefix = f"np-{uuid.uuid4().hex[:8]}"
    with magnetar.Client(cluster.service_url, operation_timeout_seconds=30) as client:
        topics: list[str] = []
        producers = []
        # Load topics until both brokers own at least one (bundles are spread over the brokers).
        for i in range(32):
            topic = f"non-persistent://public/default/{prefix}-{i}"
            producers.append(client.create_producer(topic, batching_enabled=False))
            topics.append(topic)
            if len(set(owners(cluster, topics).values())) == 2 and i >= 3:
                break
        assert len({o for o in owners(cluster, topics).values() if o}) == 2, "topics all landed on one broker"
        for i in range(2):
            with session(cluster.broker_address(i).service_url) as wire:
                answer = wire.request(c.get_topics_of_namespace("public/default", mode=c.TOPICS_NON_PERSISTENT))
                listed = sorted(t for t in answer["topics"] if f"/{prefix}-" in t)
                assert listed == sorted(topics), f"broker {i}"
        consumer = client.subscribe(
            re.compile(f"public/default/{prefix}-.*"),
            "all",
            regex_subscription_mode=magnetar.RegexSubscriptionMode.NonPersistentOnly,
        )
        for i, producer in enumerate(producers):
            producer.send(b"%d" % i)
        got = sorted(consumer.receive(10_000).topic_name() for _ in topics)
        assert got == sorted(topics)
