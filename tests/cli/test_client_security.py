"""``magnetar produce`` / ``consume`` against the secured standalone of the security guide.

The standalone is the guide's (docs/operating/security/index.md): TLS listeners only, token
authentication, authorization on with ``admin`` the superuser, and ``app`` granted produce and
consume on one namespace. The commands take pulsar-client's CLI options (``--auth-plugin``,
``--auth-params``, ``--tlsTrustCertsFilePath``) or ``MAGNETAR_AUTH_TOKEN``; a missing token or a
missing CA is one line and a non-zero exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki
from tests.support.standalone import StandaloneProcess, run_standalone

from magnetar.broker.auth import keys
from magnetar.broker.auth.tokens import create_token

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@dataclass
class Secured:
    sa: StandaloneProcess
    pki: Pki
    admin_token: Path
    app_token: Path
    namespace: str

    @property
    def url(self) -> str:
        return self.sa.service_url_tls.replace("127.0.0.1", "localhost")

    @property
    def admin_url(self) -> str:
        return self.sa.admin_url_tls.replace("127.0.0.1", "localhost")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "MAGNETAR_AUTH_TOKEN"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120, env=full_env)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secured")
    pki = make_pki(base / "pki")
    secret = keys.new_secret_key()
    (base / "secret.key").write_bytes(secret)
    admin_token, app_token = base / "admin.token", base / "app.token"
    admin_token.write_text(create_token("HS256", secret, "admin"))
    app_token.write_text(create_token("HS256", secret, "app"))
    (base / "sa").mkdir()
    args = [
        *("--port", "none", "--web-port", "none"),
        *("--broker-service-port-tls", "0", "--web-service-port-tls", "0"),
        *("--tls-certificate-file-path", str(pki.server_cert), "--tls-key-file-path", str(pki.server_key)),
        *("--authentication-enabled", "--token-secret-key", f"file://{base / 'secret.key'}"),
        *("--authorization-enabled", "--super-user-roles", "admin"),
    ]
    with run_standalone(base / "sa", *args) as sa:
        assert sa.service_url_tls and sa.admin_url_tls, sa.log_tail()
        s = Secured(sa, pki, admin_token, app_token, f"acme-{uuid.uuid4().hex[:6]}/orders")
        admin = [
            "magnetar.cli.admin",
            *("--admin-url", s.admin_url, "--tls-trust-cert-path", str(pki.ca_cert)),
            *("--auth-params", f"file://{admin_token}"),
        ]
        tenant = s.namespace.split("/")[0]
        for step in (
            ["tenants", "create", tenant, "--admin-roles", "admin"],
            ["namespaces", "create", s.namespace],
            ["namespaces", "grant-permission", s.namespace, "--role", "app", "--actions", "produce,consume"],
        ):
            done = run(*admin, *step)
            assert done.returncode == 0, done.stderr
        yield s


def test_produce_and_consume_with_pulsar_client_options(secured: Secured) -> None:
    topic = f"persistent://{secured.namespace}/o1"
    auth = ["--auth-plugin", TOKEN_PLUGIN, "--auth-params", f"file://{secured.app_token}"]
    trust = ["--tlsTrustCertsFilePath", str(secured.pki.ca_cert)]
    produced = run(
        "magnetar.cli.main", "produce", topic, "-m", "order-{i}", "-n", "3", "--url", secured.url, *auth, *trust
    )
    assert produced.returncode == 0, produced.stderr
    assert "3 messages produced" in produced.stdout
    consumed = run(
        "magnetar.cli.main", "consume", topic, "-s", "app-billing", "-n", "3", "--timeout", "20",
        "--url", secured.url, *auth, *trust,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert [line.split()[-1] for line in consumed.stdout.splitlines()] == ["order-0", "order-1", "order-2"]


def test_the_token_from_the_environment(secured: Secured) -> None:
    topic = f"persistent://{secured.namespace}/o2"
    env = {"MAGNETAR_AUTH_TOKEN": f"file://{secured.app_token}"}
    trust = ["--tlsTrustCertsFilePath", str(secured.pki.ca_cert)]
    produced = run("magnetar.cli.main", "produce", topic, "-m", "env", "--url", secured.url, *trust, env=env)
    assert produced.returncode == 0, produced.stderr
    consumed = run(
        "magnetar.cli.main", "consume", topic, "-s", "app-env", "--timeout", "20", "--url", secured.url, *trust,
        env=env,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split()[-1] == "env"


def _one_line_failure(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_without_a_token_the_refusal_is_one_line(secured: Secured) -> None:
    topic = f"persistent://{secured.namespace}/o3"
    done = run(
        "magnetar.cli.main", "produce", topic, "--url", secured.url, "--tlsTrustCertsFilePath", str(secured.pki.ca_cert)
    )
    assert "Authentication required" in _one_line_failure(done)


def test_without_the_ca_the_tls_failure_is_one_line(secured: Secured) -> None:
    topic = f"persistent://{secured.namespace}/o4"
    done = run(
        "magnetar.cli.main", "produce", topic, "--url", secured.url, "--auth-params", f"file://{secured.app_token}"
    )
    assert "certificate verify failed" in _one_line_failure(done)


def test_an_unknown_plugin_is_one_line(secured: Secured) -> None:
    topic = f"persistent://{secured.namespace}/o5"
    done = run(
        "magnetar.cli.main", "produce", topic, "--url", secured.url,
        "--auth-plugin", "com.example.NoSuchAuth", "--auth-params", "x:y",
    )  # fmt: skip
    _one_line_failure(done)


def test_admin_without_credentials_or_ca_is_one_line(secured: Secured) -> None:
    base = ["magnetar.cli.admin", "--admin-url", secured.admin_url]
    no_token = run(*base, "--tls-trust-cert-path", str(secured.pki.ca_cert), "tenants", "list")
    assert _one_line_failure(no_token).startswith("error: Authentication required")
    no_ca = run(*base, "--auth-params", f"file://{secured.admin_token}", "tenants", "list")
    line = _one_line_failure(no_ca)
    assert line.startswith("error: TLS failure") and "--tls-trust-cert-path" in line
