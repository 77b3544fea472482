"""Readers against a real standalone: start positions, ``has_message_available``, seek, broker restarts.

A reader is a non-durable Exclusive consumer (WIRE.md R20f): these tests check what the
application sees — which message comes first for every kind of start id, inclusive or not, on
batched and unbatched entries — and that a broker restart in the middle of a read neither skips
nor repeats a message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import free_ports
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

import magnetar
from magnetar import MessageId

Earliest = MessageId.earliest
Latest = MessageId.latest


def publish(client: magnetar.Client, topic: str, payloads: list[bytes], *, batched: bool) -> list[MessageId]:
    """Publish ``payloads`` in order and return their ids (batched: all in one or a few entries)."""
    producer = client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=4, batching_max_publish_delay_ms=60_000
    )
    ids: list[Any] = [None] * len(payloads)
    done = threading.Event()
    left = [len(payloads)]

    def sent(i: int) -> Any:
        def callback(result: Any, msg_id: MessageId | None) -> None:
            assert result is magnetar.Result.Ok, result
            ids[i] = msg_id
            left[0] -= 1
            if left[0] == 0:
                done.set()

        return callback

    for i, payload in enumerate(payloads):
        producer.send_async(payload, sent(i))
    producer.flush()
    assert done.wait(30)
    producer.close()
    return ids


def read_all(reader: magnetar.Reader, n: int, timeout_millis: int = 10_000) -> list[bytes]:
    return [reader.read_next(timeout_millis).data() for _ in range(n)]


def nothing_more(reader: magnetar.Reader) -> bool:
    """No message arrives within a short wait (used only after ``has_message_available`` said False)."""
    try:
        reader.read_next(300)
    except magnetar.Timeout:
        return True
    return False


# ---------------------------------------------------------------------------------------------- start


@pytest.mark.parametrize("batched", [False, True])
def test_a_reader_from_earliest_reads_everything_in_order_and_then_has_nothing(
    standalone: StandaloneProcess, topic: str, batched: bool
) -> None:
    payloads = [b"m%d" % i for i in range(10)]
    with magnetar.Client(standalone.service_url) as client:
        publish(client, topic, payloads, batched=batched)
        reader = client.create_reader(topic, Earliest)
        assert reader.topic() == topic
        assert reader.has_message_available()
        assert read_all(reader, 10) == payloads
        assert not reader.has_message_available()
        assert nothing_more(reader)
        client.create_producer(topic).send(b"later")
        assert reader.has_message_available()
        assert reader.read_next(10_000).data() == b"later"
        assert not reader.has_message_available()


def test_a_reader_from_latest_reads_only_what_is_published_after_it(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        publish(client, topic, [b"old-1", b"old-2"], batched=False)
        reader = client.create_reader(topic, Latest)
        assert not reader.has_message_available()
        publish(client, topic, [b"new-1", b"new-2"], batched=True)
        assert reader.has_message_available()
        assert read_all(reader, 2) == [b"new-1", b"new-2"]
        assert not reader.has_message_available()


def test_an_inclusive_reader_at_latest_reads_the_last_message(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        publish(client, topic, [b"a", b"b", b"last"], batched=False)
        reader = client.create_reader(topic, Latest, start_message_id_inclusive=True)
        assert reader.has_message_available()  # Pulsar's rule: it moves the reader onto the last message
        assert reader.read_next(10_000).data() == b"last"
        assert not reader.has_message_available()


def test_has_message_available_is_false_on_an_empty_topic(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        for start, inclusive in ((Earliest, False), (Latest, False), (Latest, True)):
            reader = client.create_reader(topic, start, start_message_id_inclusive=inclusive)
            assert not reader.has_message_available()
            reader.close()


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("inclusive", [False, True])
def test_a_reader_from_a_middle_id_starts_after_it_or_at_it(
    standalone: StandaloneProcess, topic: str, batched: bool, inclusive: bool
) -> None:
    payloads = [b"m%d" % i for i in range(10)]
    with magnetar.Client(standalone.service_url) as client:
        ids = publish(client, topic, payloads, batched=batched)
        # Index 5: with batches of 4, the second message of the second entry.
        start = MessageId.deserialize(ids[5].serialize())
        reader = client.create_reader(topic, start, start_message_id_inclusive=inclusive)
        first = 5 if inclusive else 6
        assert reader.has_message_available()
        got = read_all(reader, 10 - first)
        assert got == payloads[first:]
        assert not reader.has_message_available()


def test_a_reader_at_the_last_id_exclusive_has_nothing_until_more_arrives(
    standalone: StandaloneProcess, topic: str
) -> None:
    with magnetar.Client(standalone.service_url) as client:
        ids = publish(client, topic, [b"x", b"y"], batched=True)
        reader = client.create_reader(topic, ids[-1])
        assert not reader.has_message_available()
        publish(client, topic, [b"z"], batched=False)
        assert reader.has_message_available()
        assert reader.read_next(10_000).data() == b"z"


def test_two_readers_do_not_share_a_position(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        publish(client, topic, [b"a", b"b", b"c"], batched=False)
        one = client.create_reader(topic, Earliest)
        two = client.create_reader(topic, Earliest, reader_name="named", subscription_role_prefix="role")
        assert read_all(one, 2) == [b"a", b"b"]
        assert read_all(two, 3) == [b"a", b"b", b"c"]
        assert one.read_next(10_000).data() == b"c"


# ---------------------------------------------------------------------------------------------- seek


def test_reader_seek_to_an_id_and_to_a_publish_time(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        first = publish(client, topic, [b"a", b"b", b"c"], batched=False)
        reader = client.create_reader(topic, Earliest)
        assert read_all(reader, 3) == [b"a", b"b", b"c"]
        reader.seek(first[0])  # exclusive, as the reader's start
        assert read_all(reader, 2) == [b"b", b"c"]
        reader.seek(Earliest)
        assert reader.has_message_available()
        assert read_all(reader, 3) == [b"a", b"b", b"c"]
        time.sleep(0.005)  # publish times are in ms: the next batch must be strictly later than the first
        cut = int(time.time() * 1000)
        publish(client, topic, [b"d", b"e"], batched=False)
        reader.seek(cut)
        assert reader.has_message_available()
        assert read_all(reader, 2) == [b"d", b"e"]
        assert not reader.has_message_available()


def test_reader_seek_inclusive_rereads_the_id_itself(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        ids = publish(client, topic, [b"a", b"b", b"c", b"d", b"e", b"f"], batched=True)
        reader = client.create_reader(topic, Earliest, start_message_id_inclusive=True)
        assert read_all(reader, 6) == [b"a", b"b", b"c", b"d", b"e", b"f"]
        reader.seek(ids[4])
        assert read_all(reader, 2) == [b"e", b"f"]


# ---------------------------------------------------------------------------------------------- partitions


def test_a_reader_reads_every_partition_of_a_partitioned_topic(standalone: StandaloneProcess, topic: str) -> None:
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions"
    status, body = admin_call(standalone, "PUT", path, 3)
    assert status == 204, body
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        sent = {f"k{i}:{i}".encode() for i in range(30)}
        for payload in sorted(sent):
            producer.send(payload, partition_key=payload.decode().split(":")[0])
        reader = client.create_reader(topic, Earliest)
        messages = [reader.read_next(10_000) for _ in range(30)]
        assert sorted(m.data() for m in messages) == sorted(sent)
        assert {m.message_id().partition() for m in messages} == {0, 1, 2}
        assert {m.topic_name() for m in messages} == {f"{topic}-partition-{i}" for i in range(3)}
        assert not reader.has_message_available()


def test_a_partitioned_reader_from_an_id_starts_its_partition_there_and_the_others_at_latest(
    standalone: StandaloneProcess, topic: str
) -> None:
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions"
    assert admin_call(standalone, "PUT", path, 2)[0] == 204
    a, c = "a", "b"  # Java string hashes 97 and 98: different partitions of two
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = {key: [producer.send(f"{key}:{i}".encode(), partition_key=key) for i in range(3)] for key in (a, c)}
        assert ids[a][0].partition() != ids[c][0].partition()
        reader = client.create_reader(topic, ids[a][0])
        assert read_all(reader, 2) == [b"a:1", b"a:2"]
        assert not reader.has_message_available()  # c's partition started at its end
        producer.send(b"c:new", partition_key=c)
        assert reader.read_next(10_000).data() == b"c:new"


# ---------------------------------------------------------------------------------------------- restarts


@pytest.fixture
def fixed_port_standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A standalone whose restarts keep its ports, so a client's service URL stays valid across them."""
    service, web, bookie = free_ports(3)
    with run_standalone(tmp_path, "--port", str(service), "--web-port", str(web), "--bookie-port", str(bookie)) as sa:
        yield sa


def test_a_reader_survives_a_broker_restart_without_skipping_or_repeating(
    fixed_port_standalone: StandaloneProcess, topic: str
) -> None:
    sa = fixed_port_standalone
    payloads = [b"m%02d" % i for i in range(30)]
    with magnetar.Client(sa.service_url) as client:
        publish(client, topic, payloads, batched=True)  # entries of 4: the restart lands inside one
        reader = client.create_reader(topic, Earliest, receiver_queue_size=5)
        got = read_all(reader, 13)
        sa.restart()
        got += read_all(reader, 17, timeout_millis=60_000)
        assert got == payloads
        assert reader._r.consumer.partitions[0].reconnects >= 1  # it did lose its broker
        assert nothing_more(reader)
