"""Authentication in the broker (WIRE.md R60-R64), against real standalone processes.

Each refusal is checked for its exact error and for leaving the data untouched: the topic was
created beforehand and its stats still show nothing stored. Connections are driven by hand
(``tests/protocol/wire.py``) so that what the broker does is what is checked, not the client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.protocol.wire import Wire, batch, next_message, open_consumer, open_producer, publish
from tests.support.standalone import StandaloneProcess, run_standalone

from magnetar.broker.auth import keys
from magnetar.broker.auth.tokens import create_token
from magnetar.protocol import commands as c

CHECK_SECONDS = 0.5  # authenticationRefreshCheckSeconds for these brokers


class Keys:
    def __init__(self, base: Path) -> None:
        self.secret = keys.new_secret_key()
        self.secret_file = base / "secret.key"
        self.secret_file.write_bytes(self.secret)
        self.private, public = keys.new_key_pair("RS256")
        self.public_file = base / "public.key"
        self.public_file.write_bytes(public)

    def hs(self, role: str = "alice", expires_in: int | None = None, key: bytes | None = None) -> str:
        return create_token("HS256", key or self.secret, role, expires_in)

    def rs(self, role: str = "alice", expires_in: int | None = None) -> str:
        return create_token("RS256", self.private, role, expires_in)


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"))


def _auth_args(*key_args: str) -> list[str]:
    return ["--authentication-enabled", "--authentication-refresh-check-seconds", str(CHECK_SECONDS), *key_args]


@pytest.fixture(scope="module")
def hs_broker(tmp_path_factory: pytest.TempPathFactory, secrets: Keys) -> Iterator[StandaloneProcess]:
    args = _auth_args("--token-secret-key", f"file://{secrets.secret_file}")
    with run_standalone(tmp_path_factory.mktemp("hs"), *args) as sa:
        yield sa


@pytest.fixture(scope="module")
def rs_broker(tmp_path_factory: pytest.TempPathFactory, secrets: Keys) -> Iterator[StandaloneProcess]:
    args = _auth_args("--token-public-key", f"file://{secrets.public_file}", "--token-public-alg", "RS256")
    with run_standalone(tmp_path_factory.mktemp("rs"), *args) as sa:
        yield sa


def http(sa: StandaloneProcess, method: str, path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    """An admin REST call with ``Authorization: Bearer token`` (when given): status and JSON body."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(sa.admin_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode()


def created_topic(sa: StandaloneProcess, token: str, topic: str) -> str:
    status, body = http(sa, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}", token)
    assert status == 204, (status, body)
    return topic


