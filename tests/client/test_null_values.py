"""Null-value messages and the Message accessors of issue 16, on a real standalone.

``producer.send(None)`` publishes a null value: a tombstone that consumers and readers tell apart
from an empty payload (``has_null_value()``; ``data()`` is ``b""`` for both, ``value()`` None for
the null one), batched or not, blocking or asyncio; compaction forgets a key whose latest message
is a null value; peek marks it; the dead letter topic keeps it null (and its ordering key); the
Spark data source gives it a null payload. Also ``producer_name()``, ``ordering_key()``,
``schema_version()`` and ``encryption_context()``.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from tests.support.admin import topic_path
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar import InitialPosition, MessageId
from magnetar.client import aio
from magnetar.client.options import ConsumerDeadLetterPolicy, ConsumerType
from magnetar.columnar.message_rows import StoredEntry, entry_rows
from magnetar.protocol.batch import encode_batch, make_record

pytestmark = pytest.mark.timeout(120)

EARLIEST = InitialPosition.Earliest


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
def test_a_null_value_is_not_an_empty_payload(standalone: StandaloneProcess, topic: str, batching: bool) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        producer = client.create_producer(topic, batching_enabled=batching, batching_max_publish_delay_ms=60_000)
        outcomes: list[Any] = []
        for content in (None, b"", b"x", None):
            producer.send_async(content, lambda res, mid: outcomes.append(res))
        producer.flush()
        assert outcomes == [magnetar.Result.Ok] * 4
        got = [consumer.receive(timeout_millis=10_000) for _ in range(4)]
        assert [m.has_null_value() for m in got] == [True, False, False, True]
        assert [m.data() for m in got] == [b"", b"", b"x", b""]
        assert [m.value() for m in got] == [None, b"", b"x", None]
        assert {m.message_id().batch_index() >= 0 for m in got} == {batching}


def test_non_bytes_content_is_still_refused(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic)
        for bad in ("text", 42):
            with pytest.raises(TypeError):
                producer.send(bad)


async def test_asyncio_producer_and_reader_carry_null_values(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        first = await producer.send(None, partition_key="k")
        await producer.send(b"v", partition_key="k")
        reader = await client.create_reader(topic, MessageId.earliest)
        a = await reader.read_next(timeout_millis=10_000)
        b = await reader.read_next(timeout_millis=10_000)
        assert (a.message_id(), a.has_null_value(), a.partition_key()) == (first, True, "k")
        assert (b.has_null_value(), b.data()) == (False, b"v")
        await reader.close()


def test_message_accessors(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", initial_position=EARLIEST)
        producer = client.create_producer(topic, producer_name="accessor-producer", batching_enabled=False)
        producer.send(b"ordered", ordering_key="ok-1")
        producer.send(b"plain")
        ordered, plain = (consumer.receive(timeout_millis=10_000) for _ in range(2))
        assert ordered.producer_name() == plain.producer_name() == "accessor-producer"
        assert (ordered.ordering_key(), plain.ordering_key()) == ("ok-1", "")
        assert ordered.schema_version() == "" and ordered.encryption_context() is None
        assert not ordered.has_null_value()


def _compact(sa: StandaloneProcess, topic: str) -> None:
    status, _ = admin_call(sa, "PUT", topic_path(topic) + "/compaction")
    assert status == 204

    def done() -> bool:
        _, doc = admin_call(sa, "GET", topic_path(topic) + "/compaction")
        assert doc["status"] != "ERROR", doc
        return bool(doc["status"] == "SUCCESS")

    wait_for("compaction", done, timeout=60)


def test_compaction_forgets_a_key_whose_latest_value_is_null(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "hold", initial_position=EARLIEST).close()  # keep the ledgers to compact
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        for key, value in [("gone", b"1"), ("kept", b"1"), ("back", None), ("gone", None), ("back", b"2")]:
            producer.send_async(value, lambda res, mid: None, partition_key=key)
        producer.flush()
        _compact(standalone, topic)
        reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
        got = {}
        while reader.has_message_available():
            m = reader.read_next(timeout_millis=10_000)
            got[m.partition_key()] = (m.data(), m.has_null_value())
        reader.close()
        assert got == {"kept": (b"1", False), "back": (b"2", False)}


def test_peek_marks_a_null_value(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "s", initial_position=EARLIEST).close()
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(None)
        producer.send(b"")
    sub = f"{topic_path(topic)}/subscription/s/position"
    with urllib.request.urlopen(f"{standalone.admin_url}{sub}/1", timeout=30) as resp:
        assert resp.status == 200 and resp.read() == b""
        assert resp.headers["X-Pulsar-null-value"] == "true"
    with urllib.request.urlopen(f"{standalone.admin_url}{sub}/2", timeout=30) as resp:
        assert resp.read() == b"" and resp.headers.get("X-Pulsar-null-value") is None
        assert json.loads(resp.headers.get("X-Pulsar-sequence-id")) == 1


def test_spark_rows_give_a_null_value_a_null_payload() -> None:
    records = [make_record(None, None, "k", 0, 0), make_record(b"", None, "k", 0, 1)]
    meta, payload = encode_batch(records, producer_name="p", first_sequence_id=0)
    rows = entry_rows("persistent://public/default/t", -1, 3, StoredEntry(0, meta, payload))
    assert [r["payload"] for r in rows] == [None, b""]
    assert [r["batch_index"] for r in rows] == [0, 1]


async def test_a_null_value_and_ordering_key_stay_in_the_dead_letter_topic(
    standalone: StandaloneProcess, topic: str
) -> None:
    dlq = f"{topic}-s-DLQ"
    policy = ConsumerDeadLetterPolicy(max_redeliver_count=1, initial_subscription_name="audit")
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=ConsumerType.Shared,
            initial_position=EARLIEST,
            negative_ack_redelivery_delay_ms=0,
            dead_letter_policy=policy,
        )
        producer = await client.create_producer(topic, batching_enabled=False)
        await producer.send(None, partition_key="k", ordering_key="ok")
        for _ in range(2):  # delivery 0 and 1 fail; then the dead letter topic takes it
            msg = await consumer.receive(timeout_millis=10_000)
            assert msg.has_null_value()
            await consumer.negative_acknowledge(msg)
        audit = await client.subscribe(dlq, "audit", consumer_type=ConsumerType.Shared)
        letter = await audit.receive(timeout_millis=20_000)
        assert letter.has_null_value() and (letter.partition_key(), letter.ordering_key()) == ("k", "ok")
        await audit.acknowledge(letter)
