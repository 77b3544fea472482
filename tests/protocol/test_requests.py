"""R8-R20 of WIRE.md: requests and their answers, client → broker, against a real standalone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.standalone import StandaloneProcess

from magnetar import __version__
from magnetar.client.net.connection import Connection
from magnetar.protocol import commands as c
from magnetar.protocol.errors import (
    ErrorCode,
    InvalidCommand,
    InvalidTopicName,
    MagnetarError,
    RetryableError,
    ServiceNotReady,
    UnknownError,
    error_from_wire,
)
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE, FrameDecoder, encode_frame

from .wire import Wire, admin, next_message, open_consumer, open_producer, publish, session, stats

# ---------------------------------------------------------------------------------------------- R8


def test_r8_answers_echo_the_rid_and_errors_carry_a_wire_code(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        # Pipelined: each answer is matched by its rid, not by its place in the stream.
        wire.send(c.lookup(topic, rid=41), c.partitioned_metadata(topic, rid=42), c.producer("a b://", 1, rid=43))
        answers = {f["rid"]: f for f in (wire.next(), wire.next(), wire.next())}
        assert answers[41]["t"] == c.LOOKUP_RESPONSE
        assert answers[42]["t"] == c.PARTITIONED_METADATA_RESPONSE
        error = answers[43]
        assert error["t"] == c.ERROR and error["code"] == "InvalidTopicName" and error["message"]
        assert isinstance(error_from_wire(error["code"], error["message"]), InvalidTopicName)
        assert wire.request(c.lookup(topic))["t"] == c.LOOKUP_RESPONSE  # an error answer keeps the connection


@pytest.mark.parametrize("name", ["subscription/with-slash", ""])
def test_r8_a_refused_request_gets_an_error_with_its_rid(standalone: StandaloneProcess, topic: str, name: str) -> None:
    with session(standalone.service_url) as wire:
        answer = wire.request(c.subscribe(topic, name, 1, c.SUB_EXCLUSIVE))
        assert (answer["t"], answer["code"]) == (c.ERROR, "InvalidCommand")


def test_r8_every_error_code_maps_to_its_exception_class() -> None:
    for code in ErrorCode:
        exc = error_from_wire(code.value, "text")
        assert isinstance(exc, MagnetarError)
        assert exc.code == code and str(exc) == "text"  # every code has a class of its own
    assert type(error_from_wire("NoSuchCode", "text")) is UnknownError
    assert isinstance(error_from_wire("ServiceNotReady", ""), RetryableError)
    assert not isinstance(error_from_wire("InvalidCommand", ""), RetryableError)
    assert issubclass(ServiceNotReady, RetryableError) and not issubclass(InvalidCommand, RetryableError)


# ---------------------------------------------------------------------------------------------- R9


def test_r9_connect_is_answered_by_connected(standalone: StandaloneProcess) -> None:
    with Wire(standalone.service_url) as wire:
        answer = wire.request(c.connect("wire-tests"))
        assert answer == c.connected(answer["rid"], __version__, c.PROTOCOL_VERSION, DEFAULT_MAX_MESSAGE_SIZE)
        bare = wire.request({"t": c.CONNECT, "rid": 0})  # client_version and protocol_version are optional
        assert bare["t"] == c.CONNECTED and bare["protocol_version"] == c.PROTOCOL_VERSION


# ---------------------------------------------------------------------------------------------- R10


def test_r10_the_broker_answers_ping_with_pong(standalone: StandaloneProcess) -> None:
    with session(standalone.service_url) as wire:
        wire.send(c.ping())
        assert wire.next() == c.pong()


async def test_r10_the_client_answers_ping_with_pong() -> None:
    received: asyncio.Queue[Any] = asyncio.Queue()

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                if frame["t"] == c.CONNECT:
                    writer.write(encode_frame(c.connected(frame["rid"], "test", c.PROTOCOL_VERSION, 1024)))
                    writer.write(encode_frame(c.ping()))
                else:
                    received.put_nowait(frame)
        writer.close()

    server = await asyncio.start_server(broker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = await Connection.open(f"magnetar://127.0.0.1:{port}", operation_timeout=5, keep_alive_interval=0)
    try:
        assert await asyncio.wait_for(received.get(), 5) == c.pong()
    finally:
        conn.close()
        server.close()


# ---------------------------------------------------------------------------------------------- R11


def test_r11_lookup_and_partitioned_metadata(standalone: StandaloneProcess, topic: str) -> None:
    partitioned = topic + "-p"
    assert admin(standalone, "PUT", f"/admin/v2/persistent/{partitioned.removeprefix('persistent://')}/partitions", 3)
    with session(standalone.service_url) as wire:
        answer = wire.request(c.lookup(topic))
        assert answer == c.lookup_response(answer["rid"], standalone.service_url, False)  # a standalone owns all
        assert wire.request(c.partitioned_metadata(topic))["partitions"] == 0
        assert wire.request(c.partitioned_metadata(partitioned))["partitions"] == 3


# ---------------------------------------------------------------------------------------------- R12


def test_r12_producer_and_close_producer(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        named = wire.request(c.producer(topic, 1, "named"))
        assert named == c.producer_success(named["rid"], "named", -1)
        unnamed = wire.request(c.producer(topic, 2))
        assert unnamed["t"] == c.PRODUCER_SUCCESS and unnamed["producer_name"] and unnamed["last_sequence_id"] == -1
        closed = wire.request(c.close_producer(2))
        assert closed == c.success(closed["rid"])
        assert publish(wire, 2, 0, b"x")["code"] == "AlreadyClosed"  # the registration is gone
        assert publish(wire, 1, 0, b"x")["t"] == c.SEND_RECEIPT  # the other one is not


# ---------------------------------------------------------------------------------------------- R13


def test_r13_subscribe_starts_at_latest_by_default_or_at_earliest(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        first = publish(wire, 1, 0, b"before")
        latest = c.subscribe(topic, "latest", 1, c.SUB_EXCLUSIVE)
        del latest["initial_position"]  # absent means Latest
        assert wire.request(latest)["t"] == c.SUCCESS
        open_consumer(wire, topic, "earliest", 2, initial_position="Earliest")
        subs = stats(standalone, topic)["subscriptions"]
        assert (subs["latest"]["msgBacklog"], subs["earliest"]["msgBacklog"]) == (0, 1)
        wire.send(c.flow(1, 10), c.flow(2, 10))
        assert next_message(wire, 2)["entry"] == first["entry"]
        second = publish(wire, 1, 1, b"after")
        assert next_message(wire, 1)["entry"] == second["entry"]  # the first it gets is the later one


# ---------------------------------------------------------------------------------------------- R14


def test_r14_flow_permits_count_messages_and_an_entry_goes_while_permits_are_positive(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        three = publish(wire, 1, 0, b"a", b"b", b"c")  # one entry of three messages
        one = publish(wire, 1, 3, b"d")
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 1))
        assert next_message(wire, 1)["entry"] == three["entry"]  # one permit is enough for it...
        consumer = stats(standalone, topic)["subscriptions"]["s"]["consumers"][0]
        assert consumer["availablePermits"] == -2  # ...and it costs three
        wire.send(c.flow(1, 2), c.ping())
        assert wire.next() == c.pong()  # the flow was handled (frames of a connection run in order)
        consumer = stats(standalone, topic)["subscriptions"]["s"]["consumers"][0]
        assert (consumer["availablePermits"], consumer["msgOutCounter"]) == (0, 3)  # zero: nothing sent
        assert not wire.inbox
        wire.send(c.flow(1, 1))
        assert next_message(wire, 1)["entry"] == one["entry"]


# ---------------------------------------------------------------------------------------------- R15


def test_r15_ack_response_comes_once_the_ack_is_durable(fresh_standalone: StandaloneProcess, topic: str) -> None:
    with session(fresh_standalone.service_url) as wire:
        open_producer(wire, topic)
        entries = [publish(wire, 1, i, b"m%d" % i)["entry"] for i in range(3)]
        open_consumer(wire, topic, "durable", 1, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        delivered = [next_message(wire, 1) for _ in entries]
        first, second = ([m["ledger"], m["entry"]] for m in delivered[:2])
        wire.send(c.ack(1, c.ACK_INDIVIDUAL, [first]))  # no rid: no answer
        answer = wire.request(c.ack(1, c.ACK_INDIVIDUAL, [second]))
        assert answer == c.ack_response(answer["rid"])
        assert not [f for f in wire.inbox if f.get("t") in (c.ACK_RESPONSE, c.ERROR)]
    fresh_standalone.kill9()  # no chance to flush anything that was not durable already
    fresh_standalone.start()
    with session(fresh_standalone.service_url) as wire:
        open_consumer(wire, topic, "durable", 1)
        wire.send(c.flow(1, 10))
        assert next_message(wire, 1)["entry"] == entries[2]  # both acks survived the crash


# ---------------------------------------------------------------------------------------------- R16


def test_r16_an_ack_for_an_acknowledged_or_moved_entry_is_not_an_error(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        publish(wire, 1, 0, b"a")
        open_consumer(wire, topic, "shared", 1, c.SUB_SHARED, initial_position="Earliest")
        wire.send(c.flow(1, 1))
        first = next_message(wire, 1)
        position = [first["ledger"], first["entry"]]
        # Negatively acknowledged, it goes to the subscription's other consumer, the only one with permits.
        open_consumer(wire, topic, "shared", 2, c.SUB_SHARED)
        wire.send(c.redeliver(1, [position]), c.flow(2, 1))
        moved = next_message(wire, 2)
        assert (moved["entry"], moved["redelivery_count"]) == (first["entry"], 1)
        for consumer_id in (1, 2, 2):  # the stale consumer's ack, the owner's, and the owner's again
            answer = wire.request(c.ack(consumer_id, c.ACK_INDIVIDUAL, [position]))
            assert answer == c.ack_response(answer["rid"])
        assert stats(standalone, topic)["subscriptions"]["shared"]["msgBacklog"] == 0


# ---------------------------------------------------------------------------------------------- R17


def test_r17_redeliver_sends_the_given_or_all_unacknowledged_entries_again(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        publish(wire, 1, 0, b"a")
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        message = next_message(wire, 1)
        assert message["redelivery_count"] == 0
        wire.send(c.redeliver(1, [[message["ledger"], message["entry"]]]))
        again = next_message(wire, 1)
        assert (again["entry"], again["redelivery_count"]) == (message["entry"], 1)
        assert again["payload"] == message["payload"]
        wire.send(c.redeliver(1))  # no positions: every unacknowledged entry
        assert next_message(wire, 1)["redelivery_count"] == 2


# ---------------------------------------------------------------------------------------------- R18


def test_r18_close_consumer_returns_its_unacknowledged_entries(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as first, session(standalone.service_url) as second:
        open_producer(first, topic)
        entry = publish(first, 1, 0, b"a")["entry"]
        open_consumer(first, topic, "shared", 1, c.SUB_SHARED, initial_position="Earliest")
        first.send(c.flow(1, 10))
        assert next_message(first, 1)["entry"] == entry
        open_consumer(second, topic, "shared", 2, c.SUB_SHARED)
        second.send(c.flow(2, 10))
        closed = first.request(c.close_consumer(1))
        assert closed == c.success(closed["rid"])
        returned = next_message(second, 2)
        assert (returned["entry"], returned["redelivery_count"]) == (entry, 1)


# ---------------------------------------------------------------------------------------------- R19


def test_r19_unsubscribe_deletes_the_subscription(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "gone", 1)
        open_consumer(wire, topic, "kept", 2)
        assert {"gone", "kept"} <= set(stats(standalone, topic)["subscriptions"])
        answer = wire.request(c.unsubscribe(1))
        assert answer == c.success(answer["rid"])
        assert set(stats(standalone, topic)["subscriptions"]) == {"kept"}


# ---------------------------------------------------------------------------------------------- R20


def test_r20_seek_delivers_again_from_the_position(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        entries = [publish(wire, 1, i, b"m%d" % i)["entry"] for i in range(3)]
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        delivered = [next_message(wire, 1) for _ in entries]
        positions = [[m["ledger"], m["entry"]] for m in delivered]
        assert wire.request(c.ack(1, c.ACK_INDIVIDUAL, positions))["t"] == c.ACK_RESPONSE
        answer = wire.request(c.seek(1, positions[1]))
        assert answer == c.success(answer["rid"])
        assert [next_message(wire, 1)["entry"] for _ in range(2)] == entries[1:]
