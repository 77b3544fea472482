"""The client's side of token authentication (client/net/auth.py, WIRE.md R60-R62) against a real
standalone with ``authenticationEnabled`` and an HS256 secret key.

Tokens are made here with PyJWT, as ``magnetar tokens create`` makes them. Every refusal is checked
for its exact error and for having stored nothing; the supplier tests wait on the supplier being
called (a condition), never on a sleep.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import jwt
import pytest
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar


@pytest.fixture(scope="module")
def secret_key(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return secrets.token_bytes(32)


@pytest.fixture(scope="module")
def auth_standalone(tmp_path_factory: pytest.TempPathFactory, secret_key: bytes) -> Iterator[StandaloneProcess]:
    """Authentication on, credentials re-checked every second (so expiry is seen quickly)."""
    base = tmp_path_factory.mktemp("auth-standalone")
    key_file = base / "secret.key"
    key_file.write_bytes(secret_key)
    args = [
        "--authentication-enabled",
        "--authentication-providers",
        "token",
        "--token-secret-key",
        f"file://{key_file}",
        "--authentication-refresh-check-seconds",
        "1",
    ]
    with run_standalone(base, *args) as sa:
        yield sa


def _token(key: bytes, subject: str = "app", expires_in: float | None = None) -> str:
    claims: dict[str, object] = {"sub": subject}
    if expires_in is not None:
        claims["exp"] = int(time.time() + expires_in)
    return jwt.encode(claims, key, algorithm="HS256")


def _topic() -> str:
    return f"persistent://public/default/auth-{uuid.uuid4().hex[:10]}"


def _topics(sa: StandaloneProcess, token: str) -> list[str]:
    """The namespace's topics, asked over the admin API with a valid token."""
    req = urllib.request.Request(
        sa.admin_url + "/admin/v2/persistent/public/default", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return list(json.loads(resp.read()))


class CountingSupplier:
    """A token supplier that records its calls; ``wait_calls(n)`` waits for the n-th."""

    def __init__(self, make: Callable[[int], str]) -> None:
        self._make = make
        self.calls = 0
        self._cond = threading.Condition()

    def __call__(self) -> str:
        with self._cond:
            self.calls += 1
            n = self.calls
            self._cond.notify_all()
        return self._make(n)

    def wait_calls(self, n: int, timeout: float = 30.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.calls >= n, timeout), f"{self.calls} calls, wanted {n}"


def test_valid_token_produces_and_consumes(auth_standalone: StandaloneProcess, secret_key: bytes) -> None:
    topic = _topic()
    token = magnetar.AuthenticationToken(_token(secret_key))
    client = magnetar.Client(auth_standalone.service_url, authentication=token)
    try:
        consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"m{i}".encode())
        got = [consumer.receive(10_000) for _ in range(5)]
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    finally:
        client.close()


@pytest.mark.parametrize(
    "authentication",
    [
        None,
        magnetar.AuthenticationToken(_token(b"another-key-entirely-32-bytes!!!")),
        magnetar.AuthenticationToken("not-a-jwt"),
    ],
    ids=["no-token", "wrong-key", "garbage"],
)
def test_refused_credentials_raise_authentication_error_fast(
    auth_standalone: StandaloneProcess, secret_key: bytes, authentication: magnetar.AuthenticationToken | None
) -> None:
    topic = _topic()
    client = magnetar.Client(auth_standalone.service_url, authentication=authentication, operation_timeout_seconds=30)
    try:
        started = time.monotonic()
        with pytest.raises(magnetar.AuthenticationError):
            client.create_producer(topic)
        assert time.monotonic() - started < 10  # refused once, not retried until the operation timeout
    finally:
        client.close()
    assert topic not in _topics(auth_standalone, _token(secret_key))


def test_expired_token_is_refused(auth_standalone: StandaloneProcess, secret_key: bytes) -> None:
    topic = _topic()
    client = magnetar.Client(
        auth_standalone.service_url, authentication=magnetar.AuthenticationToken(_token(secret_key, expires_in=-60))
    )
    try:
        with pytest.raises(magnetar.AuthenticationError):
            client.create_producer(topic)
    finally:
        client.close()
    assert topic not in _topics(auth_standalone, _token(secret_key))


def test_supplier_is_called_again_on_challenge_and_the_producer_keeps_working(
    auth_standalone: StandaloneProcess, secret_key: bytes
) -> None:
    # The first token expires within seconds; the broker challenges, the supplier gives a fresh one.
    supplier = CountingSupplier(lambda n: _token(secret_key, expires_in=3 if n == 1 else 3600))
    topic = _topic()
    client = magnetar.Client(auth_standalone.service_url, authentication=magnetar.AuthenticationToken(supplier))
    try:
        consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"before")
        calls_before = supplier.calls
        (opened,) = [fut.result() for fut in client._client._conns.values()]  # the one connection
        supplier.wait_calls(calls_before + 1, timeout=20)  # the challenge's answer
        producer.send(b"after")
        assert [consumer.receive(10_000).data() for _ in range(2)] == [b"before", b"after"]
        # Answered on the same connection: it was never closed, and no other was opened.
        assert not opened.closed
        assert [fut.result() for fut in client._client._conns.values()] == [opened]
        assert supplier.calls == calls_before + 1
    finally:
        client.close()


def test_supplier_is_called_again_on_reconnect(auth_standalone: StandaloneProcess, secret_key: bytes) -> None:
    supplier = CountingSupplier(lambda n: _token(secret_key, expires_in=3600))
    topic = _topic()
    client = magnetar.Client(
        auth_standalone.service_url,
        authentication=magnetar.AuthenticationToken(supplier),
        connection_timeout_ms=1000,
        keep_alive_interval_seconds=1,
    )
    try:
        producer = client.create_producer(topic)
        producer.send(b"one")
        first = supplier.calls
        auth_standalone.pause()  # the keep-alive gives the connection up, the producer reconnects
        try:
            supplier.wait_calls(first + 1, timeout=20)
        finally:
            auth_standalone.resume()
        producer.send(b"two")  # re-attached on a connection opened with a fresh token
    finally:
        client.close()


def test_token_from_a_file_is_reread(tmp_path: Path, auth_standalone: StandaloneProcess, secret_key: bytes) -> None:
    from magnetar.client.net.auth import token_from_file

    path = tmp_path / "token"
    path.write_text(_token(secret_key) + "\n")
    client = magnetar.Client(
        auth_standalone.service_url, authentication=magnetar.AuthenticationToken(token_from_file(f"file://{path}"))
    )
    try:
        client.create_producer(_topic()).send(b"x")
    finally:
        client.close()


def test_unsupported_pulsar_providers_are_refused_clearly() -> None:
    with pytest.raises(magnetar.Unsupported, match="OAuth2"):
        magnetar.AuthenticationOauth2('{"issuer_url": "x", "private_key": "y"}')
    with pytest.raises(ValueError, match="'str' or a function"):
        magnetar.AuthenticationToken(42)
