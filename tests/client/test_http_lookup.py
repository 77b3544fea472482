"""An ``http://`` service URL: lookups over the admin REST API, then the binary protocol to the owner.

pulsar-client accepts a broker's web service URL as its service URL (Pulsar's HTTP lookup). These
tests run a real standalone and give the client only its admin URL: producing, consuming, a
partitioned topic (partition count over HTTP) and a pattern subscription (topic list over HTTP)
must all work, and an unreachable HTTP URL must fail at the operation timeout, not hang.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from tests.security.certs import make_pki
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar as pulsar
from magnetar.client import aio
from magnetar.client.net.http_lookup import HttpLookup


def test_produce_and_consume_through_http_lookup(standalone: StandaloneProcess, topic: str) -> None:
    assert standalone.admin_url.startswith("http://")
    client = pulsar.Client(standalone.admin_url, operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(topic, "http-sub")
        producer = client.create_producer(topic)
        sent = [producer.send(f"m{i}".encode()) for i in range(5)]
        got = [consumer.receive(timeout_millis=10000) for _ in range(5)]
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
        assert [m.message_id() for m in got] == sent
        # Only the binary connection to the owner was opened: the lookups went over HTTP.
        assert list(client._client._conns) == [standalone.service_url.replace("pulsar://", "magnetar://")]
    finally:
        client.close()


def test_partitioned_topic_and_pattern_over_http(standalone: StandaloneProcess) -> None:
    base = f"http-part-{uuid.uuid4().hex[:8]}"
    status, _ = admin_call(standalone, "PUT", f"/admin/v2/persistent/public/default/{base}/partitions", 3)
    assert status in (200, 204)

    async def main() -> tuple[list[str], set[bytes]]:
        async with aio.Client(standalone.admin_url, operation_timeout_seconds=20) as client:
            partitions = await client.get_topic_partitions(base)
            consumer = await client.subscribe(
                re.compile(f"persistent://public/default/{base}.*"),
                "http-pattern",
                initial_position=pulsar.InitialPosition.Earliest,
            )
            producer = await client.create_producer(base, batching_enabled=False)
            for i in range(6):
                await producer.send(f"p{i}".encode())
            got = {(await consumer.receive(10000)).data() for _ in range(6)}
            return partitions, got

    partitions, got = asyncio.run(asyncio.wait_for(main(), 90))
    assert partitions == [f"persistent://public/default/{base}-partition-{i}" for i in range(3)]
    assert got == {f"p{i}".encode() for i in range(6)}


def test_http_lookup_answers_the_owner_and_partition_count(standalone: StandaloneProcess, topic: str) -> None:
    async def main() -> tuple[str, int]:
        lookup = HttpLookup(standalone.admin_url, ssl_context=None, timeout=10)
        answer = await lookup.lookup(topic)
        return str(answer["broker_url"]), await lookup.partitions(topic)

    url, partitions = asyncio.run(main())
    assert url == standalone.service_url
    assert partitions == 0


def test_unreachable_http_service_url_fails_at_the_operation_timeout(topic: str) -> None:
    async def main() -> None:
        async with aio.Client("http://127.0.0.1:1", operation_timeout_seconds=2) as client:
            await client.create_producer(topic)

    with pytest.raises(pulsar.PulsarException):
        asyncio.run(asyncio.wait_for(main(), 30))


def test_https_lookup_then_tls_to_the_owner(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An ``https://`` service URL: the lookup over HTTPS names the owner's TLS address, dialled with TLS."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    args = [
        "--advertised-address",
        "localhost",
        "--broker-service-port-tls",
        "0",
        "--web-service-port-tls",
        "0",
        "--tls-certificate-file-path",
        str(pki.server_cert),
        "--tls-key-file-path",
        str(pki.server_key),
    ]
    topic = f"persistent://public/default/https-{uuid.uuid4().hex[:8]}"
    with run_standalone(tmp_path_factory.mktemp("https-standalone"), *args) as sa:
        assert sa.admin_url_tls.startswith("https://"), sa.log_tail()
        client = pulsar.Client(sa.admin_url_tls, tls_trust_certs_file_path=str(pki.ca_cert), tls_validate_hostname=True)
        try:
            consumer = client.subscribe(topic, "https-sub")
            producer = client.create_producer(topic)
            producer.send(b"secure")
            assert consumer.receive(10000).data() == b"secure"
            assert list(client._client._conns) == [sa.service_url_tls]
        finally:
            client.close()
