"""A raw protocol connection for the WIRE.md tests: frames in and out of a socket, nothing else.

The tests speak the protocol by hand (with the constructors of ``protocol/commands/``) rather
than through the client, so that each rule is checked against what the server itself does. Reads
block on the socket with a timeout (an event, never a sleep).
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable
from typing import Any

from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.framing import FrameDecoder, encode_frames

TIMEOUT = 15.0


def address(url: str) -> tuple[str, int]:
    """``magnetar://host:port`` or ``host:port`` → (host, port)."""
    host, port = url.removeprefix("magnetar://").rsplit(":", 1)
    return host, int(port)


class Wire:
    """One raw connection: ``send`` commands or bytes, ``next`` frame matching a predicate."""

    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(address(url), timeout=timeout)
        self.sock.settimeout(timeout)
        self.decoder = FrameDecoder()
        self.inbox: list[Any] = []  # received, not yet taken by ``next``
        self.rids = itertools.count(1)

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, *cmds: Any) -> None:
        self.sock.sendall(encode_frames(list(cmds)))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self) -> bool:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            return False
        self.inbox.extend(self.decoder.feed(chunk))
        return True

    def next(self, match: Callable[[Any], bool] = lambda f: True) -> Any:
        """The first frame received (or already buffered) that ``match``es; the others stay."""
        while True:
            for i, frame in enumerate(self.inbox):
                if match(frame):
                    return self.inbox.pop(i)
            if not self._read():
                raise ConnectionError(f"connection closed; unmatched frames: {self.inbox!r}")

    def next_t(self, t: str) -> Any:
        return self.next(lambda f: isinstance(f, dict) and f.get("t") == t)

    def until_closed(self) -> list[Any]:
        """Every frame (buffered, then read) until the server closes the connection."""
        while self._read():
            pass
        frames, self.inbox = self.inbox, []
        return frames

    def request(self, cmd: Any) -> Any:
        """Send ``cmd`` with a fresh ``rid`` and return the answer carrying that ``rid``."""
        rid = cmd["rid"] = next(self.rids)
        self.send(cmd)
        return self.next(lambda f: isinstance(f, dict) and f.get("rid") == rid)


def session(url: str) -> Wire:
    """A raw connection that has done the ``connect`` handshake."""
    wire = Wire(url)
    answer = wire.request(c.connect("wire-tests"))
    assert answer["t"] == c.CONNECTED, answer
    return wire


def batch(*payloads: bytes, seq: int = 0, batched: bool = True) -> tuple[EntryMeta, bytes]:
    """(meta, payload) of one ``send`` carrying ``payloads``, as a producer encodes it."""
    records = [make_record(p, None, None, 0, seq + i) for i, p in enumerate(payloads)]
    return encode_batch(records, producer_name="wire", first_sequence_id=seq, batched=batched)


def open_producer(wire: Wire, topic: str, producer_id: int = 1) -> Any:
    answer = wire.request(c.producer(topic, producer_id))
    assert answer["t"] == c.PRODUCER_SUCCESS, answer
    return answer


def publish(wire: Wire, producer_id: int, seq: int, *payloads: bytes) -> Any:
    """Send one entry and return its answer (``send_receipt`` or ``send_error``)."""
    meta, payload = batch(*payloads, seq=seq)
    wire.send(c.send(producer_id, seq, meta, payload))
    return wire.next(
        lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f["producer_id"] == producer_id and f["seq"] == seq
    )


def open_consumer(
    wire: Wire, topic: str, subscription: str, consumer_id: int, sub_type: str = c.SUB_EXCLUSIVE, **options: Any
) -> None:
    answer = wire.request(c.subscribe(topic, subscription, consumer_id, sub_type, **options))
    assert answer["t"] == c.SUCCESS, answer


def next_message(wire: Wire, consumer_id: int) -> Any:
    return wire.next(lambda f: f.get("t") == c.MESSAGE and f["consumer_id"] == consumer_id)


def stats(sa: StandaloneProcess, topic: str) -> dict[str, Any]:
    status, body = admin_call(sa, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    assert status == 200, f"stats of {topic}: {status} {body}"
    result: dict[str, Any] = body
    return result


def admin(sa: StandaloneProcess, method: str, path: str, body: Any = None) -> int:
    """The status of a successful admin call; an error status fails the test."""
    status, reply = admin_call(sa, method, path, body)
    assert status < 400, f"{method} {path}: {status} {reply}"
    return status
