"""``ServiceInfoProvider``, ``AutoClusterFailover`` and ``client.get_service_info()`` against two real standalones.

A client built on a provider must use the provider's cluster, move to the one it pushes later
(existing producers and consumers follow, through reconnection), and report it in
``get_service_info()``. ``AutoClusterFailover`` pushes by itself: it fails over to the secondary when
the primary stops, and comes back when the primary is up again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support.cluster import free_ports
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar as pulsar
from magnetar.client import aio


@contextlib.contextmanager
def _standalone_on_fixed_ports(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A standalone that comes back on the same ports after ``restart()`` (its URL stays valid)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    port, web = free_ports(2)
    with run_standalone(tmp_path, "--port", str(port), "--web-port", str(web)) as sa:
        yield sa


class _ManualProvider(pulsar.ServiceInfoProvider):
    """A provider the test drives: ``switch(info)`` pushes ``info`` to the client, from the test's thread."""

    def __init__(self, first: pulsar.ServiceInfo) -> None:
        self.first = first
        self.update: Callable[[pulsar.ServiceInfo], None] | None = None
        self.closed = False

    def initial_service_info(self) -> pulsar.ServiceInfo:
        return self.first

    def initialize(self, on_service_info_update: Callable[[pulsar.ServiceInfo], None]) -> None:
        self.update = on_service_info_update

    def close(self) -> None:
        self.closed = True

    def switch(self, info: pulsar.ServiceInfo) -> None:
        assert self.update is not None, "the client never initialized its provider"
        self.update(info)


def _read_all(url: str, topic: str, n: int) -> list[bytes]:
    client = pulsar.Client(url, operation_timeout_seconds=20)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        return [reader.read_next(10000).data() for _ in range(n)]
    finally:
        client.close()


def test_get_service_info_of_a_plain_url(standalone: StandaloneProcess) -> None:
    client = pulsar.Client(standalone.service_url)
    try:
        info = client.get_service_info()
        assert info.service_url == standalone.service_url
        assert info.use_tls is False
        assert info.authentication is None
    finally:
        client.close()


def test_provider_switches_the_client_to_another_cluster(tmp_path: Path, topic: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with run_standalone(tmp_path / "a") as a, run_standalone(tmp_path / "b") as b:
        provider = _ManualProvider(pulsar.ServiceInfo(a.service_url))
        client = pulsar.Client(provider, operation_timeout_seconds=20)
        try:
            consumer = client.subscribe(topic, "follows", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"on-a")
            assert consumer.receive(10000).data() == b"on-a"
            assert client.get_service_info().service_url == a.service_url
            provider.switch(pulsar.ServiceInfo(b.service_url))
            wait_for("the switch to b", lambda: client.get_service_info().service_url == b.service_url)
            # The producer and consumer created on a reconnect to b; the next message goes through b.
            producer.send(b"on-b")
            assert consumer.receive(10000).data() == b"on-b"
        finally:
            client.close()
        assert provider.closed
        assert _read_all(a.service_url, topic, 1) == [b"on-a"]
        assert _read_all(b.service_url, topic, 1) == [b"on-b"]


def test_auto_cluster_failover_switches_over_and_back(tmp_path: Path, topic: str) -> None:
    (tmp_path / "secondary").mkdir()
    with _standalone_on_fixed_ports(tmp_path / "primary") as primary, run_standalone(tmp_path / "secondary") as second:
        failover = pulsar.AutoClusterFailover(
            pulsar.ServiceInfo(primary.service_url),
            [pulsar.ServiceInfo(second.service_url)],
            check_interval_ms=200,
        )
        client = pulsar.Client(failover, operation_timeout_seconds=20)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            producer.send(b"first")
            assert client.get_service_info().service_url == primary.service_url

            primary.stop()
            wait_for("failover to the secondary", lambda: client.get_service_info().service_url == second.service_url)
            producer.send(b"second")

            primary.start()
            wait_for("switch back to the primary", lambda: client.get_service_info().service_url == primary.service_url)
            producer.send(b"third")
        finally:
            client.close()
        assert _read_all(second.service_url, topic, 1) == [b"second"]
        assert _read_all(primary.service_url, topic, 2) == [b"first", b"third"]


def test_auto_cluster_failover_arguments_are_checked() -> None:
    primary = pulsar.ServiceInfo("pulsar://127.0.0.1:6650")
    with pytest.raises(ValueError, match="secondary"):
        pulsar.AutoClusterFailover(primary, [])
    with pytest.raises(ValueError, match="check_interval_ms"):
        pulsar.AutoClusterFailover(primary, [pulsar.ServiceInfo("pulsar://127.0.0.1:6651")], check_interval_ms=0)
    with pytest.raises(ValueError, match="service_url"):
        pulsar.ServiceInfo(6650)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="service_url"):
        pulsar.Client(6650)  # type: ignore[arg-type]
    failover = pulsar.AutoClusterFailover(primary, [pulsar.ServiceInfo("pulsar+ssl://127.0.0.1:6651")])
    assert (failover.check_interval_ms, failover.failover_threshold, failover.switch_back_threshold) == (5000, 1, 1)
    assert failover.secondary[0].use_tls is True


def test_asyncio_client_reports_and_follows_its_provider(tmp_path: Path, topic: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with run_standalone(tmp_path / "a") as a, run_standalone(tmp_path / "b") as b:
        provider = _ManualProvider(pulsar.ServiceInfo(a.service_url))

        async def main() -> tuple[str, str]:
            async with aio.Client(provider, operation_timeout_seconds=20) as client:
                producer = await client.create_producer(topic, batching_enabled=False)
                before = client.get_service_info().service_url
                provider.switch(pulsar.ServiceInfo(b.service_url))
                await producer.send(b"async-on-b")  # switched on the loop before or during this send
                return before, client.get_service_info().service_url

        before, after = asyncio.run(asyncio.wait_for(main(), 60))
        assert (before, after) == (a.service_url, b.service_url)
        assert _read_all(b.service_url, topic, 1) == [b"async-on-b"]
