"""R21-R26 of WIRE.md: the publish path (receipts, refusals, fencing) and what the broker pushes."""

from __future__ import annotations

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record
from magnetar.protocol.checksum import crc32c

from .wire import Wire, admin, batch, next_message, open_consumer, open_producer, publish, session, stats

# ---------------------------------------------------------------------------------------------- R21


def test_r21_receipts_arrive_in_seq_order(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        sends = []
        for seq in range(0, 100, 2):  # batches of two messages: seq is the first one's
            meta, payload = batch(b"m%d" % seq, b"m%d" % (seq + 1), seq=seq)
            sends.append(c.send(1, seq, meta, payload))
        wire.send(*sends)  # all pipelined in one write, none waiting for a receipt
        receipts = [wire.next_t(c.SEND_RECEIPT) for _ in sends]
    assert [r["seq"] for r in receipts] == list(range(0, 100, 2))
    positions = [(r["ledger"], r["entry"]) for r in receipts]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


# ---------------------------------------------------------------------------------------------- R22


def test_r22_oversized_message_is_refused_and_nothing_is_written(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"small")
        before = stats(standalone, topic)
        with pytest.raises(magnetar.MagnetarError) as info:
            producer.send(b"x" * (6 * 1024 * 1024))
        assert isinstance(info.value, magnetar.MessageTooBig)  # Pulsar's name; MessageTooLarge is its alias
        after = stats(standalone, topic)
        assert after["storageSize"] == before["storageSize"]
        assert after["msgInCounter"] == before["msgInCounter"]
        producer.send(b"after")  # the producer is still usable
    finally:
        client.close()


def test_r22_oversized_send_from_a_raw_client_is_refused_by_the_broker(
    standalone: StandaloneProcess, topic: str
) -> None:
    """Bypass the client's own check: the broker refuses the payload with MessageTooLarge."""
    payload_size = 5 * 1024 * 1024 + 10
    meta, payload = encode_batch(
        [make_record(b"y" * payload_size, None, None, 0, 0)],
        producer_name="raw",
        first_sequence_id=0,
        batched=False,
    )
    with Wire(standalone.service_url) as wire:
        wire.send({"t": "connect", "rid": 1})
        wire.send({"t": "producer", "rid": 2, "topic": topic, "producer_id": 1})
        # Producer creation is asynchronous: a send before its answer would find no producer.
        wire.next_t(c.PRODUCER_SUCCESS)
        wire.send({"t": "send", "producer_id": 1, "seq": 0, "meta": meta, "payload": payload})
        result = wire.next(lambda f: f.get("t") in ("send_error", "send_receipt"))
    assert result["t"] == "send_error" and result["code"] == "MessageTooLarge"
    assert stats(standalone, topic)["storageSize"] == 0


# ---------------------------------------------------------------------------------------------- R23


def test_r23_a_send_whose_crc_does_not_match_gets_checksum_error(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        meta, payload = batch(b"corrupted in transit")
        wire.send(c.send(1, 0, {**meta, "crc": meta["crc"] ^ 1}, payload))
        refused = wire.next_t(c.SEND_ERROR)
        assert (refused["producer_id"], refused["seq"], refused["code"]) == (1, 0, "ChecksumError")
        assert stats(standalone, topic)["msgInCounter"] == 0 and stats(standalone, topic)["storageSize"] == 0
        assert publish(wire, 1, 0, b"intact")["t"] == c.SEND_RECEIPT  # a refusal does not fence (R24)


# ---------------------------------------------------------------------------------------------- R24


def test_r24_after_a_failed_store_the_producer_is_fenced(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "all", 1)  # keeps what is stored (a topic without one is trimmed)
        open_producer(wire, topic, producer_id=1)
        stored = publish(wire, 1, 0, b"stored")
        assert stored["t"] == c.SEND_RECEIPT
        # Make the next write fail: fence the topic's ledger on its bookie, as a recovery would.
        with Wire(standalone.bookie_address) as bookie:
            assert bookie.request(c.bk_fence(stored["ledger"]))["code"] == c.BK_OK
        failed = publish(wire, 1, 1, b"lost-1")
        assert failed["t"] == c.SEND_ERROR
        again = publish(wire, 1, 2, b"lost-2")  # the next ledger would take it, but the producer is fenced
        assert (again["t"], again["code"], again["message"]) == (c.SEND_ERROR, failed["code"], failed["message"])
        # A new registration publishes again, and nothing of the fenced one was stored in between.
        open_producer(wire, topic, producer_id=2)
        later = publish(wire, 2, 3, b"later")
        assert later["t"] == c.SEND_RECEIPT and later["ledger"] != stored["ledger"]
        wire.send(c.flow(1, 10))
        delivered = [next_message(wire, 1) for _ in range(2)]
    assert [(m["ledger"], m["entry"]) for m in delivered] == [
        (stored["ledger"], stored["entry"]),
        (later["ledger"], later["entry"]),
    ]


# ---------------------------------------------------------------------------------------------- R25


def test_r25_message_carries_meta_and_payload_as_the_producer_sent_them(
    standalone: StandaloneProcess, topic: str
) -> None:
    payload = b"\xc1 not msgpack at all \xff"  # the broker never decodes it (R30)
    meta = {"crc": crc32c(payload), "n": 1, "x-unknown": [1, "two"]}
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        wire.send(c.send(1, 0, meta, payload))  # type: ignore[arg-type]
        receipt = wire.next_t(c.SEND_RECEIPT)
        open_consumer(wire, topic, "s", 7, initial_position="Earliest")
        wire.send(c.flow(7, 1))
        message = next_message(wire, 7)
    assert message == c.message(7, receipt["ledger"], receipt["entry"], meta, payload, 0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- R26


def test_r26_unloading_a_topic_pushes_close_producer_and_close_consumer(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic, producer_id=3)
        open_consumer(wire, topic, "s", 5)
        path = topic.removeprefix("persistent://")
        assert admin(standalone, "DELETE", f"/admin/v2/persistent/{path}?force=true") == 204
        pushed = [wire.next(lambda f: f.get("t") in (c.CLOSE_PRODUCER, c.CLOSE_CONSUMER)) for _ in range(2)]
    assert pushed == [c.close_producer_pushed(3), c.close_consumer_pushed(5)]  # no rid: nobody asked
