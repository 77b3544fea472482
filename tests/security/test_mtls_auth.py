"""The TLS authentication provider (WIRE.md R93, broker/auth/tls_provider.py): the role is the
client certificate's CN, on the binary protocol (``AuthenticationTLS``, ``auth_method: "tls"``)
and on HTTPS admin (a request without ``Authorization``; magnetar-admin's AuthenticationTls).

The standalone runs both providers (tls, token) with authorization on: ``admin`` is the
superuser, and a namespace grants produce/consume to ``test-client`` only. So a certificate with
CN ``test-client`` producing and one with CN ``intruder`` (same CA) being refused shows the role is
the CN, not merely "has a certificate". Refusals are checked for their exact error and for having
created nothing.
"""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.protocol.wire import Wire, address
from tests.security.certs import Pki, make_pki
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar
from magnetar.broker.auth import keys
from magnetar.broker.auth.tokens import create_token
from magnetar.protocol import commands as c
from magnetar.protocol.framing import FrameDecoder


class Setup:
    def __init__(self, sa: StandaloneProcess, tls_url: str, https_url: str, pki: Pki, admin_token: str) -> None:
        self.sa, self.tls_url, self.https_url, self.pki, self.admin_token = sa, tls_url, https_url, pki, admin_token

    def https(
        self, method: str, path: str, *, cert: tuple[Path, Path] | None = None, body: Any = None
    ) -> tuple[int, Any]:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        if cert is not None:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.https_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw.strip() else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw.strip() else None

    def as_admin(self, method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(
            self.sa.admin_url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return json.loads(raw) if raw.strip() else None

    def topics(self, ns: str) -> list[str]:
        return list(self.as_admin("GET", f"/admin/v2/persistent/{ns}"))

    def namespace(self) -> str:
        """A fresh namespace where only ``test-client`` may produce and consume."""
        ns = f"public/mtls-{uuid.uuid4().hex[:6]}"
        self.as_admin("PUT", f"/admin/v2/namespaces/{ns}")
        self.as_admin("POST", f"/admin/v2/namespaces/{ns}/permissions/test-client", ["produce", "consume"])
        return ns


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("mtls")
    pki = make_pki(base / "pki")
    secret = keys.new_secret_key()
    (base / "secret.key").write_bytes(secret)
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
        "--tls-trust-certs-file-path",
        str(pki.ca_cert),
        "--authentication-enabled",
        "--authentication-providers",
        "org.apache.pulsar.broker.authentication.AuthenticationProviderTls,token",
        "--token-secret-key",
        f"file://{base / 'secret.key'}",
        "--authorization-enabled",
        "--super-user-roles",
        "admin",
    ]
    (base / "sa").mkdir()
    with run_standalone(base / "sa", *args) as sa:
        assert sa.service_url_tls and sa.admin_url_tls, sa.log_tail()
        yield Setup(sa, sa.service_url_tls, sa.admin_url_tls, pki, create_token("HS256", secret, "admin"))


def _client(s: Setup, cert: Path | None, key: Path | None) -> magnetar.Client:
    auth = magnetar.AuthenticationTLS(str(cert), str(key)) if cert is not None and key is not None else None
    return magnetar.Client(
        s.tls_url, authentication=auth, tls_trust_certs_file_path=str(s.pki.ca_cert), operation_timeout_seconds=5
    )


def test_the_certificates_cn_is_the_role_on_the_binary_protocol(setup: Setup) -> None:
    ns = setup.namespace()
    topic = f"persistent://{ns}/t"
    client = _client(setup, setup.pki.client_cert, setup.pki.client_key)  # CN test-client: granted
    try:
        consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"hello")
        assert consumer.receive(10_000).data() == b"hello"
    finally:
        client.close()
    other = f"persistent://{ns}/intruder"
    intruder = _client(setup, setup.pki.intruder_cert, setup.pki.intruder_key)  # same CA, CN intruder
    try:
        with pytest.raises(magnetar.AuthorizationError):
            intruder.create_producer(other)
    finally:
        intruder.close()
    assert f"persistent://{other.split('://')[1]}" not in setup.topics(ns)


def test_a_client_without_a_certificate_is_refused(setup: Setup) -> None:
    ns = setup.namespace()
    anonymous = _client(setup, None, None)
    try:
        with pytest.raises(magnetar.AuthenticationError, match="no credentials were given"):
            anonymous.create_producer(f"persistent://{ns}/anon")
    finally:
        anonymous.close()
    assert setup.topics(ns) == []


def _tls_wire(s: Setup) -> Wire:
    host, port = address(s.tls_url.replace("magnetar+ssl://", "magnetar://"))
    ctx = ssl.create_default_context(cafile=str(s.pki.ca_cert))
    raw = socket.create_connection((host, port), timeout=15)
    wire = Wire.__new__(Wire)
    wire.sock = ctx.wrap_socket(raw, server_hostname="localhost")
    wire.sock.settimeout(15)
    wire.decoder = FrameDecoder()
    wire.inbox = []
    wire.rids = itertools.count(1)
    return wire


