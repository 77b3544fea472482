"""R1-R7 of WIRE.md: framing, and what a server does with bad or truncated input.

The server cases run against a real standalone process; a healthy client connected before the bad
input must keep working after it (only the offending connection is closed).
"""

from __future__ import annotations

import itertools
import socket
import struct
import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.protocol import commands as c
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import FrameTooLarge, MagnetarError, MalformedFrame
from magnetar.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame, encode_frames

from .strategies import commands
from .wire import Wire, batch, next_message, open_consumer, open_producer, session, stats


def _round_trip_still_works(sa: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(sa.service_url)
    try:
        consumer = client.subscribe(topic, f"ok-{uuid.uuid4().hex[:6]}")
        client.create_producer(topic).send(b"still-working")
        assert consumer.receive(timeout_millis=5000).data() == b"still-working"
    finally:
        client.close()


def _refused(sa: StandaloneProcess, topic: str, data: bytes) -> list[Any]:
    """Send ``data`` on a fresh connection while a healthy producer is connected; return every
    frame the server sent before closing the bad connection, and check the healthy one still works."""
    healthy = magnetar.Client(sa.service_url)
    try:
        producer = healthy.create_producer(topic)
        with Wire(sa.service_url) as bad:
            bad.send_bytes(data)
            frames = bad.until_closed()
        producer.send(b"after-bad-frame")
        _round_trip_still_works(sa, topic)
    finally:
        healthy.close()
    return frames


# ---------------------------------------------------------------------------------------------- R1


def test_r1_frame_is_a_big_endian_length_then_one_msgpack_map() -> None:
    cmd = c.lookup("persistent://public/default/t", rid=7)
    frame = encode_frame(cmd)
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    assert msgpack.unpackb(frame[4:], raw=False) == cmd
    # Several frames in one chunk, and one frame over many chunks, decode the same.
    two = encode_frames([cmd, c.ping()])
    assert FrameDecoder().feed(two) == [cmd, c.ping()]
    decoder = FrameDecoder()
    got = [f for byte in two for f in decoder.feed(bytes([byte]))]
    assert got == [cmd, c.ping()] and decoder.buffered == 0


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cmds=st.lists(commands(), min_size=1, max_size=5), cuts=st.lists(st.integers(min_value=0, max_value=4096)))
def test_r1_every_constructed_command_round_trips_through_any_chunking(cmds: list[Any], cuts: list[int]) -> None:
    """Any command built by the constructors encodes with ``encode_frame`` and decodes, fed in any
    chunk split, to an equal value that passes ``missing_fields``."""
    data = b"".join(encode_frame(cmd) for cmd in cmds)
    decoder = FrameDecoder()
    decoded = [frame for chunk in _chunks(data, cuts) for frame in decoder.feed(chunk)]
    assert decoder.buffered == 0
    assert decoded == [_as_decoded(cmd) for cmd in cmds]
    for frame in decoded:
        if frame["t"] in (c.CLOSE_PRODUCER, c.CLOSE_CONSUMER) and "rid" not in frame:
            continue  # the pushed (broker -> client) form, which no server is ever sent
        assert c.missing_fields(frame) is None


