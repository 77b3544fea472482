"""Producer access modes enforced by the broker, and the topic epoch (broker/topics/producer_access.py, R102-R103).

Against a real standalone (these tests unload topics, so the module gets its own), and at the end
on the local two-broker cluster, where the topic moves to the other broker and keeps its epoch.
Programs use ``import magnetar as pulsar`` and pulsar-client's names, as the issue asks.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.protocol.wire import publish, session
from tests.support.cluster import LocalCluster, two_broker_cluster
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar as pulsar
from magnetar.client import aio
from magnetar.protocol import commands as c

pytestmark = pytest.mark.timeout(180)

Mode = pulsar.ProducerAccessMode


def _path(topic: str) -> str:
    return topic.split("://", 1)[1]


def _publishers(sa: StandaloneProcess, topic: str) -> list[dict[str, Any]]:
    status, stats = admin_call(sa, "GET", f"/admin/v2/persistent/{_path(topic)}/stats")
    assert status == 200, stats
    return list(stats["publishers"])


def _unload(sa: StandaloneProcess, topic: str) -> None:
    status, body = admin_call(sa, "PUT", f"/admin/v2/persistent/{_path(topic)}/unload")
    assert status in (200, 204), body


def _epoch(producer: aio.Producer) -> int | None:
    return producer.partitions[0].topic_epoch


def test_a_second_exclusive_or_a_shared_producer_is_refused_while_one_holds_the_topic(
    standalone: StandaloneProcess, topic: str
) -> None:
    with pulsar.Client(standalone.service_url) as client:
        holder = client.create_producer(topic, producer_name="holder", access_mode=Mode.Exclusive)
        # Current Pulsar brokers answer ProducerFenced to the newcomer (a Shared one gets ProducerBusy).
        with pytest.raises(pulsar.ProducerFenced, match="existing exclusive producer: holder"):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        with pytest.raises(pulsar.ProducerBusy, match="existing exclusive producer"):
            client.create_producer(topic)  # Shared
        holder.send(b"still mine")
        assert [(p["producerName"], p["accessMode"]) for p in _publishers(standalone, topic)] == [
            ("holder", "Exclusive")
        ]
        holder.close()
        client.create_producer(topic, access_mode=Mode.Exclusive).send(b"now mine")


def test_exclusive_is_refused_while_shared_producers_are_on_the_topic(
    standalone: StandaloneProcess, topic: str
) -> None:
    with pulsar.Client(standalone.service_url) as client:
        shared = client.create_producer(topic)
        with pytest.raises(pulsar.ProducerFenced, match="existing shared producers"):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        shared.close()
        client.create_producer(topic, access_mode=Mode.Exclusive).close()


async def test_wait_for_exclusive_is_created_when_the_holder_leaves(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        holder = await client.create_producer(topic, access_mode=Mode.Exclusive)
        first_epoch = _epoch(holder)
        waiting = asyncio.ensure_future(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
        # It waits past the operation timeout the holder's round trips respect; nothing else joins meanwhile.
        done, _ = await asyncio.wait([waiting], timeout=1.0)
        assert not done
        with pytest.raises(pulsar.ProducerBusy):
            await client.create_producer(topic)
        await holder.send(b"from the holder")
        await holder.close()
        successor = await asyncio.wait_for(waiting, 30)
        await successor.send(b"from the successor")
        assert first_epoch is not None and _epoch(successor) == first_epoch + 1
        await successor.close()


def test_blocking_wait_for_exclusive_returns_once_the_holder_closes(standalone: StandaloneProcess, topic: str) -> None:
    with pulsar.Client(standalone.service_url) as client:
        holder = client.create_producer(topic, access_mode=Mode.Exclusive)
        created: list[Any] = []
        waiter = threading.Thread(
            target=lambda: created.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
        )
        waiter.start()
        waiter.join(1.0)
        assert waiter.is_alive() and not created
        holder.close()
        waiter.join(30)
        assert not waiter.is_alive() and len(created) == 1
        assert created[0].send(b"mine now").ledger_id() >= 0
        assert created[0].is_connected()


def test_a_waiter_whose_client_went_away_no_longer_holds_the_topic_up(
    standalone: StandaloneProcess, topic: str
) -> None:
    """While a ``WaitForExclusive`` producer waits, ``Shared`` ones are refused (as in Pulsar); once
    its connection is gone the broker forgets it (R105) and they are taken again."""
    with pulsar.Client(standalone.service_url) as client:
        client.create_producer(topic).send(b"a shared producer stays on the topic")

        def shared_admitted() -> bool:
            try:
                client.create_producer(topic).close()
            except pulsar.ProducerBusy:
                return False
            return True

        waiting_client = pulsar.Client(standalone.service_url)
        outcome: list[BaseException | None] = []

        def wait_for_exclusive() -> None:
            try:
                waiting_client.create_producer(topic, access_mode=Mode.WaitForExclusive)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait_for_exclusive)
        waiter.start()
        wait_for("the waiter to hold Shared producers off", lambda: not shared_admitted())
        waiting_client.close()
        waiter.join(30)
        assert not waiter.is_alive() and outcome and outcome[0] is not None
        wait_for("Shared producers to be admitted again", shared_admitted)


def test_non_persistent_topics_enforce_access_modes_too(standalone: StandaloneProcess) -> None:
    topic = f"non-persistent://public/default/np-access-{uuid.uuid4().hex[:10]}"
    with pulsar.Client(standalone.service_url) as client:
        holder = client.create_producer(topic, access_mode=Mode.Exclusive)
        with pytest.raises(pulsar.ProducerFenced):
            client.create_producer(topic, access_mode=Mode.Exclusive)
        fencer = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        with pytest.raises(pulsar.ProducerFenced):
            holder.send(b"fenced")
        fencer.send(b"mine")


async def test_exclusive_with_fencing_takes_the_topic_and_the_old_holder_is_fenced(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        old = await client.create_producer(topic, producer_name="old", access_mode=Mode.Exclusive)
        await old.send(b"before")
        waiter = asyncio.ensure_future(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
        done, _ = await asyncio.wait([waiter], timeout=0.5)
        assert not done
        new = await client.create_producer(topic, producer_name="new", access_mode=Mode.ExclusiveWithFencing)
        assert _epoch(new) == (_epoch(old) or 0) + 1
        with pytest.raises(pulsar.ProducerFenced):
            await asyncio.wait_for(waiter, 30)  # a waiting producer is fenced out too, as in Pulsar

        with pytest.raises(pulsar.ProducerFenced):
            await asyncio.wait_for(old.send(b"after"), 30)
        await new.send(b"after, from the new one")
        pubs = _publishers(standalone, topic)
        assert [(p["producerName"], p["accessMode"]) for p in pubs] == [("new", "ExclusiveWithFencing")]


def test_a_shared_producer_closed_by_a_fencer_comes_back_when_the_topic_is_free(
    standalone: StandaloneProcess, topic: str
) -> None:
    with pulsar.Client(standalone.service_url) as client:
        shared = client.create_producer(topic, send_timeout_millis=1000, batching_enabled=False)
        shared.send(b"shared, before")
        fencer = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        # Not fenced for good (it had no epoch): it reconnects, and is refused while the topic is held.
        with pytest.raises(pulsar.Timeout):
            shared.send(b"while held")
        assert not shared.is_connected()
        fencer.send(b"exclusive")
        fencer.close()
        wait_for("the shared producer to reconnect", shared.is_connected, timeout=60)
        assert shared.send(b"shared, after").ledger_id() >= 0


async def test_the_epoch_is_kept_when_the_topic_is_unloaded_and_loaded_again(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        holder = await client.create_producer(topic, access_mode=Mode.Exclusive)
        await holder.send(b"one")
        epoch = _epoch(holder)
        assert epoch is not None
        _unload(standalone, topic)
        # The holder comes back with its epoch: the reloaded topic read it from the metadata store.
        await asyncio.wait_for(holder.send(b"two"), 30)
        assert holder.partitions[0].reconnects >= 1 and _epoch(holder) == epoch
        fencer = await client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
        assert _epoch(fencer) == epoch + 1
        await fencer.send(b"three")
        _unload(standalone, topic)
        await asyncio.wait_for(fencer.send(b"four"), 30)
        await fencer.close()
        # A new exclusive producer continues from the stored epoch, not from 0.
        last = await client.create_producer(topic, access_mode=Mode.Exclusive)
        assert _epoch(last) == epoch + 2
        with pytest.raises(pulsar.ProducerFenced):
            await asyncio.wait_for(holder.send(b"five"), 30)


def test_r102_r104_on_the_wire(standalone: StandaloneProcess, topic: str) -> None:
    """The fields as WIRE.md states them, spoken by hand: the epoch answered, metadata kept, an old
    epoch fenced, an unknown mode refused, and a fenced registration closed by a push."""
    with session(standalone.service_url) as wire:
        bad = wire.request(c.producer(topic, 1, access_mode="Solo"))
        assert (bad["t"], bad["code"]) == (c.ERROR, "InvalidCommand")
        first = wire.request(c.producer(topic, 2, "w1", access_mode="Exclusive", metadata={"k": "v"}))
        assert first["t"] == c.PRODUCER_SUCCESS and first["topic_epoch"] >= 0
        epoch = first["topic_epoch"]
        assert publish(wire, 2, 0, b"x")["t"] == c.SEND_RECEIPT
        assert [p["metadata"] for p in _publishers(standalone, topic)] == [{"k": "v"}]
        second = wire.request(c.producer(topic, 3, "w2", access_mode="ExclusiveWithFencing"))
        assert second["topic_epoch"] == epoch + 1
        wire.next(lambda f: f.get("t") == c.CLOSE_PRODUCER and f["producer_id"] == 2)
        stale = wire.request(c.producer(topic, 4, "w1", access_mode="Exclusive", epoch=epoch))
        assert (stale["t"], stale["code"]) == (c.ERROR, "ProducerFenced")
        assert f"Current epoch: {epoch + 1}, Producer epoch: {epoch}" in stale["message"]


def test_a_second_exclusive_producer_is_fenced_but_its_own_stale_registration_is_busy(
    standalone: StandaloneProcess, topic: str
) -> None:
    """A newcomer is refused for good (ProducerFenced, as Pulsar); the holder re-registering under
    its own name and epoch while its old registration is still there is told to retry
    (ProducerBusy), since that registration is its own, from a connection the broker has not yet
    seen drop."""
    with session(standalone.service_url) as first, session(standalone.service_url) as second:
        held = first.request(c.producer(topic, 1, "w1", access_mode="Exclusive"))
        assert held["t"] == c.PRODUCER_SUCCESS
        epoch = held["topic_epoch"]
        newcomer = second.request(c.producer(topic, 1, "w2", access_mode="Exclusive"))
        assert (newcomer["t"], newcomer["code"]) == (c.ERROR, "ProducerFenced")
        assert "existing exclusive producer: w1" in newcomer["message"]
        itself = second.request(c.producer(topic, 2, "w1", access_mode="Exclusive", epoch=epoch))
        assert (itself["t"], itself["code"]) == (c.ERROR, "ProducerBusy")
        assert publish(first, 1, 0, b"still the holder")["t"] == c.SEND_RECEIPT


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "access-mode-cluster")


def _owner_index(cluster: LocalCluster, topic: str) -> int | None:
    async def ask() -> str | None:
        async with cluster.metadata() as md:
            return await md.topic_owner(topic)

    owner = asyncio.run(ask())
    return None if owner is None else cluster.broker_index(cluster.broker_by_id(owner))


@pytest.mark.parametrize("how", ["stop", "kill9"])
def test_exclusive_access_and_the_epoch_survive_the_topic_moving_to_another_broker(
    cluster: LocalCluster, how: str
) -> None:
    topic = f"persistent://public/default/access-{uuid.uuid4().hex[:10]}"
    with pulsar.Client(cluster.service_url, operation_timeout_seconds=30) as client:
        first = client.create_producer(topic, producer_name="first", access_mode=Mode.Exclusive)
        first.send(b"on the first owner")
        holder = client.create_producer(topic, producer_name="holder", access_mode=Mode.ExclusiveWithFencing)
        with pytest.raises(pulsar.ProducerFenced):
            first.send(b"fenced?")
        holder.send(b"before the move")
        owner = _owner_index(cluster, topic)
        assert owner is not None
        # SIGTERM: it unloads its topics; SIGKILL: its ownership expires. Either way the other broker takes over.
        if how == "stop":
            cluster.brokers[owner].stop()
        else:
            cluster.brokers[owner].kill9()
        try:
            holder.send(b"after the move")  # the holder re-registers on the new owner with its epoch
            assert _owner_index(cluster, topic) == 1 - owner
            assert holder.is_connected()
            with pytest.raises(pulsar.ProducerFenced):
                client.create_producer(topic, access_mode=Mode.Exclusive)
            with pytest.raises(pulsar.ProducerFenced):
                first.send(b"still fenced")
            holder.close()

            # The new owner read the epoch the old one stored: a producer fenced there stays fenced.
            async def epoch_of_a_new_exclusive_producer() -> int | None:
                async with aio.Client(cluster.service_url, operation_timeout_seconds=30) as ac:
                    p = await ac.create_producer(topic, access_mode=Mode.Exclusive)
                    return _epoch(p)

            assert asyncio.run(epoch_of_a_new_exclusive_producer()) == 2
        finally:
            cluster.brokers[owner].start()


def test_a_topic_unloaded_before_its_first_message_loads_again(standalone: StandaloneProcess) -> None:
    """Regression: the reconnecting producer loaded the topic while its unload was still closing
    the managed ledger; the two raced on the empty last ledger, and the topic could no longer be
    loaded (``NoSuchLedger``, not retryable)."""
    with pulsar.Client(standalone.service_url, operation_timeout_seconds=15) as client:
        for mode in (Mode.Shared, Mode.Exclusive, Mode.Exclusive):
            topic = f"persistent://public/default/empty-{uuid.uuid4().hex[:10]}"
            producer = client.create_producer(topic, access_mode=mode)
            _unload(standalone, topic)
            _unload(standalone, topic)
            assert producer.send(b"first").ledger_id() >= 0
            _unload(standalone, topic)
            assert producer.send(b"second").ledger_id() >= 0
