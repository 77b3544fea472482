"""Regression tests for the bugs the fuzzers found, one input each (the input that found it is in
each docstring). They run on one standalone process, with raw frames (tests/protocol/wire.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.fuzz.conftest import fuzz_timeout, log_problems
from tests.protocol.wire import Wire, batch, open_consumer, open_producer, session
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.protocol import commands as c
from magnetar.protocol.batch import decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import InvalidMessage

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/found-{uuid.uuid4().hex[:8]}"


def _answer_to(wire: Wire, pid: int, seq: int) -> Any:
    return wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f.get("seq") == seq)


def _alive(wire: Wire) -> None:
    wire.send(c.ping())
    assert wire.next_t(c.PONG)


def test_garbage_zstd_batch_is_an_invalid_message() -> None:
    """Found by test_frames.test_batch_decoder: ZSTD garbage raised zstandard's ZstdError."""
    payload = b"\x28\xb5\x2f\xfd" + b"garbage"
    with pytest.raises(InvalidMessage):
        decode_batch({"crc": crc32c(payload), "comp": 3, "usize": 100}, payload)


def test_send_with_bad_count_is_refused_and_not_stored(fuzz_standalone: StandaloneProcess, topic: str) -> None:
    """Found by test_broker: ``meta.n`` -1 was stored but never answered (the metrics counter
    raised in the receipt's callback); ``meta.n`` 2**63-1 broke the topic's message counts so
    that every later send failed."""
    with session(fuzz_standalone.service_url) as wire:
        open_producer(wire, topic)
        for seq, n in ((1, -1), (2, 2**63 - 1), (3, 0)):
            meta, payload = batch(b"bad", seq=seq)
            meta["n"] = n
            wire.send(c.send(1, seq, meta, payload))
            answer = _answer_to(wire, 1, seq)
            assert answer["t"] == c.SEND_ERROR and answer["code"] == "InvalidMessage", answer
        meta, payload = batch(b"good", seq=4)
        wire.send(c.send(1, 4, meta, payload))
        assert _answer_to(wire, 1, 4)["t"] == c.SEND_RECEIPT
        wire.request(c.subscribe(topic, "check", 1, c.SUB_EXCLUSIVE, "Earliest"))
        wire.send(c.flow(1, 100))
        assert wire.next_t(c.MESSAGE)["meta"]["seq"] == 4  # the first stored entry is the good one


def test_send_without_bytes_payload_gets_a_send_error(fuzz_standalone: StandaloneProcess, topic: str) -> None:
    """Found by test_broker: ``payload: 256`` got an error frame without rid, so the send was never
    answered as a send."""
    with session(fuzz_standalone.service_url) as wire:
        open_producer(wire, topic)
        wire.send(c.send(1, 7, {"crc": 0}, 256))  # type: ignore[arg-type]
        assert _answer_to(wire, 1, 7)["t"] == c.SEND_ERROR
        _alive(wire)


def test_pipelined_creates_of_one_producer_id(fuzz_standalone: StandaloneProcess, topic: str) -> None:
    """Found by test_broker: two ``producer`` commands with one id in one write both passed the
    in-use check; the first producer leaked and sends went to the second's topic."""
    with session(fuzz_standalone.service_url) as wire:
        other = topic.replace("persistent://", "non-persistent://")
        wire.send(c.producer(topic, 1, None, 11), c.producer(other, 1, None, 12))
        answers = {wire.next(lambda f, r=r: f.get("rid") == r)["t"] for r in (11, 12)}
        assert answers == {c.PRODUCER_SUCCESS, c.ERROR}


def test_pipelined_unsubscribes(fuzz_standalone: StandaloneProcess, topic: str) -> None:
    """Found by test_broker: a second pipelined ``unsubscribe`` failed with UnknownError
    (``list.remove(x): x not in list``)."""
    with session(fuzz_standalone.service_url) as wire:
        assert wire.request(c.subscribe(topic, "s", 1, c.SUB_EXCLUSIVE))["t"] == c.SUCCESS
        wire.send(c.unsubscribe(1, 21), c.unsubscribe(1, 22))
        answers = [wire.next(lambda f, r=r: f.get("rid") == r) for r in (21, 22)]
        assert answers[0]["t"] == c.SUCCESS, answers
        assert answers[1]["t"] == c.ERROR and answers[1]["code"] == "AlreadyClosed", answers


