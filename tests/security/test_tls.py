"""TLS on the binary protocol (``magnetar+ssl://``) and HTTPS on the admin API, against a real
standalone with both plaintext and TLS listeners (WIRE.md R65-R67, client/net/tls.py, node/tls.py).

The server certificate names ``localhost`` only (tests/security/certs.py) and the standalone
advertises ``localhost``, so dialling ``127.0.0.1`` is the wrong-host case. Every refusal is
checked for its exact error and for having stored nothing.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_standalone(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[StandaloneProcess, str, str]]:
    """A standalone with plaintext and TLS listeners: (process, magnetar+ssl URL, https URL)."""
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
    with run_standalone(tmp_path_factory.mktemp("tls-standalone"), *args) as sa:
        assert sa.service_url_tls and sa.admin_url_tls, sa.log_tail()
        yield sa, sa.service_url_tls, sa.admin_url_tls


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].rstrip("/"))


def _topic() -> str:
    return f"persistent://public/default/tls-{uuid.uuid4().hex[:10]}"


def _topics(sa: StandaloneProcess) -> list[str]:
    status, body = admin_call(sa, "GET", "/admin/v2/persistent/public/default")
    assert status == 200
    return list(body)


def _round_trip(client: magnetar.Client, topic: str, n: int = 5) -> None:
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m{i}".encode())
    got = [consumer.receive(10_000) for _ in range(n)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(n)]
    for m in got:
        consumer.acknowledge(m)


def test_client_trusting_the_ca_produces_and_consumes_over_tls(
    tls_standalone: tuple[StandaloneProcess, str, str], pki: Pki
) -> None:
    _, tls_url, _ = tls_standalone
    assert tls_url.startswith("magnetar+ssl://localhost:")
    client = magnetar.Client(tls_url, tls_trust_certs_file_path=str(pki.ca_cert), tls_validate_hostname=True)
    try:
        _round_trip(client, _topic())
    finally:
        client.close()


def test_pulsar_ssl_scheme_and_use_tls_are_accepted(
    tls_standalone: tuple[StandaloneProcess, str, str], pki: Pki
) -> None:
    _, tls_url, _ = tls_standalone
    port = _port(tls_url)
    for url, use_tls in ((f"pulsar+ssl://localhost:{port}", False), (f"magnetar://localhost:{port}", True)):
        client = magnetar.Client(url, use_tls=use_tls, tls_trust_certs_file_path=str(pki.ca_cert))
        try:
            _round_trip(client, _topic(), 2)
        finally:
            client.close()


def test_wrong_ca_fails_fast_with_a_clear_error(tls_standalone: tuple[StandaloneProcess, str, str], pki: Pki) -> None:
    sa, tls_url, _ = tls_standalone
    topic = _topic()
    client = magnetar.Client(tls_url, tls_trust_certs_file_path=str(pki.other_ca_cert), operation_timeout_seconds=30)
    try:
        started = time.monotonic()
        with pytest.raises(magnetar.ConnectError, match="certificate verify failed"):
            client.create_producer(topic)
        assert time.monotonic() - started < 10  # not retried until the operation timeout
    finally:
        client.close()
    assert topic not in _topics(sa)  # nothing created, nothing stored


def test_wrong_hostname_fails_with_validation_and_passes_when_insecure(
    tls_standalone: tuple[StandaloneProcess, str, str], pki: Pki
) -> None:
    sa, tls_url, _ = tls_standalone
    by_address = f"magnetar+ssl://127.0.0.1:{_port(tls_url)}"  # the certificate names localhost only
    topic = _topic()
    strict = magnetar.Client(by_address, tls_trust_certs_file_path=str(pki.ca_cert), tls_validate_hostname=True)
    try:
        with pytest.raises(magnetar.ConnectError, match=r"IP address mismatch.*does not name this host"):
            strict.create_producer(topic)
    finally:
        strict.close()
    assert topic not in _topics(sa)
    insecure = magnetar.Client(by_address, tls_validate_hostname=True, tls_allow_insecure_connection=True)
    try:
        _round_trip(insecure, topic, 2)
    finally:
        insecure.close()
    # pulsar-client's default, tls_validate_hostname=False: the chain from the CA is enough.
    lenient = magnetar.Client(by_address, tls_trust_certs_file_path=str(pki.ca_cert))
    try:
        _round_trip(lenient, _topic(), 1)
    finally:
        lenient.close()


def test_plaintext_client_on_the_tls_port_fails_and_the_broker_serves_others(
    tls_standalone: tuple[StandaloneProcess, str, str], pki: Pki
) -> None:
    sa, tls_url, _ = tls_standalone
    topic = _topic()
    plain = magnetar.Client(f"magnetar://localhost:{_port(tls_url)}", operation_timeout_seconds=2)
    try:
        with pytest.raises(magnetar.ConnectError, match="is a TLS port") as refused:
            plain.create_producer(topic)
        assert "magnetar+ssl://" in str(refused.value)
    finally:
        plain.close()
    assert topic not in _topics(sa)
    client = magnetar.Client(tls_url, tls_trust_certs_file_path=str(pki.ca_cert))
    try:
        _round_trip(client, topic, 3)
    finally:
        client.close()


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_https_admin_with_magnetar_admin_and_the_ca(
    tls_standalone: tuple[StandaloneProcess, str, str], pki: Pki
) -> None:
    _, _, https_url = tls_standalone
    assert https_url.startswith("https://localhost:")
    ok = _admin("--admin-url", https_url, "--tls-trust-cert-path", str(pki.ca_cert), "tenants", "list")
    assert ok.returncode == 0, ok.stderr
    assert "public" in ok.stdout
    untrusted = _admin("--admin-url", https_url, "tenants", "list")
    assert untrusted.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    wrong_ca = _admin("--admin-url", https_url, "--tls-trust-cert-path", str(pki.other_ca_cert), "tenants", "list")
    assert wrong_ca.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in wrong_ca.stderr
    insecure = _admin("--admin-url", https_url, "--tls-allow-insecure", "tenants", "list")
    assert insecure.returncode == 0, insecure.stderr
    assert "public" in insecure.stdout


def test_tls_settings_missing_a_key_stop_the_broker(tmp_path: Path, pki: Pki) -> None:
    sa = StandaloneProcess(
        tmp_path / "data",
        tmp_path / "sa.log",
        extra_args=["--broker-service-port-tls", "0", "--tls-certificate-file-path", str(pki.server_cert)],
    )
    with pytest.raises(RuntimeError, match="tlsKeyFilePath"):
        sa.start()


def test_mtls_requires_a_client_certificate_from_the_trusted_ca(tmp_path: Path, pki: Pki) -> None:
    args = [
        "--broker-service-port-tls",
        "0",
        "--web-service-port-tls",
        "0",
        "--tls-certificate-file-path",
        str(pki.server_cert),
        "--tls-key-file-path",
        str(pki.server_key),
        "--tls-trust-certs-file-path",
        str(pki.ca_cert),
        "--tls-require-trusted-client-cert-on-connect",
        "--advertised-address",
        "localhost",
    ]
    with run_standalone(tmp_path, *args) as sa:
        assert sa.service_url_tls, sa.log_tail()
        tls_url = sa.service_url_tls
        topic = _topic()
        anonymous = magnetar.Client(tls_url, tls_trust_certs_file_path=str(pki.ca_cert), operation_timeout_seconds=3)
        try:
            # TLS 1.3 reports a refused client certificate after the handshake, as a closed connection.
            with pytest.raises((magnetar.ConnectError, magnetar.NotConnected, magnetar.Timeout)):
                anonymous.create_producer(topic)
        finally:
            anonymous.close()
        assert topic not in _topics(sa)
        with_cert = magnetar.Client(
            tls_url,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_certificate_file_path=str(pki.client_cert),
            tls_private_key_file_path=str(pki.client_key),
        )
        try:
            _round_trip(with_cert, topic, 2)
        finally:
            with_cert.close()
        as_auth = magnetar.Client(
            tls_url,
            authentication=magnetar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)),
            tls_trust_certs_file_path=str(pki.ca_cert),
        )
        try:
            _round_trip(as_auth, _topic(), 1)
        finally:
            as_auth.close()


def test_tls_only_broker_advertises_its_tls_listener(tmp_path: Path, pki: Pki) -> None:
    args = [
        "--port",
        "none",  # Pulsar: an empty brokerServicePort
        "--broker-service-port-tls",
        "0",
        "--tls-certificate-file-path",
        str(pki.server_cert),
        "--tls-key-file-path",
        str(pki.server_key),
        "--advertised-address",
        "localhost",
    ]
    with run_standalone(tmp_path, *args) as sa:
        assert sa.service_url.startswith("magnetar+ssl://localhost:")  # the only binary listener
        client = magnetar.Client(sa.service_url, tls_trust_certs_file_path=str(pki.ca_cert), tls_validate_hostname=True)
        try:
            _round_trip(client, _topic(), 2)
        finally:
            client.close()
