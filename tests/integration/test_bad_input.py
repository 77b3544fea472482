"""Malformed input closes only its own connection; oversized messages are refused, not stored."""

from __future__ import annotations

import json
import socket
import struct
import urllib.request
import uuid
from typing import Any

import msgpack
import pytest
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.protocol.framing import FrameDecoder, encode_frame


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("magnetar://").rsplit(":", 1)
    return host, int(port)


def _frames_until_close(sock: socket.socket) -> list[Any]:
    """Read until the server closes the connection; return every frame it sent."""
    sock.settimeout(15)
    decoder = FrameDecoder()
    frames: list[Any] = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return frames
        frames.extend(decoder.feed(chunk))


def _round_trip_still_works(sa: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(sa.service_url)
    try:
        consumer = client.subscribe(topic, f"ok-{uuid.uuid4().hex[:6]}")
        client.create_producer(topic).send(b"still-working")
        assert consumer.receive(timeout_millis=5000).data() == b"still-working"
    finally:
        client.close()


CASES = {
    "garbage": b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1",  # 0xc1 is never valid msgpack
    "oversized_length": struct.pack(">I", 0x7FFFFFFF) + b"abc",
    "not_a_command": encode_frame([1, 2, 3]),
    "unknown_command": encode_frame({"t": "launch_missiles", "rid": 1}),
    "missing_fields": encode_frame({"t": "producer", "rid": 1}),
}
EXPECTED_CODE = {
    "garbage": "MalformedFrame",
    "oversized_length": "FrameTooLarge",
    "not_a_command": "InvalidCommand",
    "unknown_command": "UnknownCommand",
    "missing_fields": "InvalidCommand",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_frame_closes_only_its_connection(standalone: StandaloneProcess, topic: str, case: str) -> None:
    # A healthy client is connected before, and must keep working after.
    healthy = magnetar.Client(standalone.service_url)
    try:
        producer = healthy.create_producer(topic)
        with socket.create_connection(_addr(standalone.service_url)) as sock:
            sock.sendall(CASES[case])
            frames = _frames_until_close(sock)
        errors = [f for f in frames if isinstance(f, dict) and f.get("t") == "error"]
        assert errors and errors[0]["code"] == EXPECTED_CODE[case], frames
        producer.send(b"after-bad-frame")
        _round_trip_still_works(standalone, topic)
    finally:
        healthy.close()


def test_truncated_frame_is_discarded(standalone: StandaloneProcess, topic: str) -> None:
    body = msgpack.packb({"t": "connect", "rid": 1}, use_bin_type=True)
    with socket.create_connection(_addr(standalone.service_url)) as sock:
        sock.sendall(struct.pack(">I", len(body) + 100) + body)  # promises more than it sends
        sock.shutdown(socket.SHUT_WR)
        frames = _frames_until_close(sock)
    assert frames == []  # nothing was executed
    _round_trip_still_works(standalone, topic)


def _stats(sa: StandaloneProcess, topic: str) -> dict[str, Any]:
    path = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{sa.admin_url}/admin/v2/persistent/{path}/stats") as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def test_oversized_message_is_refused_and_nothing_is_written(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"small")
        before = _stats(standalone, topic)
        with pytest.raises(magnetar.MagnetarError) as info:
            producer.send(b"x" * (6 * 1024 * 1024))
        assert "MessageTooLarge" in type(info.value).__name__ or "too large" in str(info.value).lower()
        after = _stats(standalone, topic)
        assert after["storageSize"] == before["storageSize"]
        assert after["msgInCounter"] == before["msgInCounter"]
        producer.send(b"after")  # the producer is still usable
    finally:
        client.close()


def test_oversized_send_frame_from_raw_client_is_refused_by_broker(standalone: StandaloneProcess, topic: str) -> None:
    """Bypass the client's own check: the broker refuses the payload with MessageTooLarge."""
    from magnetar.protocol.batch import encode_batch, make_record

    payload_size = 5 * 1024 * 1024 + 10
    meta, payload = encode_batch(
        [make_record(b"y" * payload_size, None, None, 0, 0)],
        producer_name="raw",
        first_sequence_id=0,
        batched=False,
    )
    with socket.create_connection(_addr(standalone.service_url)) as sock:
        sock.settimeout(15)
        sock.sendall(encode_frame({"t": "connect", "rid": 1}))
        sock.sendall(encode_frame({"t": "producer", "rid": 2, "topic": topic, "producer_id": 1}))
        decoder = FrameDecoder()
        frames: list[Any] = []
        # Producer creation is asynchronous: a send before its answer would find no producer.
        while not any(f.get("t") == "producer_success" for f in frames):
            frames.extend(decoder.feed(sock.recv(65536)))
        sock.sendall(encode_frame({"t": "send", "producer_id": 1, "seq": 0, "meta": meta, "payload": payload}))
        while not any(f.get("t") in ("send_error", "send_receipt") for f in frames):
            frames.extend(decoder.feed(sock.recv(65536)))
    result = next(f for f in frames if f.get("t") in ("send_error", "send_receipt"))
    assert result["t"] == "send_error" and result["code"] == "MessageTooLarge"
    assert _stats(standalone, topic)["storageSize"] == 0
