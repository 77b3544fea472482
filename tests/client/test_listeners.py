"""``listener_name`` against brokers advertising two listeners (Pulsar's ``advertisedListeners``).

Each broker advertises ``internal:pulsar://127.0.0.1:<port>`` and ``external:pulsar://localhost:<port>``
(two names for the same port, standing for an in-cluster and an outside address). A client naming
``external`` must be sent to the owner's ``localhost`` address by every lookup, binary or HTTP, and
whichever broker it asks; a client naming no listener gets the internal one; a listener no broker
has fails the lookup.
"""

from __future__ import annotations

import asyncio
import shutil
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import LocalCluster, free_ports
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar as pulsar
from magnetar.client import aio


def _listeners(port: int) -> list[str]:
    return [
        "--advertised-listeners",
        f"internal:pulsar://127.0.0.1:{port},external:pulsar://localhost:{port}",
        "--internal-listener-name",
        "internal",
    ]


def _hosts(client: aio.Client) -> set[str]:
    """The hosts this client opened binary connections to."""
    return {url.split("://", 1)[1].rsplit(":", 1)[0] for url in client._conns}


@pytest.fixture(scope="module")
def listening_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    (port,) = free_ports(1)
    with run_standalone(tmp_path_factory.mktemp("listeners"), "--port", str(port), *_listeners(port)) as sa:
        yield sa


async def _produce_and_consume(client: aio.Client, topic: str) -> bytes:
    consumer = await client.subscribe(topic, "listener-sub")
    producer = await client.create_producer(topic)
    await producer.send(b"hello")
    msg = await consumer.receive(10000)
    return msg.data()


def test_named_listener_answers_its_address(listening_standalone: StandaloneProcess, topic: str) -> None:
    async def main() -> tuple[bytes, set[str]]:
        async with aio.Client(listening_standalone.service_url, listener_name="external") as client:
            return await _produce_and_consume(client, topic), _hosts(client)

    data, hosts = asyncio.run(asyncio.wait_for(main(), 60))
    assert data == b"hello"
    # The service URL's broker (asked for the lookup) and the owner's external address.
    assert "localhost" in hosts


def test_no_listener_name_answers_the_internal_listener(listening_standalone: StandaloneProcess, topic: str) -> None:
    async def main() -> set[str]:
        async with aio.Client(listening_standalone.service_url) as client:
            await _produce_and_consume(client, topic)
            return _hosts(client)

    assert asyncio.run(asyncio.wait_for(main(), 60)) == {"127.0.0.1"}


def test_http_lookup_with_a_listener_name(listening_standalone: StandaloneProcess, topic: str) -> None:
    async def main() -> tuple[bytes, set[str]]:
        async with aio.Client(listening_standalone.admin_url, listener_name="external") as client:
            return await _produce_and_consume(client, topic), _hosts(client)

    data, hosts = asyncio.run(asyncio.wait_for(main(), 60))
    assert data == b"hello"
    assert hosts == {"localhost"}


def test_unknown_listener_fails_the_lookup(listening_standalone: StandaloneProcess, topic: str) -> None:
    client = pulsar.Client(listening_standalone.service_url, listener_name="nope", operation_timeout_seconds=2)
    try:
        with pytest.raises(pulsar.PulsarException, match="nope"):
            client.create_producer(topic)
    finally:
        client.close()


def test_bad_advertised_listeners_stop_the_broker_at_start(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="advertised listeners"):
        with run_standalone(tmp_path, "--advertised-listeners", "internal:http://127.0.0.1:1"):
            pass


@pytest.fixture
def listening_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    cluster = LocalCluster(tmp_path / "cluster", bookies=1, brokers=2, ensemble_size=1, write_quorum=1, ack_quorum=1)
    for broker, port in zip(cluster.brokers, cluster.broker_ports, strict=True):
        broker.argv.extend(_listeners(port))
    with cluster:
        yield cluster


def test_every_broker_answers_the_owners_named_listener(listening_cluster: LocalCluster) -> None:
    """Topics spread over both brokers; asking broker 0 only, each lookup names the owner's external address."""
    first = listening_cluster.broker_address(0)
    ports = sorted(listening_cluster.broker_ports)

    async def owners(listener_name: str | None, service_url: str, topics: list[str]) -> set[str]:
        async with aio.Client(service_url, listener_name=listener_name, operation_timeout_seconds=30) as client:
            urls = {(await client.lookup(t)).url for t in topics}
            return urls

    # A namespace's 4 bundles go to the brokers by rendezvous hashing of the bundle and the brokers'
    # ids (random ports), so all of a namespace's topics may be on one broker: namespaces are tried
    # until one has topics on both, so that answers about the other broker are tested too.
    prefix = f"listeners-{uuid.uuid4().hex[:8]}"
    for attempt in range(6):
        namespace = "public/default" if attempt == 0 else f"public/{prefix}-ns{attempt}"
        if attempt:
            request = urllib.request.Request(f"{first.admin_url}/admin/v2/namespaces/{namespace}", method="PUT")
            with urllib.request.urlopen(request, timeout=30) as resp:
                assert resp.status == 204
        topics = [f"persistent://{namespace}/{prefix}-{i}" for i in range(16)]
        external = asyncio.run(asyncio.wait_for(owners("external", first.service_url, topics), 120))
        if sorted(int(u.rsplit(":", 1)[1]) for u in external) == ports:
            break
    internal = asyncio.run(asyncio.wait_for(owners(None, first.service_url, topics), 120))
    http = asyncio.run(asyncio.wait_for(owners("external", first.admin_url, topics), 120))
    assert {u.rsplit(":", 1)[0] for u in external} == {"magnetar://localhost"}
    assert {u.rsplit(":", 1)[0] for u in internal} == {"magnetar://127.0.0.1"}
    assert http == external
    # Both brokers own some of the topics, so answers about the other broker were tested too.
    assert sorted(int(u.rsplit(":", 1)[1]) for u in external) == ports
