"""A client pointed at the wrong port of a real standalone fails at once with one clear line
(client/net/connection.py): the admin (HTTP) port answers in HTTP, which read as a frame would be
a length of 1213486160 bytes; a TLS port drops a plaintext hello without a word. Both are
``ConnectError`` (pulsar-client's type for a connection that cannot be made), raised well within
5 s and without a retry logged in between.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from tests.security.certs import make_pki
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar


def _port(url: str) -> int:
    port = urlparse(url).port
    assert port is not None, url
    return port


def _refusal(url: str, caplog: pytest.LogCaptureFixture) -> magnetar.ConnectError:
    """The ConnectError of a first producer on ``url``, checked for speed, shape and quiet."""
    client = magnetar.Client(url, operation_timeout_seconds=25)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(magnetar.ConnectError) as caught:
            client.create_producer(f"persistent://public/default/wrong-port-{uuid.uuid4().hex[:8]}")
        assert time.monotonic() - started < 5
    finally:
        client.close()
    assert "\n" not in str(caught.value)
    assert not [r for r in caplog.records if "1213486160" in r.getMessage()], caplog.text
    return caught.value


def test_a_client_on_the_admin_port_says_it_reached_an_http_server(
    standalone: StandaloneProcess, caplog: pytest.LogCaptureFixture
) -> None:
    refused = _refusal(f"magnetar://127.0.0.1:{_port(standalone.admin_url)}", caplog)
    assert "answered in HTTP" in str(refused) and "admin" in str(refused)


@pytest.fixture(scope="module")
def tls_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("wrong-port-tls")
    pki = make_pki(base / "pki")
    args = ["--broker-service-port-tls", "0", "--web-service-port-tls", "0"]
    args += ["--tls-certificate-file-path", str(pki.server_cert)]
    args += ["--tls-key-file-path", str(pki.server_key)]
    with run_standalone(Path(base), *args) as sa:
        assert sa.service_url_tls, sa.log_tail()
        yield sa


def test_plaintext_on_the_tls_port_says_it_is_a_tls_port(
    tls_only: StandaloneProcess, caplog: pytest.LogCaptureFixture
) -> None:
    assert tls_only.service_url_tls is not None
    refused = _refusal(f"magnetar://127.0.0.1:{_port(tls_only.service_url_tls)}", caplog)
    assert "is a TLS port" in str(refused) and "magnetar+ssl://" in str(refused)


def test_the_right_port_still_works(tls_only: StandaloneProcess) -> None:
    client = magnetar.Client(tls_only.service_url)
    try:
        client.create_producer(f"persistent://public/default/right-port-{uuid.uuid4().hex[:8]}").send(b"x")
    finally:
        client.close()
