"""Fuzz the frame codec in process: raw bytes, mutated frame streams, and round trips.

Why: every byte a broker, bookie or client reads goes through ``FrameDecoder.feed`` first, so it is
the one place where hostile bytes meet the code directly. Properties checked on every input:

- ``feed`` raises nothing but the protocol's own ``FrameTooLarge``/``MalformedFrame`` (any other
  exception would escape a server's read loop);
- memory stays bounded: after every ``feed`` that returned, the decoder holds less than one
  maximum frame (4 + max bytes), and a length prefix above the maximum is refused before its body
  is buffered;
- a stream of valid frames, cut into chunks at random places, decodes to exactly the values
  encoded (and decoding what a garbage frame decoded to, re-encoded, gives the same value).

The batch decoder (``batch.decode_batch``, what a consumer runs on each entry) is fuzzed the same
way with valid checksums, so that the decompression and msgpack steps see the garbage.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fuzz.conftest import Figures, fuzz_examples, fuzz_timeout
from tests.fuzz.values import any_value
from tests.protocol.strategies import commands

from magnetar.protocol.batch import decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.compression import compress
from magnetar.protocol.errors import FrameTooLarge, InvalidMessage, MagnetarError, MalformedFrame
from magnetar.protocol.framing import FrameDecoder, encode_frame, encode_frames

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]

SMALL_MAX = 4096  # a small limit so that FrameTooLarge is hit as often as the rest
BOMBS = {kind: compress(kind, bytes(64 << 20)) for kind in (1, 2, 3)}  # 64 MiB of zeros in a few KiB


def _chunks(rng: random.Random, data: bytes) -> list[bytes]:
    """``data`` cut at random places (sometimes one byte at a time)."""
    out, pos = [], 0
    while pos < len(data):
        step = 1 if rng.random() < 0.05 else rng.randrange(1, max(2, len(data) // 2 + 2))
        out.append(data[pos : pos + step])
        pos += step
    return out


def _mutate(rng: random.Random, data: bytes) -> bytes:
    """A stream of frames damaged the ways a network or an attacker damages it."""
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        r = rng.random()
        if r < 0.3 and b:  # flipped bits
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif r < 0.45 and b:  # truncated
            del b[rng.randrange(len(b)) :]
        elif r < 0.6:  # a forged length prefix at the start or in the middle
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.choice([0, 1, 3, 2**16, SMALL_MAX, SMALL_MAX + 1, 2**31, 2**32 - 1]).to_bytes(4, "big")
        elif r < 0.75:  # random bytes inserted
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.randrange(1, 16))
        elif r < 0.9 and b:  # a byte range overwritten with msgpack type markers
            i = rng.randrange(len(b))
            b[i : i + 1] = bytes([rng.choice([0xC1, 0xC4, 0xC5, 0xC6, 0xDC, 0xDD, 0xDE, 0xDF, 0xD9, 0xDB, 0x91, 0x81])])
        else:  # a deep nesting bomb in one frame
            body = b"\x91" * rng.choice([100, 1000, 3000]) + b"\xc0"
            b += len(body).to_bytes(4, "big") + body
    return bytes(b)


def _valid_stream(rng: random.Random) -> tuple[list[Any], bytes]:
    values = [any_value(rng) for _ in range(rng.randrange(1, 6))]
    return values, encode_frames(values)


def _normal(value: Any) -> Any:
    """What msgpack gives back for ``value`` (tuples become lists; NaN compared by identity)."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False, strict_map_key=False)


def _same(a: Any, b: Any) -> bool:
    return msgpack.packb(a, use_bin_type=True) == msgpack.packb(b, use_bin_type=True)


def check_stream(rng: random.Random, data: bytes, max_size: int) -> list[Any]:
    """Feed ``data`` in random chunks; assert the properties; return the frames decoded."""
    dec = FrameDecoder(max_size)
    got: list[Any] = []
    for chunk in _chunks(rng, data):
        try:
            got.extend(dec.feed(chunk))
        except (FrameTooLarge, MalformedFrame) as exc:
            got.extend(getattr(exc, "frames", []))
            return got  # a server closes the connection here
        assert dec.buffered < 4 + max_size, f"{dec.buffered} bytes buffered with a limit of {max_size}"
    return got