@pytest.mark.parametrize(
    "cmd",
    [
        c.partitioned_metadata([], 5),  # type: ignore[arg-type]  # AttributeError closed the connection, no error frame
        c.producer("persistent://public/default/x", 1, [0, 0, 0], 5),  # type: ignore[arg-type]  # UnknownError
        {**c.producer("persistent://public/default/x", 2, None, 5), "epoch": 2**64 - 1},  # poisoned topic epoch
        c.seek(1, [0, -(2**63)], 5),  # a mark-delete no frame could carry, then a silenced connection
    ],
    ids=["topic-not-a-string", "producer-name-not-a-string", "epoch-2**64-1", "seek-entry--2**63"],
)
def test_bad_field_gets_one_error_and_connection_lives(fuzz_standalone: StandaloneProcess, cmd: Any) -> None:
    """Found by test_broker; each got no answer, an UnknownError, or left the topic or the
    connection unusable. Now: one InvalidCommand/InvalidTopicName error for its rid."""
    with session(fuzz_standalone.service_url) as wire:
        if cmd["t"] == c.SEEK:
            assert wire.request(c.subscribe(f"persistent://public/default/{uuid.uuid4().hex}", "s", 1, "Exclusive"))
        wire.send(cmd)
        answer = wire.next(lambda f: f.get("rid") == 5)
        assert answer["t"] == c.ERROR and answer["code"] in ("InvalidCommand", "InvalidTopicName"), answer
        _alive(wire)


def test_handler_overflow_closes_with_an_error(fuzz_standalone: StandaloneProcess) -> None:
    """Found by test_broker: ``consumer_id: inf`` raised OverflowError out of the handler; the
    connection closed without any error frame."""
    with session(fuzz_standalone.service_url) as wire:
        wire.send(c.seek(float("inf"), [0, 0], 5))  # type: ignore[arg-type]
        frames = wire.until_closed()
        assert frames and frames[-1]["t"] == c.ERROR and frames[-1]["code"] == "InvalidCommand", frames


def test_bookie_add_with_lac_out_of_range(fuzz_standalone: StandaloneProcess) -> None:
    """Found by test_bookie: ``lac`` 2**63 failed the whole group commit (``struct.error``), so
    every add of every connection in that batch failed with PersistenceError."""
    ledger = 2**41 + uuid.uuid4().int % 1000
    good, bad = b"good", b"bad"
    with Wire(fuzz_standalone.bookie_address) as wire:
        wire.send(
            c.bk_add(ledger, 0, good, crc32c(good), -1, rid=1), c.bk_add(ledger, 1, bad, crc32c(bad), 2**63, rid=2)
        )
        answers = {r: wire.next(lambda f, r=r: f.get("rid") == r) for r in (1, 2)}
        assert answers[1]["code"] == c.BK_OK, answers
        assert answers[2]["code"] == "InvalidCommand", answers
        wire.send(c.bk_read(ledger, 1, rid=3))
        assert wire.next(lambda f: f.get("rid") == 3)["code"] == "NoSuchEntry"  # the refused add is not stored


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("PUT", "/admin/v2/persistent/public/default/huge/partitions", 2**63, 400),  # the broker hung
        ("PUT", "/admin/v2/tenants/t-found", "a string", 400),  # AttributeError: a 500
        ("POST", "/admin/v2/namespaces/public/default/retention", [1], 400),  # AttributeError: a 500
        ("POST", "/admin/v2/no/such/route/at/all/here", None, 404),  # text, not JSON
        ("PUT", "/admin/v2/clusters/" + "x" * 1000, {"serviceUrl": None}, 412),  # MDB_BAD_VALSIZE: a 500
    ],
)
def test_admin_refusals_are_json_4xx(
    fuzz_standalone: StandaloneProcess, method: str, path: str, body: Any, status: int
) -> None:
    """Found by test_admin: each was a 500, a hang or a non-JSON answer."""
    got, reply = admin_call(fuzz_standalone, method, path, body)
    assert got == status and isinstance(reply, dict) and reply.get("reason"), (got, reply)


