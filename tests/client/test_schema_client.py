"""``schema=`` in the client, end to end on a real standalone (WIRE.md R118-R122).

Producers register their schema and encode objects at ``send``; every entry they write names the
writer's schema version (``meta["sv"]``, seen here through a bytes consumer's
``int_schema_version()``, which reads it off each received entry); consumers, readers and table
views decode with the version each message was written with, into their own schema.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.admin import topic_path
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar import asyncio as aio
from magnetar.client import IncompatibleSchema, InitialPosition, MessageId
from magnetar.client.schema_codec import schema_key
from magnetar.schema import (
    Array,
    AvroSchema,
    Bytes,
    Integer,
    JsonSchema,
    Record,
    String,
    StringSchema,
)

MiB = 1024 * 1024


class Order(Record):
    id = String(required=True)
    qty = Integer()
    tags = Array(String())


def order_v2() -> type[Record]:
    """``Order`` evolved: one more field, with a default (FULL-compatible both ways)."""

    class Order(Record):  # the same record name: Avro resolves records by name
        id = String(required=True)
        qty = Integer()
        tags = Array(String())
        note = String(default="none", required=True, required_default=True)

    return Order


class Blob(Record):
    name = String()
    data = Bytes()


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[magnetar.Client]:
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()


def earliest(client: magnetar.Client, topic: str, sub: str, schema: Any = None) -> magnetar.Consumer:
    return client.subscribe(topic, sub, schema=schema, initial_position=InitialPosition.Earliest)


def fields(record: Any) -> tuple[Any, ...]:
    return (record.id, record.qty, record.tags)


def test_the_issue_example_produces_and_consumes_order_objects(client: magnetar.Client, topic: str) -> None:
    producer = client.create_producer(topic, schema=AvroSchema(Order))
    consumer = client.subscribe(topic, "billing", schema=AvroSchema(Order))
    producer.send(Order(id="o-1", qty=2, tags=["new"]))
    msg = consumer.receive(10_000)
    order = msg.value()
    assert isinstance(order, Order)
    assert fields(order) == ("o-1", 2, ["new"])
    assert msg.int_schema_version() == 0  # the first version of the topic's schema
    assert msg.schema_version() == "\x00" * 8  # pulsar-client's form: 8 big-endian bytes
    info = client.get_schema_info(topic, 0)
    assert info.type.name == "AVRO" and info.same_schema(AvroSchema(Order).schema_info())
    consumer.acknowledge(msg)


def test_json_and_string_schemas_round_trip_and_null_values_stay_null(client: magnetar.Client, topic: str) -> None:
    json_topic, str_topic = topic + "-json", topic + "-str"
    jp = client.create_producer(json_topic, schema=JsonSchema(Order))
    jc = earliest(client, json_topic, "s", JsonSchema(Order))
    jp.send(Order(id="j-1", qty=5, tags=["a", "b"]))
    jp.send(None)  # a null value, with a schema too
    got = jc.receive(10_000).value()
    assert isinstance(got, Order) and fields(got) == ("j-1", 5, ["a", "b"])
    null = jc.receive(10_000)
    assert null.has_null_value() and null.value() is None
    sp = client.create_producer(str_topic, schema=StringSchema())
    sc = earliest(client, str_topic, "s", StringSchema())
    sp.send("héllo")
    msg = sc.receive(10_000)
    assert msg.value() == "héllo" and msg.data() == "héllo".encode()
    raw = earliest(client, str_topic, "raw")  # a bytes consumer on a schema topic gets the bytes
    assert raw.receive(10_000).value() == "héllo".encode()


def test_a_wrong_object_type_is_a_type_error_and_nothing_is_sent(client: magnetar.Client, topic: str) -> None:
    producer = client.create_producer(topic, schema=AvroSchema(Order))
    consumer = earliest(client, topic, "s", AvroSchema(Order))
    with pytest.raises(TypeError):
        producer.send(b"not an order")
    with pytest.raises(TypeError):
        producer.send_async("nor this", lambda result, msg_id: None)
    producer.send(Order(id="after", qty=1, tags=[]))
    assert consumer.receive(10_000).value().id == "after"  # the refused ones never reached the topic
    with pytest.raises(magnetar.Timeout):
        consumer.receive(300)


def test_an_incompatible_producer_is_refused_with_incompatible_schema(client: magnetar.Client, topic: str) -> None:
    client.create_producer(topic, schema=AvroSchema(Order))

    class Order2(Record):  # `qty` changed type: neither version can read the other's data
        id = String(required=True)
        qty = String(required=True)

    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Order2))
    with pytest.raises(IncompatibleSchema):  # another type altogether
        client.create_producer(topic, schema=StringSchema())


@pytest.mark.parametrize("mode", ["batched", "unbatched", "chunked"])
def test_every_entry_carries_the_writer_version(client: magnetar.Client, topic: str, mode: str) -> None:
    options: dict[str, Any] = {
        "batched": {"batching_enabled": True, "batching_max_publish_delay_ms": 50},
        "unbatched": {"batching_enabled": False},
        "chunked": {"chunking_enabled": True},
    }[mode]
    raw = earliest(client, topic, "raw")  # bytes: reads the version off each entry, decodes nothing
    typed = earliest(client, topic, "typed", AvroSchema(Blob))
    producer = client.create_producer(topic, schema=AvroSchema(Blob), **options)
    size = 6 * MiB if mode == "chunked" else 10
    for i in range(5):
        producer.send_async(Blob(name=f"b{i}", data=bytes([i]) * size), lambda result, msg_id: None)
    producer.flush()
    versions = [raw.receive(30_000).int_schema_version() for _ in range(5)]
    assert versions == [0] * 5
    got = [typed.receive(30_000) for _ in range(5)]
    assert [(m.value().name, len(m.value().data)) for m in got] == [(f"b{i}", size) for i in range(5)]
    if mode == "chunked":
        assert all(m.message_id().first_chunk is not None for m in got)  # really cut into chunks
    elif mode == "batched":
        assert got[-1].message_id().batch_index() > 0


def test_evolution_each_consumer_reads_both_versions_into_its_own(client: magnetar.Client, topic: str) -> None:
    v2 = order_v2()
    p1 = client.create_producer(topic, schema=AvroSchema(Order))
    c1 = earliest(client, topic, "v1", AvroSchema(Order))
    c2 = earliest(client, topic, "v2", AvroSchema(v2))
    p1.send(Order(id="old", qty=1, tags=["x"]))
    p2 = client.create_producer(topic, schema=AvroSchema(v2))  # registers version 1
    p2.send(v2(id="new", qty=2, tags=[], note="urgent"))
    old1, new1 = c1.receive(10_000), c1.receive(10_000)
    assert (old1.int_schema_version(), new1.int_schema_version()) == (0, 1)
    assert isinstance(new1.value(), Order) and fields(new1.value()) == ("new", 2, [])
    assert not hasattr(new1.value(), "note")  # v2's field dropped by the v1 reader
    old2, new2 = c2.receive(10_000).value(), c2.receive(10_000).value()
    assert (fields(old2), old2.note) == (("old", 1, ["x"]), "none")  # written with v1: the default
    assert (fields(new2), new2.note) == (("new", 2, []), "urgent")


def test_reader_and_table_view_decode_with_the_schema(client: magnetar.Client, topic: str) -> None:
    producer = client.create_producer(topic, schema=AvroSchema(Order))
    producer.send(Order(id="k1-a", qty=1, tags=[]), partition_key="k1")
    producer.send(Order(id="k2-a", qty=2, tags=[]), partition_key="k2")
    producer.send(Order(id="k1-b", qty=3, tags=[]), partition_key="k1")
    producer.send(None, partition_key="k2")  # deletes k2
    reader = client.create_reader(topic, MessageId.earliest, schema=AvroSchema(Order))
    assert [reader.read_next(10_000).value().id for _ in range(3)] == ["k1-a", "k2-a", "k1-b"]
    assert reader.read_next(10_000).value() is None
    reader.close()
    view = client.create_table_view(topic, schema=AvroSchema(Order))
    try:
        assert len(view) == 1 and view.get("k2") is None
        k1 = view.get("k1")
        assert isinstance(k1, Order) and k1.id == "k1-b"
    finally:
        view.close()


async def test_asyncio_round_trip_and_a_new_version_decoded_without_blocking_the_loop(
    standalone: StandaloneProcess, topic: str
) -> None:
    v2 = order_v2()
    async with aio.Client(standalone.service_url, operation_timeout_seconds=20) as client:
        p1 = await client.create_producer(topic, schema=AvroSchema(Order))
        consumer = await client.subscribe(
            topic, "s", schema=AvroSchema(Order), initial_position=InitialPosition.Earliest
        )
        await p1.send(Order(id="a-1", qty=7, tags=["t"]))
        first = await consumer.receive(10_000)
        assert isinstance(first.value(), Order) and fields(first.value()) == ("a-1", 7, ["t"])
        assert client._writer_schemas.get(schema_key(topic), 1) is None
        p2 = await client.create_producer(topic, schema=AvroSchema(v2))  # version 1, new to the consumer
        await p2.send(v2(id="a-2", qty=8, tags=[], note="n"))
        second = await consumer.receive(10_000)
        # Version 1 was fetched before the message was handed out, so value() has nothing to wait
        # for on this very loop (a fetch started inside value() could never complete here).
        assert client._writer_schemas.get(schema_key(topic), 1) is not None
        started = time.monotonic()
        value = second.value()
        assert time.monotonic() - started < 0.5
        assert isinstance(value, Order) and fields(value) == ("a-2", 8, []) and second.int_schema_version() == 1
        await consumer.acknowledge(second)


def test_a_partitioned_producer_registers_on_every_partition(
    standalone: StandaloneProcess, client: magnetar.Client, topic: str
) -> None:
    status, _ = admin_call(standalone, "PUT", topic_path(topic) + "/partitions", 3)
    assert status in (200, 204)
    consumer = earliest(client, topic, "s", AvroSchema(Order))
    raw = earliest(client, topic, "raw")
    producer = client.create_producer(topic, schema=AvroSchema(Order), batching_enabled=False)
    for i in range(6):  # round robin: two on each partition
        producer.send(Order(id=f"p{i}", qty=i, tags=[]))
    got = [consumer.receive(10_000) for _ in range(6)]
    assert sorted(m.value().id for m in got) == [f"p{i}" for i in range(6)]
    assert {m.message_id().partition() for m in got} == {0, 1, 2}
    assert [raw.receive(10_000).int_schema_version() for _ in range(6)] == [0] * 6  # one version for all


def test_encrypted_schema_entries_carry_the_version_and_decode_after_decryption(
    client: magnetar.Client, topic: str, tmp_path: Any
) -> None:
    """R122 with R114: ``sv`` is set before the entry is sealed, so it stays readable in the clear
    meta; a consumer with the private key opens the entry, then decodes with that version. Two
    versions are written so that decoding by the entry's own version is what is checked."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pub, priv = tmp_path / "k.pub", tmp_path / "k.pem"
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    priv.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    reader = magnetar.CryptoKeyReader(str(pub), str(priv))
    consumer = client.subscribe(
        topic,
        "decrypting",
        schema=AvroSchema(Order),
        initial_position=InitialPosition.Earliest,
        crypto_key_reader=reader,
    )
    # No key and no schema: CONSUME hands over the ciphertext, whose version is in the clear meta.
    raw = client.subscribe(
        topic,
        "raw",
        initial_position=InitialPosition.Earliest,
        crypto_failure_action=magnetar.ConsumerCryptoFailureAction.CONSUME,
    )
    v1 = client.create_producer(topic, schema=AvroSchema(Order), encryption_key="k", crypto_key_reader=reader)
    v1.send(Order(id="e-1", qty=1, tags=["x"]))
    OrderV2 = order_v2()
    v2 = client.create_producer(topic, schema=AvroSchema(OrderV2), encryption_key="k", crypto_key_reader=reader)
    v2.send(OrderV2(id="e-2", qty=2, tags=[], note="sealed"))
    got = [consumer.receive(10_000) for _ in range(2)]
    assert [m.int_schema_version() for m in got] == [0, 1]
    assert [fields(m.value()) for m in got] == [("e-1", 1, ["x"]), ("e-2", 2, [])]
    assert all(m.encryption_context() is not None for m in got)
    seen = [raw.receive(10_000) for _ in range(2)]
    assert [m.int_schema_version() for m in seen] == [0, 1]
