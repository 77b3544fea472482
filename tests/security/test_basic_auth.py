"""Basic authentication end to end (client/net/auth.py ``AuthenticationBasic``, broker/auth/basic_provider.py)
against a real standalone with the token and Basic providers and authorization on.

The htpasswd file holds a user hashed by ``openssl passwd -apr1`` (Apache MD5, what ``htpasswd -m``
writes) and one with a published traditional crypt hash, the two formats Pulsar's
AuthenticationProviderBasic checks; and one in a format it never accepts ($1$ MD5-crypt). Each
user is checked on the binary protocol, on an ``http://`` service URL (HTTP lookup) and on the
admin API (REST and ``magnetar-admin``), under both the short plugin names and Pulsar's class names.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.security.test_authorization_rest import Secured, start_secured

import magnetar
from magnetar.broker.auth.basic_provider import read_basic_auth_conf

APR1_USER, APR1_PASSWORD = "apr-user", "s3cret-apr"
CRYPT_USER, CRYPT_PASSWORD = "crypt-user", "secret"
CRYPT_HASH = "9zMktUfATCrdY"  # crypt("secret", "9z"), the classic DES crypt
MD5_USER, MD5_PASSWORD = "md5-user", "secret"
BASIC_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
PROVIDER_CLASS = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", "passwd", *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def htpasswd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("htpasswd") / ".htpasswd"
    lines = [
        f"{APR1_USER}:{_openssl('-apr1', APR1_PASSWORD)}",
        f"{CRYPT_USER}:{CRYPT_HASH}",
        f"{MD5_USER}:{_openssl('-1', MD5_PASSWORD)}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, htpasswd: Path) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("basic-auth")
    providers = f"token,{PROVIDER_CLASS}"
    yield from start_secured(base, "--authentication-providers", providers, "--basic-auth-conf", str(htpasswd))


@pytest.fixture(scope="module")
def namespace(secured: Secured) -> str:
    ns = secured.namespace(secured.tenant_a)
    for role in (APR1_USER, CRYPT_USER, MD5_USER):
        secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/{role}", ["produce", "consume"])
    return ns


def round_trip(url: str, auth: magnetar.Authentication, topic: str) -> bytes:
    client = magnetar.Client(url, authentication=auth, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        producer.send(b"hello basic")
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        return msg.data()
    finally:
        client.close()


def _topic(ns: str) -> str:
    return f"persistent://{ns}/basic-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize(
    "auth",
    [
        pytest.param(lambda: magnetar.AuthenticationBasic(APR1_USER, APR1_PASSWORD), id="apr1"),
        pytest.param(lambda: magnetar.AuthenticationBasic(CRYPT_USER, CRYPT_PASSWORD), id="crypt"),
        pytest.param(
            lambda: magnetar.AuthenticationBasic(
                auth_params_string=json.dumps({"username": APR1_USER, "password": APR1_PASSWORD})
            ),
            id="params-string",
        ),
        pytest.param(
            lambda: magnetar.Authentication(BASIC_CLASS, json.dumps({"username": CRYPT_USER, "password": "secret"})),
            id="java-class-name",
        ),
        pytest.param(
            lambda: magnetar.Authentication("basic", json.dumps({"username": APR1_USER, "password": APR1_PASSWORD})),
            id="short-name",
        ),
    ],
)
def test_basic_client_produces_and_consumes_on_the_binary_protocol(
    secured: Secured, namespace: str, auth: object
) -> None:
    make = auth
    assert callable(make)
    assert round_trip(secured.sa.service_url, make(), _topic(namespace)) == b"hello basic"


def test_basic_client_uses_http_lookup(secured: Secured, namespace: str) -> None:
    auth = magnetar.AuthenticationBasic(APR1_USER, APR1_PASSWORD)
    assert round_trip(secured.sa.admin_url, auth, _topic(namespace)) == b"hello basic"


@pytest.mark.parametrize(
    ("user", "password"),
    [(APR1_USER, "wrong"), ("nobody", APR1_PASSWORD), (MD5_USER, MD5_PASSWORD), (CRYPT_USER, "secreT")],
    ids=["wrong-password", "unknown-user", "md5-crypt-not-accepted", "crypt-wrong-case"],
)
def test_refused_credentials_raise_authentication_error(
    secured: Secured, namespace: str, user: str, password: str
) -> None:
    topic = _topic(namespace)
    for url in (secured.sa.service_url, secured.sa.admin_url):
        client = magnetar.Client(url, authentication=magnetar.AuthenticationBasic(user, password))
        try:
            with pytest.raises(magnetar.AuthenticationError):
                client.create_producer(topic)
        finally:
            client.close()
    status, _ = secured.call(None, "GET", f"/admin/v2/persistent/{namespace}")
    assert status == 401
    assert topic not in secured.ok("GET", f"/admin/v2/persistent/{namespace}")  # nothing was created


def _basic_get(secured: Secured, path: str, user: str, password: str) -> tuple[int, object]:
    header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(secured.sa.admin_url + path, headers={"Authorization": header})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_admin_api_accepts_basic_credentials(secured: Secured, namespace: str) -> None:
    topic = _topic(namespace)
    secured.ok("PUT", f"/admin/v2/persistent/{namespace}/{topic.rsplit('/', 1)[1]}")
    status, listed = _basic_get(secured, f"/admin/v2/persistent/{namespace}", APR1_USER, APR1_PASSWORD)
    assert status == 200 and isinstance(listed, list) and topic in listed
    status, body = _basic_get(secured, f"/admin/v2/persistent/{namespace}", APR1_USER, "wrong")
    assert (status, body) == (401, {"reason": "Failed to authenticate: Unknown user or invalid password"})


def test_magnetar_admin_takes_the_basic_plugin(secured: Secured, namespace: str) -> None:
    params = json.dumps({"userId": APR1_USER, "password": APR1_PASSWORD})  # pulsar-admin's key
    argv = [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", secured.sa.admin_url]
    argv += ["--auth-plugin", BASIC_CLASS, "--auth-params", params, "topics", "list", namespace]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    bad = argv.copy()
    bad[bad.index(params)] = json.dumps({"userId": APR1_USER, "password": "nope"})
    done = subprocess.run(bad, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "Unknown user or invalid password" in done.stderr
    assert "Traceback" not in done.stderr


def test_token_plugin_by_java_class_name(secured: Secured, namespace: str) -> None:
    """The broker keeps its token provider beside Basic; the token plugin is found by Pulsar's name."""
    secured.ok("POST", f"/admin/v2/namespaces/{namespace}/permissions/tok-user", ["produce", "consume"])
    auth = magnetar.Authentication(
        "org.apache.pulsar.client.impl.auth.AuthenticationToken", f"token:{secured.token('tok-user')}"
    )
    assert round_trip(secured.sa.service_url, auth, _topic(namespace)) == b"hello basic"


def test_basic_auth_conf_forms(htpasswd: Path) -> None:
    """basicAuthConf as Pulsar reads it: a path, a file: URL, a data: URL or the content in base64."""
    content = htpasswd.read_bytes()
    encoded = base64.b64encode(content).decode()
    assert read_basic_auth_conf(str(htpasswd)) == content
    assert read_basic_auth_conf(f"file://{htpasswd}") == content
    assert read_basic_auth_conf(f"data:;base64,{encoded}") == content
    assert read_basic_auth_conf(encoded) == content
    with pytest.raises(ValueError, match="not a file"):
        read_basic_auth_conf("/no/such/file!")


def test_a_malformed_htpasswd_stops_the_standalone(tmp_path: Path) -> None:
    bad = tmp_path / "bad.htpasswd"
    bad.write_text("user-without-hash\n")
    argv = [sys.executable, "-m", "magnetar.cli.main", "standalone", "--data-dir", str(tmp_path / "data")]
    argv += ["--authentication-enabled", "--authentication-providers", "basic", "--basic-auth-conf", str(bad)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "basicAuthConf line 1: expected user:hash" in done.stderr
    assert "Traceback" not in done.stderr