def test_admin_subscription_whose_key_is_over_lmdbs_limit(fuzz_standalone: StandaloneProcess) -> None:
    """Found by test_admin (seed 970812): a valid 1,024-character subscription name on an existing
    topic made the cursor's metadata key longer than LMDB's 511 bytes: MDB_BAD_VALSIZE, a 500."""
    topic = f"/admin/v2/persistent/public/default/long-sub-{uuid.uuid4().hex[:8]}"
    got, reply = admin_call(fuzz_standalone, "PUT", topic)
    assert got in (204, 409), (got, reply)
    got, reply = admin_call(fuzz_standalone, "PUT", f"{topic}/subscription/" + "x" * 1024)
    assert got == 400 and "name too long" in reply.get("reason", ""), (got, reply)
    got, reply = admin_call(fuzz_standalone, "GET", f"{topic}/stats")
    assert got == 200 and reply["subscriptions"] == {}, (got, reply)  # nothing half-made was left behind


def test_a_producer_closed_while_being_created_never_appears(fuzz_standalone: StandaloneProcess, topic: str) -> None:
    """Found by test_broker at 1,000,000 inputs (seed 378430): ``producer`` then ``close_producer``
    of that id in one write: the close answered success, then the creation finished and the
    producer appeared, so a later send was stored on the topic the client had closed. As in Pulsar,
    the close now wins: the creation fails and the send is refused."""
    with session(fuzz_standalone.service_url) as wire:
        meta, payload = batch(b"after-close", seq=1)
        wire.send(c.producer(topic, 7, None, 31), c.close_producer(7, 32))
        answers = {r: wire.next(lambda f, r=r: f.get("rid") == r) for r in (31, 32)}
        assert answers[32]["t"] == c.SUCCESS, answers
        assert answers[31]["t"] == c.ERROR and answers[31]["code"] == "AlreadyClosed", answers
        wire.send(c.send(7, 1, meta, payload))
        assert _answer_to(wire, 7, 1)["t"] == c.SEND_ERROR
        open_producer(wire, topic, 8)  # the topic has no leftover producer: a new one opens
        wire.request(c.subscribe(topic, "check", 9, c.SUB_EXCLUSIVE, "Earliest"))
        assert wire.request(c.get_last_message_id(9))["entry"] < 0  # nothing was stored


def test_a_consumer_closed_while_being_created_never_appears(fuzz_standalone: StandaloneProcess, topic: str) -> None:
    """The consumer side of the above: the close wins, so the Exclusive subscription is free."""
    with session(fuzz_standalone.service_url) as wire:
        wire.send(c.subscribe(topic, "s", 4, c.SUB_EXCLUSIVE, "Earliest", None, 41), c.close_consumer(4, 42))
        answers = {r: wire.next(lambda f, r=r: f.get("rid") == r) for r in (41, 42)}
        assert answers[42]["t"] == c.SUCCESS, answers
        assert answers[41]["t"] == c.ERROR and answers[41]["code"] == "AlreadyClosed", answers
        assert wire.request(c.subscribe(topic, "s", 5, c.SUB_EXCLUSIVE))["t"] == c.SUCCESS  # not ConsumerBusy


@pytest.mark.parametrize("positions", [[[]], [[5]], [[1, 2, 3]], [7], "x"], ids=["empty", "one", "three", "int", "str"])
def test_redeliver_with_a_position_that_is_not_ledger_entry_is_an_invalid_command(
    fuzz_standalone: StandaloneProcess, topic: str, positions: Any
) -> None:
    """Found by test_broker at 1,000,000 inputs (seed 811130): ``redeliver`` whose positions were
    not [ledger, entry] pairs (``[[]]``) raised IndexError in the handler, so the broker logged a
    traceback and closed the connection with its catch-all error. As for ``ack``: one
    InvalidCommand error, the connection lives, and nothing is logged."""
    offset = fuzz_standalone.log_path.stat().st_size
    with session(fuzz_standalone.service_url) as wire:
        open_consumer(wire, topic, "s", 1)
        wire.send(c.redeliver(1, positions))
        answer = wire.next(lambda f: f.get("t") == c.ERROR)
        assert answer["code"] == "InvalidCommand", answer
        _alive(wire)
    assert log_problems(fuzz_standalone.log_path, offset) == []