def _as_decoded(value: Any) -> Any:
    """What msgpack gives back for ``value``: tuples come back as lists."""
    if isinstance(value, dict):
        return {k: _as_decoded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_decoded(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------- R2


def test_r2_empty_frame_is_malformed(standalone: StandaloneProcess, topic: str) -> None:
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed(struct.pack(">I", 0))
    frames = _refused(standalone, topic, struct.pack(">I", 0))
    assert frames == [c.error_frame(None, "MalformedFrame", "empty frame")]


# ---------------------------------------------------------------------------------------------- R3


def test_r3_oversized_length_refused_before_body_is_read(standalone: StandaloneProcess, topic: str) -> None:
    header = struct.pack(">I", DEFAULT_MAX_FRAME_SIZE + 1)
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(header)  # the length alone is enough: nothing of the body is awaited
    assert FrameDecoder().feed(struct.pack(">I", DEFAULT_MAX_FRAME_SIZE)) == []  # the maximum itself waits
    # The server answers as soon as it has the 4 length bytes: no byte of the body is ever sent.
    frames = _refused(standalone, topic, header)
    assert [(f["t"], f["rid"], f["code"]) for f in frames] == [("error", None, "FrameTooLarge")]


# ---------------------------------------------------------------------------------------------- R4


def test_r4_strings_are_str_and_payloads_are_bin(standalone: StandaloneProcess, topic: str) -> None:
    payload = b"\x00\xff"
    frame = encode_frame(c.send(1, 0, {"crc": crc32c(payload), "pn": "p"}, payload))
    assert b"\xc4\x02\x00\xff" in frame  # bin 8 of two bytes
    assert b"\xa2pn" in frame and b"\xa4send" in frame  # fixstr
    # What the broker sends back keeps the types: the pushed payload is bin, meta strings are str.
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.send(1, 0, {"crc": crc32c(payload), "pn": "p"}, payload), c.flow(1, 10))
        message = next_message(wire, 1)
    assert type(message["payload"]) is bytes and message["payload"] == payload
    assert all(type(k) is str for k in message["meta"]) and message["meta"]["pn"] == "p"


# ---------------------------------------------------------------------------------------------- R5

BAD_INPUT = {
    "garbage": b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1",  # 0xc1 is never valid msgpack
    "oversized_length": struct.pack(">I", 0x7FFFFFFF) + b"abc",
    "not_a_command": encode_frame([1, 2, 3]),
    "map_without_t": encode_frame({"rid": 1, "topic": "x"}),
    "unknown_command": encode_frame({"t": "launch_missiles", "rid": 1}),
}
EXPECTED_CODE = {
    "garbage": "MalformedFrame",
    "oversized_length": "FrameTooLarge",
    "not_a_command": "InvalidCommand",
    "map_without_t": "InvalidCommand",
    "unknown_command": "UnknownCommand",
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_r5_bad_frame_gets_one_error_and_closes_only_its_connection(
    standalone: StandaloneProcess, topic: str, case: str
) -> None:
    frames = _refused(standalone, topic, BAD_INPUT[case])
    errors = [f for f in frames if isinstance(f, dict) and f.get("t") == "error"]
    assert errors and errors[0]["code"] == EXPECTED_CODE[case], frames
    assert len(frames) == 1 and frames[0]["rid"] is None, frames


# Arbitrary bytes, and arbitrary bodies behind well-formed length prefixes (so that the msgpack
# decoding is exercised too, not only the length check).
_any_input = st.binary(max_size=300) | st.lists(st.binary(max_size=60), max_size=5).map(
    lambda bodies: b"".join(struct.pack(">I", len(body)) + body for body in bodies)
)


@settings(max_examples=500, deadline=None)
@given(data=_any_input, cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=4))
@pytest.mark.parametrize("max_frame_size", [DEFAULT_MAX_FRAME_SIZE, 16])
def test_r5_any_bytes_into_the_decoder_raise_only_protocol_errors(
    max_frame_size: int, data: bytes, cuts: list[int]
) -> None:
    decoder = FrameDecoder(max_frame_size)
    try:
        for chunk in _chunks(data, cuts):
            decoder.feed(chunk)
    except MagnetarError as exc:
        assert type(exc) in (MalformedFrame, FrameTooLarge), repr(exc)
        assert isinstance(exc.frames, list)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------- R6


def test_r6_truncated_frame_is_discarded(standalone: StandaloneProcess, topic: str) -> None:
    body = msgpack.packb({"t": "connect", "rid": 1}, use_bin_type=True)
    with Wire(standalone.service_url) as wire:
        wire.send_bytes(struct.pack(">I", len(body) + 100) + body)  # promises more than it sends
        wire.sock.shutdown(socket.SHUT_WR)
        frames = wire.until_closed()
    assert frames == []  # nothing was executed
    _round_trip_still_works(standalone, topic)


def test_r6_nothing_of_a_truncated_send_is_stored(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        meta, payload = batch(b"never-stored")
        frame = encode_frame(c.send(1, 0, meta, payload))
        wire.send_bytes(frame[:-1])  # all but the last byte
        wire.sock.shutdown(socket.SHUT_WR)
        assert wire.until_closed() == []
    after = stats(standalone, topic)
    assert after["msgInCounter"] == 0 and after["storageSize"] == 0


# ---------------------------------------------------------------------------------------------- R7


def test_r7_missing_required_fields_get_invalid_command_and_close(standalone: StandaloneProcess, topic: str) -> None:
    frames = _refused(standalone, topic, encode_frame({"t": "producer", "rid": 1}))
    errors = [f for f in frames if isinstance(f, dict) and f.get("t") == "error"]
    assert errors and errors[0]["code"] == "InvalidCommand", frames
    assert len(frames) == 1 and "topic, producer_id" in frames[0]["message"], frames


@pytest.mark.parametrize("name", sorted(c.REQUIRED_FIELDS))
def test_r7_missing_fields_names_every_absent_required_field(name: str) -> None:
    required = c.REQUIRED_FIELDS[name]
    complete = {"t": name, **dict.fromkeys(required, 0)}
    assert c.missing_fields(complete) is None
    for field in required:
        problem = c.missing_fields({k: v for k, v in complete.items() if k != field})
        assert problem is not None and field in problem
