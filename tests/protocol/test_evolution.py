"""R37-R40 of WIRE.md: how the protocol may change without breaking old peers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from tests.support.standalone import StandaloneProcess

from magnetar.client.net.connection import CLIENT_VERSION, Connection
from magnetar.client.options import Result, result_of
from magnetar.protocol import commands as c
from magnetar.protocol.errors import error_from_wire
from magnetar.protocol.framing import FrameDecoder, encode_frame

from .wire import Wire, batch, open_producer, session


@asynccontextmanager
async def _tiny_broker(answer_connect: Callable[[Any], Any]) -> AsyncIterator[tuple[str, list[Any]]]:
    """A one-trick broker: answers ``connect`` with ``answer_connect(frame)`` and records every frame."""
    received: list[Any] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                received.append(frame)
                if frame["t"] == c.CONNECT:
                    writer.write(encode_frame(answer_connect(frame)))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"magnetar://127.0.0.1:{server.sockets[0].getsockname()[1]}", received
    finally:
        server.close()


# ---------------------------------------------------------------------------------------------- R37


def test_r37_the_broker_and_the_bookie_ignore_fields_they_do_not_know(
    standalone: StandaloneProcess, topic: str
) -> None:
    future = {"added_in_a_later_version": [1, {"x": b"y"}]}
    with Wire(standalone.service_url) as wire:
        assert wire.request({**c.connect("wire-tests"), **future})["t"] == c.CONNECTED
        assert wire.request({**c.lookup(topic), **future})["t"] == c.LOOKUP_RESPONSE
        open_producer(wire, topic)
        meta, payload = batch(b"m")
        wire.send({**c.send(1, 0, meta, payload), **future})
        assert wire.next_t(c.SEND_RECEIPT)["seq"] == 0
    with Wire(standalone.bookie_address) as bookie:
        answer = bookie.request({**c.bk_read_lac(10**15), **future})
        assert (answer["t"], answer["code"]) == (c.BK_RESPONSE, "NoSuchLedger")  # an answer, not a refusal


async def test_r37_the_client_ignores_fields_it_does_not_know() -> None:
    def connected(frame: Any) -> Any:
        return {**c.connected(frame["rid"], "future", c.PROTOCOL_VERSION, 1234), "added_later": {"a": 1}}

    async with _tiny_broker(connected) as (url, _):
        conn = await Connection.open(url, operation_timeout=5, keep_alive_interval=0)
        try:
            assert (conn.server_version, conn.max_message_size) == ("future", 1234)
        finally:
            conn.close()


# ---------------------------------------------------------------------------------------------- R38

# The required fields of protocol version 1. A command may gain optional fields, never required ones.
VERSION_1_REQUIRED = {
    "connect": ("rid",),
    "ping": (),
    "pong": (),
    "lookup": ("rid", "topic"),
    "partitioned_metadata": ("rid", "topic"),
    "producer": ("rid", "topic", "producer_id"),
    "send": ("producer_id", "seq", "meta", "payload"),
    "close_producer": ("rid", "producer_id"),
    "subscribe": ("rid", "topic", "subscription", "consumer_id", "sub_type"),
    "flow": ("consumer_id", "permits"),
    "ack": ("consumer_id", "kind", "positions"),
    "redeliver": ("consumer_id",),
    "close_consumer": ("rid", "consumer_id"),
    "unsubscribe": ("rid", "consumer_id"),
    "seek": ("rid", "consumer_id", "position"),
    "bk_add": ("rid", "ledger", "entry", "data", "crc"),
    "bk_read": ("rid", "ledger", "entry"),
    "bk_read_lac": ("rid", "ledger"),
    "bk_fence": ("rid", "ledger"),
    "bk_delete": ("rid", "ledger"),
}


def test_r38_existing_commands_never_gain_required_fields() -> None:
    for name, required in VERSION_1_REQUIRED.items():
        assert c.REQUIRED_FIELDS[name] == required, f"{name}: add a new command instead of a required field"
    # The table the servers check is the TypedDicts' required keys, nothing else.
    for name, command in c.SERVED.items():
        assert set(c.REQUIRED_FIELDS[name]) == command.__required_keys__ - {"t"}
        assert command.__annotations__["t"].__args__ == (name,)


# ---------------------------------------------------------------------------------------------- R39


def test_r39_a_new_command_gets_unknown_command_meaning_not_supported(standalone: StandaloneProcess) -> None:
    with session(standalone.service_url) as broker, Wire(standalone.bookie_address) as bookie:
        for wire in (broker, bookie):
            wire.send({"t": "a_command_from_the_future", "rid": 9})
            (answer,) = wire.until_closed()
            assert (answer["t"], answer["code"]) == (c.ERROR, "UnknownCommand")
            assert result_of(error_from_wire(answer["code"], answer["message"])) is Result.OperationNotSupported


# ---------------------------------------------------------------------------------------------- R40


async def test_r40_the_client_sends_its_protocol_version_in_connect() -> None:
    def connected(frame: Any) -> Any:
        return c.connected(frame["rid"], "test", c.PROTOCOL_VERSION, 1024)

    async with _tiny_broker(connected) as (url, received):
        conn = await Connection.open(url, operation_timeout=5, keep_alive_interval=0)
        conn.close()
    assert received[0] == c.connect(CLIENT_VERSION, c.PROTOCOL_VERSION, rid=received[0]["rid"])
    assert c.PROTOCOL_VERSION == 1  # the version WIRE.md describes


def test_r40_the_broker_answers_with_its_protocol_version(standalone: StandaloneProcess) -> None:
    with Wire(standalone.service_url) as wire:
        assert wire.request(c.connect("wire-tests"))["protocol_version"] == c.PROTOCOL_VERSION
