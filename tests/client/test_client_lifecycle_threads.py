"""A client's lifecycle as pulsar-client's: its provider starts with it and closes with it, and no
thread of the client outlives ``close()``, nor a client the program dropped without closing it.

Thread counts are taken in a fresh interpreter (``run_program``), where nothing else of the test
run (fixtures, other clients, pytest's own threads) can add or hide one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from typing import Any

from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar.client import aio


def run_program(standalone: StandaloneProcess, body: str) -> None:
    """Run ``body`` in a new interpreter with ``URL`` set to the standalone's; it must exit 0."""
    source = "import os, threading, time, gc, asyncio, uuid\nimport magnetar as pulsar\nURL = os.environ['URL']\n"
    source += "def topic():\n    return f'persistent://public/default/life-{uuid.uuid4().hex[:10]}'\n"
    source += textwrap.dedent(body)
    env = dict(os.environ, URL=standalone.service_url)
    done = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"program failed:\n{done.stdout}\n{done.stderr}"


class _Provider(pulsar.ServiceInfoProvider):
    """Starts on a URL where nothing listens, and switches to the standalone from ``initialize``."""

    def __init__(self, first: str, then: str) -> None:
        self.first, self.then = first, then
        self.calls: list[str] = []

    def initial_service_info(self) -> pulsar.ServiceInfo:
        self.calls.append("initial_service_info")
        return pulsar.ServiceInfo(self.first)

    def initialize(self, on_update: Any) -> None:
        self.calls.append(f"initialize on {threading.current_thread().name}")
        on_update(pulsar.ServiceInfo(self.then))

    def close(self) -> None:
        self.calls.append("close")


def test_the_providers_initialize_runs_in_the_constructor_and_applies_at_once(
    standalone: StandaloneProcess, topic: str
) -> None:
    provider = _Provider("pulsar://127.0.0.1:1", standalone.service_url)
    client = pulsar.Client(provider, operation_timeout_seconds=10)
    try:
        here = threading.current_thread().name
        assert provider.calls == ["initial_service_info", f"initialize on {here}"]
        assert client.get_service_info().service_url == standalone.service_url
        client.create_producer(topic).send(b"x")
    finally:
        client.close()
    assert provider.calls[-1] == "close"


async def test_the_asyncio_client_starts_and_closes_its_provider(standalone: StandaloneProcess, topic: str) -> None:
    provider = _Provider("pulsar://127.0.0.1:1", standalone.service_url)
    client = aio.Client(provider, operation_timeout_seconds=10)
    assert client.get_service_info().service_url == standalone.service_url
    producer = await client.create_producer(topic)
    await producer.send(b"x")
    await client.close()
    assert provider.calls[-1] == "close"


def test_no_thread_outlives_close(standalone: StandaloneProcess) -> None:
    run_program(
        standalone,
        """
        failover = pulsar.AutoClusterFailover(
            pulsar.ServiceInfo(URL), [pulsar.ServiceInfo("pulsar://127.0.0.1:1")], check_interval_ms=50
        )
        client = pulsar.Client(failover)
        consumer = client.subscribe(topic(), "sub", message_listener=lambda c, m: None)
        client.create_producer(topic()).send(b"x")
        client.close()
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        assert not left, left
        """,
    )


def test_no_thread_outlives_an_asyncio_clients_close(standalone: StandaloneProcess) -> None:
    run_program(
        standalone,
        """
        async def main():
            failover = pulsar.AutoClusterFailover(
                pulsar.ServiceInfo(URL), [pulsar.ServiceInfo("pulsar://127.0.0.1:1")], check_interval_ms=50
            )
            client = pulsar.asyncio.Client(failover)
            producer = await client.create_producer(topic())
            await producer.send(b"x")
            await client.close()
            left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
            assert not left, left

        asyncio.run(main())
        """,
    )


def test_no_thread_outlives_an_unreferenced_client(standalone: StandaloneProcess) -> None:
    run_program(
        standalone,
        """
        def forgotten():
            client = pulsar.Client(URL)
            client.create_producer(topic()).send(b"y")
            client.subscribe(topic(), "sub")

        forgotten()
        gc.collect()
        left = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        assert not left, left
        """,
    )
