"""TLS on the bookie port (WIRE.md R84-R86): a real ``BookieService`` with the test CA's certificate.

A client trusting the CA writes and reads; a plaintext client, a client trusting another CA, a
client dialling a name the certificate does not carry, and (with client certificates required) a
client without one are all refused, and none of their writes is stored. A bookie that speaks TLS
says so in its registration, so a metadata-resolved client without TLS refuses it up front. The
last test runs real processes: TLS bookies with authentication, and a broker with
``bookkeeperTLSTrustCertsFilePath`` and its bookie token producing and consuming.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki
from tests.support.cluster import LocalCluster
from tests.support.etcd import etcd_binary

import magnetar
from magnetar.bookie.auth import BookieSecurity
from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.registration import lookup
from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.bookie.service import BookieService
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.ledger.bookie_api import NO_ENTRY, BookieClient
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import NoSuchLedger, NotConnected
from magnetar.security import keys
from magnetar.security.tokens import create_token


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pki]:
    yield make_pki(tmp_path_factory.mktemp("pki"))


def _server_security(pki: Pki, *, require_client_cert: bool = False) -> BookieSecurity:
    return BookieSecurity(
        tls_enabled=True,
        tls_certificate_file_path=str(pki.server_cert),
        tls_key_file_path=str(pki.server_key),
        tls_trust_certs_file_path=str(pki.ca_cert) if require_client_cert else None,
        tls_require_trusted_client_cert_on_connect=require_client_cert,
    )


def _tls(trust: Path, *, client_cert: Pki | None = None) -> BookieClientSecurity:
    return BookieClientSecurity.from_settings(
        tls_trust_certs_file_path=str(trust),
        tls_certificate_file_path=str(client_cert.client_cert) if client_cert else None,
        tls_key_file_path=str(client_cert.client_key) if client_cert else None,
        tls_client_authentication=client_cert is not None,
    )


@pytest.fixture
async def tls_bookie(tmp_path: Path, pki: Pki) -> AsyncIterator[BookieService]:
    svc = BookieService(tmp_path / "b", bookie_id="b1", readonly_threshold=None, security=_server_security(pki))
    async with svc:
        yield svc


async def _add(client: BookieClient, ledger: int, entry: int, data: bytes) -> None:
    await client.add_entry(ledger, entry, data, crc32c(data), entry - 1 if entry else NO_ENTRY)


async def _untouched(svc: BookieService, ledger: int) -> None:
    with pytest.raises(NoSuchLedger):
        await svc.storage.read_lac(ledger)


async def test_client_trusting_the_ca_writes_and_reads(tls_bookie: BookieService, pki: Pki) -> None:
    async with TcpBookieClient("b1", "localhost", tls_bookie.port, security=_tls(pki.ca_cert)) as client:
        await _add(client, 50, 0, b"over tls")
        assert (await client.read_entry(50, 0)).data == b"over tls"


async def test_plaintext_client_is_refused(tls_bookie: BookieService) -> None:
    async with TcpBookieClient("b1", "127.0.0.1", tls_bookie.port, connect_timeout=5) as client:
        with pytest.raises(NotConnected) as err:
            await _add(client, 51, 0, b"plaintext")
        assert str(err.value) == "connection to the bookie closed"
    await _untouched(tls_bookie, 51)


async def test_client_trusting_another_ca_is_refused(tls_bookie: BookieService, pki: Pki) -> None:
    async with TcpBookieClient("b1", "localhost", tls_bookie.port, security=_tls(pki.other_ca_cert)) as client:
        with pytest.raises(NotConnected) as err:
            await _add(client, 52, 0, b"wrong ca")
        assert str(err.value).startswith(
            "TLS handshake with bookie b1 failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
            "unable to get local issuer certificate"
        )
    await _untouched(tls_bookie, 52)


async def test_host_name_mismatch_is_refused(tls_bookie: BookieService, pki: Pki) -> None:
    """The certificate names ``localhost``, not ``127.0.0.1``: dialling the address fails."""
    async with TcpBookieClient("b1", "127.0.0.1", tls_bookie.port, security=_tls(pki.ca_cert)) as client:
        with pytest.raises(NotConnected) as err:
            await _add(client, 53, 0, b"wrong name")
        assert str(err.value).startswith(
            "TLS handshake with bookie b1 failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
            "IP address mismatch"
        )
    await _untouched(tls_bookie, 53)


async def test_required_client_certificate(tmp_path: Path, pki: Pki) -> None:
    security = _server_security(pki, require_client_cert=True)
    async with BookieService(tmp_path / "m", bookie_id="b1", readonly_threshold=None, security=security) as svc:
        async with TcpBookieClient("b1", "localhost", svc.port, security=_tls(pki.ca_cert)) as anonymous:
            with pytest.raises(NotConnected):  # TLS 1.3: the refusal arrives after the handshake
                await _add(anonymous, 54, 0, b"no certificate")
        await _untouched(svc, 54)
        async with TcpBookieClient("b1", "localhost", svc.port, security=_tls(pki.ca_cert, client_cert=pki)) as ok:
            await _add(ok, 55, 0, b"mtls")
            assert (await ok.read_entry(55, 0)).data == b"mtls"


async def test_tls_bookie_registers_tls_and_plaintext_resolver_refuses_it(tmp_path: Path, pki: Pki) -> None:
    store = await LmdbMetadataStore.open(tmp_path / "meta")
    plain = MetadataBookieResolver(store, connect_timeout=5)
    secure = MetadataBookieResolver(store, security=_tls(pki.ca_cert))
    svc = BookieService(
        tmp_path / "b",
        bookie_id="b1",
        store=store,
        readonly_threshold=None,
        advertised_host="localhost",
        security=_server_security(pki),
        autorecovery=False,
    )
    try:
        await svc.start()
        reg = await lookup(store, "b1")
        assert reg is not None and reg.tls and reg.host == "localhost"
        with pytest.raises(NotConnected) as err:
            await _add(plain.client("b1"), 56, 0, b"plaintext")
        assert str(err.value) == "bookie 'b1' accepts only TLS; set bookkeeperTLSTrustCertsFilePath to reach it"
        await _untouched(svc, 56)
        await _add(secure.client("b1"), 57, 0, b"resolved")
        assert (await svc.storage.read(57, 0)).data == b"resolved"
    finally:
        await plain.close()
        await secure.close()
        await svc.stop()
        await store.close()


@pytest.mark.skipif(etcd_binary() is None, reason="needs the etcd binary")
def test_cluster_with_tls_and_authentication_to_bookies(tmp_path: Path, pki: Pki) -> None:
    secret = keys.new_secret_key()
    key_flags = ["--authentication-enabled", "--token-secret-key", "data:;base64," + base64.b64encode(secret).decode()]
    bookie_token, broker_token = (create_token("HS256", secret, role) for role in ("bookie", "broker"))
    trust = ["--bookkeeper-tls-trust-certs-file-path", str(pki.ca_cert)]
    bookie_args = [
        *key_flags,
        "--super-user-roles",
        "broker,bookie",
        "--tls-enabled",
        "--tls-certificate-file-path",
        str(pki.server_cert),
        "--tls-key-file-path",
        str(pki.server_key),
        "--advertised-address",
        "localhost",
        "--bookkeeper-client-authentication-parameters",
        f"token:{bookie_token}",
        *trust,
    ]
    broker_args = ["--bookkeeper-client-authentication-parameters", f"token:{broker_token}", *trust]
    topic = "persistent://public/default/bookie-tls"
    with (
        LocalCluster(
            tmp_path,
            bookies=2,
            brokers=1,
            ensemble_size=2,
            write_quorum=2,
            ack_quorum=2,
            bookie_args=bookie_args,
            broker_args=broker_args,
        ) as cluster,
        magnetar.Client(cluster.service_url, operation_timeout_seconds=10) as client,
    ):
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"tls{i}".encode())
        assert [consumer.receive(timeout_millis=10000).data() for _ in range(5)] == [
            f"tls{i}".encode() for i in range(5)
        ]