def test_auth_method_tls_without_a_certificate_cannot_claim_one_in_connect(setup: Setup) -> None:
    """The role comes from the TLS layer only: ``auth_data`` naming a certificate is ignored."""
    wire = _tls_wire(setup)
    try:
        forged = {"subject": [[["commonName", "admin"]]]}
        wire.send(c.connect("forger", auth_method="tls", auth_data=json.dumps(forged).encode()))
        frames = wire.until_closed()
    finally:
        wire.close()
    assert frames == [
        {
            "t": c.ERROR,
            "rid": 0,
            "code": "AuthenticationError",
            "message": "Failed to authenticate: no client certificate was presented over TLS (auth_method tls)",
        }
    ], frames
    plain = Wire(setup.sa.service_url)  # and over plaintext there is no certificate at all
    try:
        plain.send(c.connect("plain", auth_method="tls", auth_data=b""))
        frames = plain.until_closed()
    finally:
        plain.close()
    assert [f["code"] for f in frames] == ["AuthenticationError"], frames
    assert "no client certificate" in frames[0]["message"]


def test_a_certificate_from_another_ca_is_refused(setup: Setup) -> None:
    ns = setup.namespace()
    client = _client(setup, setup.pki.other_client_cert, setup.pki.other_client_key)  # CN test-client, wrong CA
    try:
        with pytest.raises((magnetar.ConnectError, magnetar.NotConnected, magnetar.Timeout)):
            client.create_producer(f"persistent://{ns}/wrong-ca")
    finally:
        client.close()
    assert setup.topics(ns) == []
    status, _ = _https_or_error(setup, (setup.pki.other_client_cert, setup.pki.other_client_key))
    assert status == "refused"


def _https_or_error(setup: Setup, cert: tuple[Path, Path]) -> tuple[str, Any]:
    try:
        return str(setup.https("GET", "/admin/v2/tenants", cert=cert)[0]), None
    except (urllib.error.URLError, ssl.SSLError, ConnectionError) as exc:
        return "refused", exc


def test_https_admin_takes_the_role_from_the_certificate(setup: Setup) -> None:
    status, body = setup.https("GET", "/admin/v2/tenants", cert=(setup.pki.admin_cert, setup.pki.admin_key))
    assert status == 200 and "public" in body, (status, body)  # CN admin: the superuser
    status, body = setup.https(
        "PUT", "/admin/v2/tenants/by-intruder", cert=(setup.pki.intruder_cert, setup.pki.intruder_key)
    )
    # CN intruder: authenticated (it got as far as authorization), not allowed (Pulsar's 401 there).
    assert (status, body) == (401, {"reason": "This operation requires super-user access"})
    status, body = setup.https("GET", "/admin/v2/tenants")  # no certificate, no token
    assert (status, body) == (401, {"reason": "Authentication required: send Authorization: Bearer <token>"})
    assert "by-intruder" not in setup.as_admin("GET", "/admin/v2/tenants")


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_magnetar_admin_with_the_tls_auth_plugin(setup: Setup) -> None:
    pki = setup.pki
    common = ["--admin-url", setup.https_url, "--tls-trust-cert-path", str(pki.ca_cert)]
    plugin = ["--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationTls"]
    ok = _admin(
        *common, *plugin, "--auth-params", f"tlsCertFile:{pki.admin_cert},tlsKeyFile:{pki.admin_key}", "tenants", "list"
    )
    assert ok.returncode == 0, ok.stderr
    assert "public" in ok.stdout
    refused = _admin(*common, "tenants", "list")
    assert refused.returncode == 1 and "401" in refused.stderr + refused.stdout, refused
    bad = _admin(*common, *plugin, "--auth-params", f"tlsCertFile:{pki.admin_cert}", "tenants", "list")
    assert bad.returncode != 0 and "tlsKeyFile" in bad.stderr, bad


def _perf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", "perf", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_magnetar_perf_with_the_tls_auth_plugin_and_a_trusted_ca(setup: Setup, tmp_path: Path) -> None:
    pki, ns = setup.pki, setup.namespace()
    topic = f"persistent://{ns}/perf"
    secured = ["--url", setup.tls_url, "--trust-cert-file", str(pki.ca_cert)]
    plugin = ["--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationTls"]
    params = ["--auth-params", f"tlsCertFile:{pki.client_cert},tlsKeyFile:{pki.client_key}"]
    out = tmp_path / "produce.json"
    ok = _perf("produce", topic, "-n", "200", *secured, *plugin, *params, "--json", str(out))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())["messages"] == 200
    stats = setup.as_admin("GET", f"/admin/v2/persistent/{ns}/perf/stats")
    assert stats["msgInCounter"] == 200, stats
    refused = _perf("produce", f"persistent://{ns}/perf-anon", "-n", "10", *secured)  # no credentials
    assert refused.returncode != 0
    assert "AuthenticationError" in refused.stderr, refused.stderr[-2000:]
    assert f"persistent://{ns}/perf-anon" not in setup.topics(ns)
