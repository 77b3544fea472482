"""Limits against abuse (broker/server/limits.py, WIRE.md R87-R91), against real standalone processes.

Connections are driven by hand (``tests/protocol/wire.py``) so that what is checked is what the
broker does. The abusive connections come from 127.0.0.2 / 127.0.0.3 (all of 127/8 is loopback on
Linux) so that the per-address cap is shown to leave the well-behaved client on 127.0.0.1 alone.
Every refusal is checked for its exact error and for having stored nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import resource
import socket
import struct
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.protocol.wire import TIMEOUT, Wire, address, open_producer, publish, session
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar
from magnetar.broker.auth import keys
from magnetar.broker.auth.tokens import create_token
from magnetar.protocol import commands as c
from magnetar.protocol.framing import FrameDecoder

PER_IP = 4  # brokerMaxConnectionsPerIp of both standalones
PRE_AUTH_TIMEOUT = 2.0  # preAuthenticationTimeoutSeconds of the authenticated standalone


class WireFrom(Wire):
    """A raw connection from a chosen loopback source address."""

    def __init__(self, url: str, source: str, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(address(url), timeout=timeout, source_address=(source, 0))
        self.sock.settimeout(timeout)
        self.decoder = FrameDecoder()
        self.inbox: list[Any] = []
        self.rids = itertools.count(1)


def _connected(wire: Wire, **credentials: Any) -> None:
    answer = wire.request(c.connect("limits-tests", **credentials))
    assert answer["t"] == c.CONNECTED, answer


def _answer(wire: Wire, rid: int) -> Any:
    return wire.next(lambda f: isinstance(f, dict) and f.get("rid") == rid)


def _topics(sa: StandaloneProcess, namespace: str = "public/default") -> list[str]:
    status, body = admin_call(sa, "GET", f"/admin/v2/persistent/{namespace}")
    assert status == 200, body
    return list(body)


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """Authentication off; connection, producer, consumer and lookup caps on."""
    args = [
        "--broker-max-connections-per-ip",
        str(PER_IP),
        "--max-producers-per-connection",
        "2",
        "--max-consumers-per-connection",
        "1",
        "--max-concurrent-lookup-request",
        "2",
    ]
    with run_standalone(tmp_path_factory.mktemp("limited"), *args) as sa:
        yield sa


class Secret:
    def __init__(self, base: Path) -> None:
        self.key = keys.new_secret_key()
        self.file = base / "secret.key"
        self.file.write_bytes(self.key)

    def token(self, role: str = "app") -> str:
        return create_token("HS256", self.key, role)


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Secret:
    return Secret(tmp_path_factory.mktemp("limits-keys"))


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, secret: Secret) -> Iterator[StandaloneProcess]:
    """Token authentication on, a per-address cap, and a short pre-authentication timeout."""
    args = [
        "--authentication-enabled",
        "--token-secret-key",
        f"file://{secret.file}",
        "--broker-max-connections-per-ip",
        str(PER_IP),
        "--pre-authentication-timeout-seconds",
        str(PRE_AUTH_TIMEOUT),
    ]
    with run_standalone(tmp_path_factory.mktemp("guarded"), *args) as sa:
        yield sa


# ---------------------------------------------------------------------------------- connections


def test_connection_over_the_per_address_cap_is_refused_and_the_others_carry_on(limited: StandaloneProcess) -> None:
    url = limited.service_url
    held = [WireFrom(url, "127.0.0.2") for _ in range(PER_IP)]
    try:
        for wire in held:
            _connected(wire)
        extra = WireFrom(url, "127.0.0.2")
        frames = extra.until_closed()  # answered and closed without being asked anything
        extra.close()
        assert frames == [
            {
                "t": c.ERROR,
                "rid": None,
                "code": "ServiceNotReady",
                "message": f"Reached the maximum number of connections from 127.0.0.2 ({PER_IP})",
            }
        ], frames
        for wire in held:  # the admitted ones are untouched
            assert wire.request(c.partitioned_metadata(_topic("held"), 0))["t"] == c.PARTITIONED_METADATA_RESPONSE
        other = WireFrom(url, "127.0.0.1")  # another address is not affected
        _connected(other)
        other.close()
    finally:
        for wire in held:
            wire.close()
    # Closed connections give their places back.
    again = WireFrom(url, "127.0.0.2")
    _connected(again)
    again.close()


def test_connection_over_the_broker_wide_cap_is_refused_whatever_its_address(tmp_path: Path) -> None:
    with run_standalone(tmp_path, "--broker-max-connections", "2") as sa:
        held = [WireFrom(sa.service_url, "127.0.0.4"), WireFrom(sa.service_url, "127.0.0.5")]
        try:
            for wire in held:
                _connected(wire)
            extra = WireFrom(sa.service_url, "127.0.0.6")
            frames = extra.until_closed()
            extra.close()
            assert [(f["code"], f["message"]) for f in frames] == [
                ("ServiceNotReady", "Reached the maximum number of connections (2)")
            ]
            _connected(held[0])  # the admitted ones carry on
        finally:
            for wire in held:
                wire.close()


def test_producers_and_consumers_per_connection_are_capped(limited: StandaloneProcess) -> None:
    wire = session(limited.service_url)
    try:
        topics = [_topic("cap") for _ in range(3)]
        open_producer(wire, topics[0], 1)
        open_producer(wire, topics[1], 2)
        answer = wire.request(c.producer(topics[2], 3))
        assert answer["t"] == c.ERROR and answer["code"] == "ProducerBusy", answer
        assert answer["message"] == "Connection reached max producers limit (2)"
        assert publish(wire, 1, 0, b"still fine")["t"] == c.SEND_RECEIPT  # the others carry on
        answer = wire.request(c.subscribe(topics[0], "s1", 10, c.SUB_EXCLUSIVE))
        assert answer["t"] == c.SUCCESS, answer
        answer = wire.request(c.subscribe(topics[1], "s2", 11, c.SUB_EXCLUSIVE))
        assert answer["t"] == c.ERROR and answer["code"] == "ConsumerBusy", answer
        assert answer["message"] == "Connection reached max consumers limit (1)"
        # Nothing was made for the refused ones: no topic for the third producer, no subscription s2.
        assert topics[2] not in _topics(limited)
        status, stats = admin_call(
            limited, "GET", f"/admin/v2/persistent/{topics[1].removeprefix('persistent://')}/stats"
        )
        assert status == 200 and "s2" not in stats["subscriptions"], stats
        # Closing one makes room for another.
        assert wire.request(c.close_producer(2))["t"] == c.SUCCESS
        open_producer(wire, topics[2], 3)
    finally:
        wire.close()


def test_lookups_past_the_concurrent_cap_get_service_not_ready_and_the_cap_is_given_back(
    limited: StandaloneProcess,
) -> None:
    wire = session(limited.service_url)
    try:
        topic = _topic("lookups")
        n = 40
        # All in one write: the broker reads them in one go, before any lookup can finish.
        wire.send(*[c.lookup(topic, rid) for rid in range(1000, 1000 + n)])
        answers = [_answer(wire, rid) for rid in range(1000, 1000 + n)]
        ok = [a for a in answers if a["t"] == c.LOOKUP_RESPONSE]
        refused = [a for a in answers if a["t"] == c.ERROR]
        assert len(ok) + len(refused) == n
        assert 1 <= len(ok) <= 2 and refused, answers
        assert {(a["code"], a["message"]) for a in refused} == {
            ("ServiceNotReady", "Failed due to too many pending lookup requests")
        }
        assert all(a["broker_url"].startswith("magnetar://") for a in ok)  # the answers that came are whole
        # Every slot was given back: lookups one at a time always succeed afterwards.
        for _ in range(5):
            assert wire.request(c.lookup(topic, 0))["t"] == c.LOOKUP_RESPONSE
    finally:
        wire.close()


# ---------------------------------------------------------------------------------- before auth


def test_an_oversized_frame_before_authentication_closes_only_that_connection(
    guarded: StandaloneProcess, secret: Secret
) -> None:
    wire = WireFrom(guarded.service_url, "127.0.0.3")
    # A length prefix of 1 MiB: refused on the prefix alone, before the body is buffered.
    wire.send_bytes(struct.pack(">I", 1 << 20) + b"\x00" * 1024)
    frames = wire.until_closed()
    wire.close()
    assert len(frames) == 1 and frames[0]["code"] == "FrameTooLarge", frames
    assert frames[0]["message"] == f"frame of {1 << 20} bytes exceeds the maximum of {64 * 1024}"
    # The broker is fine, and an authenticated connection may send big frames (a 200 KB message).
    topic = _topic("big")
    ok = session_with(guarded, secret.token())
    try:
        open_producer(ok, topic, 1)
        assert publish(ok, 1, 0, b"x" * 200_000)["t"] == c.SEND_RECEIPT
    finally:
        ok.close()


def session_with(sa: StandaloneProcess, token: str) -> Wire:
    wire = Wire(sa.service_url)
    _connected(wire, auth_method="token", auth_data=token.encode())
    return wire


def test_an_idle_unauthenticated_connection_is_closed_after_the_timeout(guarded: StandaloneProcess) -> None:
    wire = WireFrom(guarded.service_url, "127.0.0.3")
    started = time.monotonic()
    frames = wire.until_closed()  # says nothing; the broker closes it
    waited = time.monotonic() - started
    wire.close()
    assert frames == [
        {
            "t": c.ERROR,
            "rid": None,
            "code": "AuthenticationError",
            "message": f"Authentication required: no authenticated connect within {PRE_AUTH_TIMEOUT:g} seconds",
        }
    ], frames
    assert PRE_AUTH_TIMEOUT - 0.5 <= waited < PRE_AUTH_TIMEOUT + 5


def test_an_authenticated_connection_outlives_the_pre_authentication_timeout(
    guarded: StandaloneProcess, secret: Secret
) -> None:
    wire = session_with(guarded, secret.token())
    try:
        deadline = time.monotonic() + PRE_AUTH_TIMEOUT + 1
        while time.monotonic() < deadline:  # pings keep answering past the timeout
            wire.send(c.ping())
            wire.next_t(c.PONG)
            wire.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                wire._read()  # nothing arrives: no close, no error frame
            wire.sock.settimeout(TIMEOUT)
    finally:
        wire.close()


# ---------------------------------------------------------------------------------- the flood

FLOOD = 10_000


async def _flood(host: str, port: int, source: str, n: int, parallel: int) -> dict[str, int]:
    """Open ``n`` connections from ``source`` that never authenticate; return how each ended."""
    outcomes: dict[str, int] = {"refused": 0, "timed_out": 0, "reset": 0, "other": 0}
    limit = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with limit:
            try:
                reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            except OSError:
                outcomes["reset"] += 1
                return
            try:
                data = await asyncio.wait_for(reader.read(), 30)  # until the broker closes it
                frames = FrameDecoder().feed(data) if data else []
                codes = [f.get("code") for f in frames]
                if codes == ["ServiceNotReady"]:
                    outcomes["refused"] += 1
                elif codes == ["AuthenticationError"]:
                    outcomes["timed_out"] += 1
                else:
                    outcomes["other"] += 1
            except (ConnectionError, OSError):
                outcomes["reset"] += 1
            finally:
                writer.close()

    await asyncio.gather(*(one() for _ in range(n)))
    return outcomes


@pytest.mark.faults
def test_ten_thousand_unauthenticated_connections_while_a_client_keeps_producing(
    guarded: StandaloneProcess, secret: Secret
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FLOOD + 1000:  # this process holds up to ``parallel`` flood sockets at once
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, FLOOD + 2000), hard))
    topic = _topic("flood")
    client = magnetar.Client(guarded.service_url, authentication=magnetar.AuthenticationToken(secret.token()))
    sent: list[float] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "flood", initial_position=magnetar.InitialPosition.Earliest)

        def produce() -> None:
            i = 0
            while not stop.is_set():
                try:
                    producer.send(f"m{i}".encode())
                except BaseException as exc:  # recorded: the test fails on any
                    failures.append(exc)
                    return
                sent.append(time.monotonic())
                i += 1

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        host, port = address(guarded.service_url)
        started = time.monotonic()
        outcomes = asyncio.run(_flood(host, port, "127.0.0.2", FLOOD, parallel=400))
        ended = time.monotonic()
        stop.set()
        thread.join(30)
        assert not failures, failures
        during = [t for t in sent if started <= t <= ended]
        assert len(during) >= 10, (len(during), ended - started)  # the producer kept going
        # Every flood connection was refused at once or closed at the pre-authentication timeout.
        assert outcomes["other"] == 0, outcomes
        assert outcomes["refused"] + outcomes["timed_out"] + outcomes["reset"] == FLOOD, outcomes
        assert outcomes["refused"] >= FLOOD - 10 * PER_IP * 50, outcomes
        # Every message sent is there, in order, and the broker still serves.
        got = [consumer.receive(10_000).data() for _ in range(len(sent))]
        assert got == [f"m{i}".encode() for i in range(len(sent))]
        with urllib.request.urlopen(guarded.admin_url + "/admin/v2/brokers/health", timeout=10) as health:
            assert health.status == 200
        print(f"flood of {FLOOD} in {ended - started:.1f}s: {outcomes}; {len(during)} sends meanwhile")
        assert guarded.proc is not None and guarded.proc.poll() is None
    finally:
        stop.set()
        client.close()
