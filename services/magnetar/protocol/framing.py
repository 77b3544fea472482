"""Frame codec: a 4-byte big-endian unsigned length, then one msgpack value.

The decoder is sans-IO (``feed(bytes) -> list[frame]``) so that the same code serves the broker,
the bookie and the client, and so that the malformed-input cases (garbage, an oversized length
prefix, a truncated frame) can be tested without sockets. A frame longer than the maximum raises
``FrameTooLarge`` before any of its body is buffered, so an attacker cannot make a server
allocate more than the limit for one connection.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from magnetar.protocol.errors import FrameTooLarge, MalformedFrame

# 5 MiB of payload plus headroom for the command's other fields.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_HEADROOM = 64 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_HEADROOM

_LEN = struct.Struct(">I")


def encode_frame(value: Any) -> bytes:
    """Encode one value as a frame (length prefix + msgpack body)."""
    body: bytes = msgpack.packb(value, use_bin_type=True)
    return _LEN.pack(len(body)) + body


def encode_frames(values: list[Any]) -> bytes:
    """Encode many values at once; one ``write`` of the result sends them all."""
    out = bytearray()
    packer = msgpack.Packer(use_bin_type=True)
    for value in values:
        body = packer.pack(value)
        out += _LEN.pack(len(body))
        out += body
    return bytes(out)


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get back whole decoded frames."""

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._max = max_frame_size

    @property
    def max_frame_size(self) -> int:
        """The largest frame accepted now; a broker raises it once a connection authenticated."""
        return self._max

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        self._max = value

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame (non-zero at EOF means truncation)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return every frame now complete.

        Raises ``FrameTooLarge`` / ``MalformedFrame`` on a bad frame; the whole frames decoded
        before it in the same chunk ride on the exception as ``frames`` so the caller can still
        answer them before it closes the connection.
        """
        frames: list[Any] = []
        try:
            self._decode_into(data, frames)
        except (FrameTooLarge, MalformedFrame) as exc:
            exc.frames = frames  # type: ignore[union-attr]
            raise
        return frames

    def _decode_into(self, data: bytes, frames: list[Any]) -> None:
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (length,) = _LEN.unpack_from(buf, pos)
            if length > self._max:
                raise FrameTooLarge(f"frame of {length} bytes exceeds the maximum of {self._max}")
            if length == 0:
                raise MalformedFrame("empty frame")
            if end - pos - 4 < length:
                break
            body = bytes(buf[pos + 4 : pos + 4 + length])
            pos += 4 + length
            try:
                frames.append(msgpack.unpackb(body, raw=False, strict_map_key=False))
            except Exception as exc:
                raise MalformedFrame(f"undecodable frame body: {exc}") from exc
        if pos:
            del buf[:pos]