def test_raw_and_mutated_bytes(figures: Figures) -> None:
    """Garbage and damaged frame streams: only the protocol's errors, bounded buffering, and every
    value decoded from garbage round-trips."""
    rng = random.Random(figures.seed)
    n = fuzz_examples()
    for i in range(n):
        max_size = SMALL_MAX if i % 2 else 1 << 20
        r = rng.random()
        if r < 0.2:
            data = rng.randbytes(rng.randrange(0, 64))
        else:
            _, data = _valid_stream(rng)
            data = _mutate(rng, data) if r < 0.9 else data
        for value in check_stream(rng, data, max_size):
            again = FrameDecoder(max_size).feed(encode_frame(value)) if len(encode_frame(value)) < max_size else [value]
            assert len(again) == 1 and _same(again[0], value)
        figures.inputs += 1


def test_valid_streams_round_trip(figures: Figures) -> None:
    """Valid frames of any msgpack value, cut anywhere, decode to exactly what was encoded."""
    rng = random.Random(figures.seed)
    for _ in range(fuzz_examples()):
        values, data = _valid_stream(rng)
        got = check_stream(rng, data, 1 << 20)
        assert [msgpack.packb(v) for v in got] == [msgpack.packb(_normal(v)) for v in values]
        figures.inputs += 1


@settings(max_examples=max(50, min(fuzz_examples(), 2000)), deadline=None, suppress_health_check=list(HealthCheck))
@given(cmds=st.lists(commands(), min_size=1, max_size=8), seed=st.integers(0, 2**32))
def test_every_command_round_trips(cmds: list[Any], seed: int) -> None:
    """Every command of the protocol, as its constructor builds it (Hypothesis shrinks a failure)."""
    got = check_stream(random.Random(seed), encode_frames(cmds), 1 << 20)
    assert [msgpack.packb(v) for v in got] == [msgpack.packb(_normal(v)) for v in cmds]


def test_oversized_length_refused_before_buffering() -> None:
    """A length prefix above the maximum is refused from its 4 bytes alone: nothing of the body is
    kept, so one connection cannot make a server allocate more than the limit."""
    dec = FrameDecoder(SMALL_MAX)
    with pytest.raises(FrameTooLarge):
        dec.feed((SMALL_MAX + 1).to_bytes(4, "big"))
    assert dec.buffered <= 4


def test_batch_decoder(figures: Figures) -> None:
    """A consumer's batch decoder on garbage with a valid CRC: only the documented errors
    (MagnetarError, or the ValueError/TypeError of a malformed batch), never a memory blow-up
    from a forged ``usize``."""
    rng = random.Random(figures.seed)
    for _ in range(fuzz_examples()):
        raw = rng.randbytes(rng.randrange(0, 200)) if rng.random() < 0.5 else msgpack.packb(any_value(rng))
        comp = rng.choice([0, 1, 2, 3, 4, 5, -1, 2**40])
        payload = compress(comp, raw) if comp in (1, 2, 3) and rng.random() < 0.5 else raw
        if rng.random() < 0.1 and comp in (1, 2, 3):  # a bomb: 64 MiB of zeros in a few KiB
            payload = BOMBS[comp]
        if rng.random() < 0.3:
            payload = _mutate(rng, payload)
        meta: dict[str, Any] = {"crc": crc32c(payload), "comp": comp}
        if rng.random() < 0.8:
            meta["usize"] = rng.choice([0, 1, len(raw), len(raw) - 1, 2**31, 2**40, -1, "x"])
        try:
            decode_batch(meta, payload)  # type: ignore[arg-type]
        except (MagnetarError, ValueError, TypeError):
            pass
        figures.inputs += 1


def test_decompression_bomb_refused() -> None:
    """A batch declaring 100 bytes that inflates to 64 MiB is refused without inflating it all."""
    for kind in (1, 2, 3):
        bomb = BOMBS[kind]
        with pytest.raises(InvalidMessage):
            decode_batch({"crc": crc32c(bomb), "comp": kind, "usize": 100}, bomb)