def stored(sa: StandaloneProcess, token: str, topic: str) -> int:
    status, body = http(sa, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats", token)
    assert status == 200, (status, body)
    assert body["storageSize"] >= 0
    return int(body["msgInCounter"])


def connect(url: str, token: str | bytes | None, method: str | None = c.AUTH_METHOD_TOKEN) -> tuple[Wire, Any]:
    wire = Wire(url)
    data = token.encode() if isinstance(token, str) else token
    answer = wire.request(c.connect("auth-tests", auth_method=method if token is not None else None, auth_data=data))
    return wire, answer


def refused_on_connect(sa: StandaloneProcess, token: str | bytes | None, topic: str) -> str:
    """Connect with ``token``, then try to produce on the same connection: the connect is refused
    with AuthenticationError (echoing its rid), the connection closes, nothing is stored."""
    wire, answer = connect(sa.service_url, token)
    with wire:
        assert (answer["t"], answer["rid"], answer["code"]) == (c.ERROR, 1, "AuthenticationError"), answer
        meta, payload = batch(b"must not be stored")
        try:
            wire.send(c.producer(topic, 1, rid=2), c.send(1, 0, meta, payload))
        except OSError:
            pass  # already closed by the broker
        assert closed(wire) == []
    return str(answer["message"])


def closed(wire: Wire) -> list[Any]:
    """The frames until the broker closed the connection; a reset (we wrote after its close)
    counts as closed too."""
    try:
        return wire.until_closed()
    except ConnectionResetError:
        frames, wire.inbox = wire.inbox, []
        return frames


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _part(doc: dict[str, Any]) -> str:
    return _b64(json.dumps(doc).encode())


def alg_none(role: str) -> str:
    return f"{_part({'alg': 'none', 'typ': 'JWT'})}.{_part({'sub': role})}."


def hs256_by_hand(key: bytes, role: str) -> str:
    signed = f"{_part({'alg': 'HS256', 'typ': 'JWT'})}.{_part({'sub': role})}"
    return f"{signed}.{_b64(hmac.new(key, signed.encode(), hashlib.sha256).digest())}"


# ------------------------------------------------------------------------------------ R60 / R61


def test_r61_no_token_is_refused_and_nothing_is_stored(hs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    message = refused_on_connect(hs_broker, None, topic)
    assert message == "Authentication required: no credentials were given"
    assert stored(hs_broker, secrets.hs(), topic) == 0


def test_r61_commands_before_connect_are_refused(hs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    meta, payload = batch(b"must not be stored")
    with Wire(hs_broker.service_url) as wire:
        wire.send(c.producer(topic, 1, rid=7), c.send(1, 0, meta, payload))
        frames = closed(wire)
    assert frames == [
        {
            "t": c.ERROR,
            "rid": 7,
            "code": "AuthenticationError",
            "message": "Authentication required: 'producer' before an authenticated connect",
        }
    ]
    assert stored(hs_broker, secrets.hs(), topic) == 0


def test_r61_wrong_signature_is_refused(hs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    forged = secrets.hs(key=keys.new_secret_key())
    assert refused_on_connect(hs_broker, forged, topic) == "Failed to authenticate: token signature is invalid"
    assert stored(hs_broker, secrets.hs(), topic) == 0


def test_r61_alg_none_is_refused(hs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    message = refused_on_connect(hs_broker, alg_none("alice"), topic)
    assert message == "Failed to authenticate: token algorithm 'none' is not allowed (expected HS256)"
    assert stored(hs_broker, secrets.hs(), topic) == 0


def test_r61_expired_token_is_refused(hs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    assert refused_on_connect(hs_broker, secrets.hs(expires_in=-5), topic) == "Failed to authenticate: token expired"
    assert stored(hs_broker, secrets.hs(), topic) == 0


def test_r61_unknown_method_and_garbage_are_refused(hs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    wire, answer = connect(hs_broker.service_url, secrets.hs(), method="basic")
    with wire:
        assert answer["code"] == "AuthenticationError"
        assert answer["message"] == "Authentication method 'basic' is not supported (supported: token)"
        assert closed(wire) == []
    message = refused_on_connect(hs_broker, b"not.a.token", topic)
    assert message.startswith("Failed to authenticate: invalid token: "), message
    assert stored(hs_broker, secrets.hs(), topic) == 0


def test_r61_hs_token_against_an_rs_broker_is_refused(rs_broker: StandaloneProcess, secrets: Keys, topic: str) -> None:
    created_topic(rs_broker, secrets.rs(), topic)
    message = refused_on_connect(rs_broker, secrets.hs(), topic)
    assert message == "Failed to authenticate: token algorithm 'HS256' is not allowed (expected RS256)"
    # The key-confusion attack: HS256 "signed" with the broker's public key as the secret.
    confused = hs256_by_hand(secrets.public_file.read_bytes(), "alice")  # PyJWT itself won't sign it
    assert refused_on_connect(rs_broker, confused, topic) == message
    assert stored(rs_broker, secrets.rs(), topic) == 0


def test_r60_valid_tokens_produce_and_consume(
    hs_broker: StandaloneProcess, rs_broker: StandaloneProcess, secrets: Keys, topic: str
) -> None:
    for sa, token in ((hs_broker, secrets.hs()), (rs_broker, secrets.rs())):
        created_topic(sa, token, topic)
        wire, answer = connect(sa.service_url, token)
        with wire:
            assert answer["t"] == c.CONNECTED and set(answer) == {
                "t",
                "rid",
                "server_version",
                "protocol_version",
                "max_message_size",
            }
            open_consumer(wire, topic, "s", 1, initial_position="Earliest")
            open_producer(wire, topic, 2)
            assert publish(wire, 2, 0, b"hello")["t"] == c.SEND_RECEIPT
            wire.send(c.flow(1, 10))
            assert next_message(wire, 1)["meta"]["n"] == 1
        assert stored(sa, token, topic) == 1


# ------------------------------------------------------------------------------------ R62 / R63


def test_r62_expiry_is_challenged_and_a_fresh_token_keeps_the_connection(
    hs_broker: StandaloneProcess, secrets: Keys, topic: str
) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    wire, answer = connect(hs_broker.service_url, secrets.hs(expires_in=3))
    with wire:
        assert answer["t"] == c.CONNECTED
        open_producer(wire, topic, 1)
        assert publish(wire, 1, 0, b"before")["t"] == c.SEND_RECEIPT
        challenge = wire.next_t(c.AUTH_CHALLENGE)
        assert challenge == {"t": c.AUTH_CHALLENGE, "auth_method": "token", "auth_data": b"refresh"}
        # A fresh token that itself expires soon: a second challenge proves the connection
        # outlived the first one's deadline (one check period) and was not closed.
        wire.send(c.auth_response("token", secrets.hs(expires_in=3).encode()))
        assert publish(wire, 1, 1, b"after refresh")["t"] == c.SEND_RECEIPT
        assert wire.next_t(c.AUTH_CHALLENGE)["auth_data"] == b"refresh"
        wire.send(c.auth_response("token", secrets.hs().encode()))  # never expires
        assert publish(wire, 1, 2, b"still open")["t"] == c.SEND_RECEIPT
    assert stored(hs_broker, secrets.hs(), topic) == 3


def test_r63_no_answer_to_a_challenge_closes_the_connection(
    hs_broker: StandaloneProcess, secrets: Keys, topic: str
) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    wire, answer = connect(hs_broker.service_url, secrets.hs(expires_in=3))
    with wire:
        assert answer["t"] == c.CONNECTED
        open_producer(wire, topic, 1)
        assert publish(wire, 1, 0, b"before expiry")["t"] == c.SEND_RECEIPT
        assert wire.next_t(c.AUTH_CHALLENGE)["auth_method"] == "token"
        frames = closed(wire)
    assert frames == [
        {
            "t": c.ERROR,
            "rid": None,
            "code": "AuthenticationError",
            "message": "Failed to authenticate: no fresh credentials in answer to auth_challenge in time",
        }
    ]
    assert stored(hs_broker, secrets.hs(), topic) == 1


@pytest.mark.parametrize("case", ["forged", "other role"])
def test_r63_a_bad_answer_to_a_challenge_closes_the_connection(
    hs_broker: StandaloneProcess, secrets: Keys, topic: str, case: str
) -> None:
    created_topic(hs_broker, secrets.hs(), topic)
    wire, _ = connect(hs_broker.service_url, secrets.hs(expires_in=3))
    with wire:
        open_producer(wire, topic, 1)
        wire.next_t(c.AUTH_CHALLENGE)
        token = secrets.hs(key=keys.new_secret_key()) if case == "forged" else secrets.hs(role="mallory")
        meta, payload = batch(b"must not be stored")
        wire.send(c.auth_response("token", token.encode()), c.send(1, 0, meta, payload))
        frames = closed(wire)
    expected = (
        "Failed to authenticate: token signature is invalid"
        if case == "forged"
        else "Failed to authenticate: refreshed credentials are for role 'mallory', the connection's is 'alice'"
    )
    assert frames == [{"t": c.ERROR, "rid": None, "code": "AuthenticationError", "message": expected}]
    assert stored(hs_broker, secrets.hs(), topic) == 0


# ------------------------------------------------------------------------------------ R64: admin REST


def test_r64_admin_needs_a_bearer_token(hs_broker: StandaloneProcess, secrets: Keys) -> None:
    path = "/admin/v2/tenants/t-refused"
    for token, reason in (
        (None, "Authentication required: send Authorization: Bearer <token>"),
        (secrets.hs(key=keys.new_secret_key()), "Failed to authenticate: token signature is invalid"),
        (alg_none("alice"), "Failed to authenticate: token algorithm 'none' is not allowed (expected HS256)"),
        (secrets.hs(expires_in=-5), "Failed to authenticate: token expired"),
    ):
        assert http(hs_broker, "PUT", path, token, {"allowedClusters": []}) == (401, {"reason": reason})
        assert http(hs_broker, "GET", "/admin/v2/tenants", token) == (401, {"reason": reason})
    status, tenants = http(hs_broker, "GET", "/admin/v2/tenants", secrets.hs())
    assert status == 200 and "t-refused" not in tenants  # untouched
    assert http(hs_broker, "PUT", path, secrets.hs(), {"allowedClusters": []})[0] == 204
    assert "t-refused" in http(hs_broker, "GET", "/admin/v2/tenants", secrets.hs())[1]


def test_r64_probes_and_metrics_stay_open(hs_broker: StandaloneProcess) -> None:
    for path in ("/admin/v2/brokers/health", "/ready", "/metrics"):
        assert http(hs_broker, "GET", path)[0] == 200, path


def test_bad_settings_stop_the_broker_at_start(tmp_path: Path) -> None:
    sa = StandaloneProcess(tmp_path / "data", tmp_path / "log", extra_args=["--authentication-enabled"])
    with pytest.raises(RuntimeError, match="standalone exited with 1"):
        sa.start(timeout=60)
    assert "token authentication needs tokenSecretKey or tokenPublicKey" in sa.log_tail()
