"""A broker restarted on the same host:port does not adopt the ownership keys of its dead former run.

The former run's keys are ephemeral under *its* lease and live on until that lease expires. A new
run that adopted them (same broker id) would serve the bundle under the old lease and unload it
when that lease expired a few seconds later, while producers write: the power-loss scenario saw 957
duplicated messages from exactly that. The record carries the process's incarnation; a new run
removes a former run's key and writes its own (real etcd, two sessions standing for the two runs).
"""

from __future__ import annotations

import uuid

from tests.support.etcd import EtcdProcess

from magnetar.broker.cluster.ownership import BrokerInfo, Ownership
from magnetar.metadata.etcd_store import EtcdMetadataStore
from magnetar.protocol.topic_name import TopicName

TOPIC = TopicName.parse("persistent://public/default/incarnation")


def info(incarnation: str) -> BrokerInfo:
    return BrokerInfo("127.0.0.1:6650", "magnetar://127.0.0.1:6650", "http://127.0.0.1:8080", incarnation=incarnation)


async def test_a_new_run_replaces_the_former_runs_key_with_its_own(etcd_server: EtcdProcess) -> None:
    prefix = f"/test-{uuid.uuid4().hex[:12]}"
    former_session = await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=60)
    new_session = await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=60)
    try:
        former = Ownership(former_session, info("former"))
        assert (await former.acquire(TOPIC)).incarnation == "former"

        now = Ownership(new_session, info("now"))
        owner, redirect = await now.lookup(TOPIC)
        assert not redirect and now.is_me(owner), owner
        assert now.owns(TOPIC)
        # The key is the new run's, under the new run's lease: the former session ending (its
        # lease revoked, as when it expires) must not take it away.
        await former_session.close()
        found = await new_session.get(now.bundle_path(TOPIC))
        assert found is not None, "the bundle's key went with the former run's lease"
        assert BrokerInfo.from_json(found.value).incarnation == "now"
        # Asked again, it is simply ours.
        assert now.is_me(await now.acquire(TOPIC))
    finally:
        await new_session.close()
        await former_session.close()


async def test_another_broker_is_still_answered_as_the_owner(etcd_server: EtcdProcess) -> None:
    prefix = f"/test-{uuid.uuid4().hex[:12]}"
    a_session = await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=60)
    b_session = await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=60)
    try:
        a = Ownership(a_session, info("a"))
        other = BrokerInfo("127.0.0.1:6651", "magnetar://127.0.0.1:6651", "http://127.0.0.1:8081", incarnation="b")
        b = Ownership(b_session, other)
        assert a.is_me(await a.acquire(TOPIC))
        owner = await b.acquire(TOPIC)
        assert owner.broker_id == "127.0.0.1:6650" and not b.owns(TOPIC)
    finally:
        await a_session.close()
        await b_session.close()
