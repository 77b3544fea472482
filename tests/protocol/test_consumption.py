"""R20a, R20c, R20d, R20f and R20g of WIRE.md, spoken in raw frames against a real standalone:
seek by publish time, batch-index acknowledgement, cumulative acks refused on shared types,
readers and the last message id, and the topics of a namespace."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from tests.support.cluster import wait_until
from tests.support.standalone import StandaloneProcess

from magnetar.protocol import commands as c

from .wire import Wire, admin, batch, next_message, open_consumer, open_producer, publish, session, stats

LATEST = 2**63 - 1


def publish_at(wire: Wire, producer_id: int, seq: int, publish_time: int, *payloads: bytes) -> Any:
    """Send one entry with a chosen publish time (``meta.pt``; the CRC covers only the payload)."""
    meta, payload = batch(*payloads, seq=seq)
    meta["pt"] = publish_time
    wire.send(c.send(producer_id, seq, meta, payload))
    receipt = wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f.get("seq") == seq)
    assert receipt["t"] == c.SEND_RECEIPT, receipt
    return receipt


def publish_unbatched(wire: Wire, producer_id: int, seq: int, payload: bytes) -> Any:
    meta, body = batch(payload, seq=seq, batched=False)
    wire.send(c.send(producer_id, seq, meta, body))
    receipt = wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f.get("seq") == seq)
    assert receipt["t"] == c.SEND_RECEIPT, receipt
    return receipt


def position(frame: Any) -> list[int]:
    return [frame["ledger"], frame["entry"]]


def ack(wire: Wire, consumer_id: int, positions: list[list[int]], **options: Any) -> None:
    answer = wire.request(c.ack(consumer_id, c.ACK_INDIVIDUAL, positions, **options))
    assert answer == c.ack_response(answer["rid"]), answer


def backlog(sa: StandaloneProcess, topic: str, sub: str) -> int:
    value: int = stats(sa, topic)["subscriptions"][sub]["msgBacklog"]
    return value


# --------------------------------------------------------------------------------------------- R20a


def test_r20a_seek_publish_time_delivers_from_the_first_entry_published_at_or_after_it(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        entries = [publish_at(wire, 1, i, 1000 * (i + 1), b"m%d" % i)["entry"] for i in range(4)]
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 100))
        delivered = [next_message(wire, 1) for _ in entries]
        ack(wire, 1, [position(m) for m in delivered])
        answer = wire.request(c.seek_publish_time(1, 2500))
        assert answer == c.success(answer["rid"])
        assert [next_message(wire, 1)["entry"] for _ in range(2)] == entries[2:]
        answer = wire.request(c.seek_publish_time(1, 2000))  # an exact publish time is included
        assert answer == c.success(answer["rid"])
        assert [next_message(wire, 1)["entry"] for _ in range(3)] == entries[1:]
        # Later than every entry: delivery resumes at the end, with the next entry published.
        answer = wire.request(c.seek_publish_time(1, 10**13))
        assert answer == c.success(answer["rid"])
        newer = publish_at(wire, 1, 4, 5000, b"new")
        assert next_message(wire, 1)["entry"] == newer["entry"]


# --------------------------------------------------------------------------------------------- R20b


@pytest.mark.parametrize(
    "options",
    [
        {"key_shared_mode": c.KEY_SHARED_STICKY, "key_ranges": [[5, 3]]},
        {"key_shared_mode": c.KEY_SHARED_STICKY, "key_ranges": [[0, c.KEY_HASH_RANGE]]},
        {"key_shared_mode": c.KEY_SHARED_STICKY, "key_ranges": [[0, 10], [10, 20]]},
        {"key_shared_mode": c.KEY_SHARED_STICKY, "key_ranges": [[0, 10, 20]]},
        {"key_shared_mode": c.KEY_SHARED_STICKY},
        {"key_shared_mode": "ROUND_ROBIN"},
    ],
)
def test_r20b_malformed_key_shared_policies_are_refused(
    standalone: StandaloneProcess, topic: str, options: dict[str, Any]
) -> None:
    with session(standalone.service_url) as wire:
        answer = wire.request(c.subscribe(topic, "ks", 1, c.SUB_KEY_SHARED, **options))
        assert (answer["t"], answer["code"]) == (c.ERROR, "InvalidCommand"), options
        good = [[0, 99], [100, c.KEY_HASH_RANGE - 1]]
        answer = wire.request(
            c.subscribe(topic, "ks", 1, c.SUB_KEY_SHARED, key_shared_mode=c.KEY_SHARED_STICKY, key_ranges=good)
        )
        assert answer == c.success(answer["rid"])


# --------------------------------------------------------------------------------------------- R20c


def test_r20c_batch_index_acks_are_durable_and_redeliveries_carry_them(
    fresh_standalone: StandaloneProcess, topic: str
) -> None:
    with session(fresh_standalone.service_url) as wire:
        open_producer(wire, topic)
        three = publish(wire, 1, 0, b"a", b"b", b"c")
        single = publish(wire, 1, 3, b"d")
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        first = next_message(wire, 1)
        assert first["entry"] == three["entry"] and "acked" not in first
        assert next_message(wire, 1)["entry"] == single["entry"]
        pos = position(first)
        ack(wire, 1, [], batch_acks=[[*pos, 3, [0, 2]]])
        assert backlog(fresh_standalone, topic, "s") == 2  # b and d: the backlog counts messages
        wire.send(c.redeliver(1, [pos]))
        again = next_message(wire, 1)
        assert again["entry"] == three["entry"] and sorted(again["acked"]) == [0, 2]
    fresh_standalone.kill9()
    fresh_standalone.start()
    with session(fresh_standalone.service_url) as wire:
        open_consumer(wire, topic, "s", 1)
        wire.send(c.flow(1, 10))
        again = next_message(wire, 1)
        assert again["entry"] == three["entry"] and sorted(again["acked"]) == [0, 2]
        ack(wire, 1, [], batch_acks=[[*pos, 3, [1]]])  # the last index: the whole entry is acknowledged
        last = next_message(wire, 1)
        assert last["entry"] == single["entry"]
        ack(wire, 1, [position(last)])
        assert backlog(fresh_standalone, topic, "s") == 0


def test_r20c_malformed_batch_acks_are_refused(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        publish(wire, 1, 0, b"a", b"b")
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        pos = position(next_message(wire, 1))
        for bad in ([[*pos, 2, [2]]], [[*pos, 0, []]], [[*pos, 2]], [[*pos, 2, 1]]):
            answer = wire.request(c.ack(1, c.ACK_INDIVIDUAL, [], batch_acks=bad))
            assert (answer["t"], answer["code"]) == (c.ERROR, "InvalidCommand"), bad
        assert backlog(standalone, topic, "s") == 2


# --------------------------------------------------------------------------------------------- R20d


@pytest.mark.parametrize("sub_type", [c.SUB_SHARED, c.SUB_KEY_SHARED])
def test_r20d_cumulative_acks_are_refused_on_shared_subscriptions(
    standalone: StandaloneProcess, topic: str, sub_type: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        publish(wire, 1, 0, b"a")
        open_consumer(wire, topic, "s", 1, sub_type, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        pos = position(next_message(wire, 1))
        answer = wire.request(c.ack(1, c.ACK_CUMULATIVE, [pos]))
        assert (answer["t"], answer["code"]) == (c.ERROR, "InvalidCommand")
        assert backlog(standalone, topic, "s") == 1
        ack(wire, 1, [pos])
        assert backlog(standalone, topic, "s") == 0


@pytest.mark.parametrize("sub_type", [c.SUB_EXCLUSIVE, c.SUB_FAILOVER])
def test_r20d_cumulative_acks_are_accepted_on_exclusive_and_failover(
    standalone: StandaloneProcess, topic: str, sub_type: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        publish(wire, 1, 0, b"a")
        publish(wire, 1, 1, b"b")
        open_consumer(wire, topic, "s", 1, sub_type, initial_position="Earliest")
        wire.send(c.flow(1, 10))
        next_message(wire, 1)
        pos = position(next_message(wire, 1))
        answer = wire.request(c.ack(1, c.ACK_CUMULATIVE, [pos]))
        assert answer == c.ack_response(answer["rid"])
        assert backlog(standalone, topic, "s") == 0


# --------------------------------------------------------------------------------------------- R20f


def test_r20f_readers_start_at_their_message_id_and_leave_nothing_behind(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        e0 = publish(wire, 1, 0, b"a")
        e1 = publish(wire, 1, 1, b"b", b"c", b"d")
        e2 = publish(wire, 1, 4, b"e")
        ledger, mid = e1["ledger"], e1["entry"]
        starts: list[tuple[str, dict[str, Any], Any]] = [
            ("after", {"start_message_id": [ledger, mid, -1]}, e2),
            ("at", {"start_message_id": [ledger, mid, -1], "start_inclusive": True}, e1),
            ("batch-index", {"start_message_id": [ledger, mid, 1]}, e1),
            ("earliest", {"start_message_id": [-1, -1, -1]}, e0),
        ]
        for cid, (name, options, expected) in enumerate(starts, start=1):
            open_consumer(wire, topic, f"reader-{name}", cid, durable=False, **options)
            wire.send(c.flow(cid, 10))
            assert next_message(wire, cid)["entry"] == expected["entry"], name
        open_consumer(wire, topic, "reader-latest", 9, durable=False, start_message_id=[LATEST, LATEST, -1])
        wire.send(c.flow(9, 10))
        newer = publish(wire, 1, 5, b"f")
        assert next_message(wire, 9)["entry"] == newer["entry"]
        assert {f"reader-{n}" for n, _, _ in starts} <= set(stats(standalone, topic)["subscriptions"])
        for cid in range(1, len(starts) + 1):
            closed = wire.request(c.close_consumer(cid))
            assert closed == c.success(closed["rid"])
    # The last reader went with its connection: no reader subscription is left.
    wait_until(
        lambda: not [s for s in stats(standalone, topic)["subscriptions"] if s.startswith("reader-")],
        10,
        "reader subscriptions to go",
    )


def test_r20f_get_last_message_id(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "s", 1)
        empty = wire.request(c.get_last_message_id(1))
        assert empty["t"] == c.LAST_MESSAGE_ID_RESPONSE
        assert (empty["ledger"], empty["entry"], empty["batch"]) == (-1, -1, -1)
        open_producer(wire, topic)
        three = publish(wire, 1, 0, b"a", b"b", b"c")
        answer = wire.request(c.get_last_message_id(1))
        assert (answer["ledger"], answer["entry"], answer["batch"]) == (three["ledger"], three["entry"], 2)
        plain = publish_unbatched(wire, 1, 3, b"d")
        answer = wire.request(c.get_last_message_id(1))
        assert (answer["ledger"], answer["entry"], answer["batch"]) == (plain["ledger"], plain["entry"], -1)
        assert list(answer["mark_delete"]) < [three["ledger"], three["entry"]]
        wire.send(c.flow(1, 10))
        delivered = [next_message(wire, 1) for _ in range(2)]
        ack(wire, 1, [position(m) for m in delivered])
        answer = wire.request(c.get_last_message_id(1))
        assert list(answer["mark_delete"]) == [plain["ledger"], plain["entry"]]


# --------------------------------------------------------------------------------------------- R20g


def test_r20g_topics_of_a_namespace_list_each_topic_once(standalone: StandaloneProcess) -> None:
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    admin(standalone, "PUT", f"/admin/v2/namespaces/{ns}")
    admin(standalone, "PUT", f"/admin/v2/persistent/{ns}/created")
    admin(standalone, "PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 3)
    with session(standalone.service_url) as wire:
        open_producer(wire, f"persistent://{ns}/auto", 1)  # auto-created by its first producer
        publish(wire, 1, 0, b"x")
        open_producer(wire, f"persistent://{ns}/parted-partition-1", 2)
        publish(wire, 2, 0, b"y")
        answer = wire.request(c.get_topics_of_namespace(ns))
        assert answer["t"] == c.TOPICS_OF_NAMESPACE_RESPONSE
        assert sorted(answer["topics"]) == [f"persistent://{ns}/{name}" for name in ("auto", "created", "parted")]
        missing = wire.request(c.get_topics_of_namespace("public/no-such-namespace"))
        assert (missing["t"], missing["code"]) == (c.ERROR, "NamespaceNotFound")
