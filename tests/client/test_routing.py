"""Partitioned topics routed as Pulsar routes them: hashes, routing modes, added partitions.

The hash vectors were computed outside Python: Java's own ``String.hashCode()`` (OpenJDK, a
throw-away ``H.java``) and Austin Appleby's reference ``MurmurHash3_x86_32`` in C (seed 0, over the
UTF-8 bytes), each masked with ``Integer.MAX_VALUE`` as Pulsar's ``JavaStringHash`` and
``Murmur3Hash32`` mask, then ``% n`` for the partition tables. Known public values among them:
``"hello".hashCode() == 99162322``, ``"polygenelubricants".hashCode() == Integer.MIN_VALUE``,
Murmur3 ``"hello" == 0x248bfa47`` and ``"The quick brown fox jumps over the lazy dog" == 0x2e4ff723``.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import pytest
from tests.support.admin import topic_path
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar
from magnetar import HashingScheme, PartitionsRoutingMode
from magnetar.broker.subscriptions.dispatchers.key_hash import key_hash
from magnetar.client.producer.producer import ProducerConfig
from magnetar.client.producer.routing import (
    CustomRouter,
    RoundRobinRouter,
    SinglePartitionRouter,
    java_string_key_hash,
    murmur3_key_hash,
    partition_for_key,
)
from magnetar.protocol.errors import MagnetarError, Unsupported
from magnetar.protocol.hashing import java_string_hash, murmur3_32

PARTITION_COUNTS = (2, 3, 4, 7, 16)

# key -> (Java's String.hashCode(), partitions for n in PARTITION_COUNTS), from OpenJDK.
JAVA_VECTORS: dict[str, tuple[int, tuple[int, ...]]] = {
    "": (0, (0, 0, 0, 0, 0)),
    "a": (97, (1, 1, 1, 6, 1)),
    "hello": (99162322, (0, 1, 2, 0, 2)),
    "hello world": (1794106052, (0, 2, 0, 4, 4)),
    "polygenelubricants": (-2147483648, (0, 0, 0, 0, 0)),
    "order-17": (1234255109, (1, 2, 1, 3, 5)),
    "user-1": (-836031825, (1, 2, 3, 3, 15)),
    "key-0": (101943362, (0, 2, 2, 3, 2)),
    "key-1": (101943363, (1, 0, 3, 4, 3)),
    "key-2": (101943364, (0, 1, 0, 5, 4)),
    "key-3": (101943365, (1, 2, 1, 6, 5)),
    "\u00e9": (233, (1, 2, 1, 2, 9)),
    "caf\u00e9": (3045921, (1, 0, 1, 4, 1)),
    "\u65e5\u672c": (835047, (1, 0, 3, 3, 7)),
    "\U0001f600": (1772899, (1, 1, 3, 2, 3)),  # two UTF-16 surrogates, as Java counts it
    "Aa": (2112, (0, 0, 0, 5, 0)),
    "BB": (2112, (0, 0, 0, 5, 0)),
}

# key -> (unsigned Murmur3 x86_32 of the UTF-8 bytes, seed 0; partitions for n in PARTITION_COUNTS), from C.
MURMUR3_VECTORS: dict[str, tuple[int, tuple[int, ...]]] = {
    "": (0, (0, 0, 0, 0, 0)),
    "a": (1009084850, (0, 2, 2, 4, 2)),
    "hello": (613153351, (1, 1, 3, 6, 7)),
    "hello world": (1586663183, (1, 2, 3, 0, 15)),
    "The quick brown fox jumps over the lazy dog": (776992547, (1, 2, 3, 2, 3)),
    "order-17": (63080384, (0, 2, 0, 3, 0)),
    "user-1": (4171401059, (1, 0, 3, 5, 3)),
    "key-0": (3812096191, (1, 2, 3, 6, 15)),
    "key-1": (2561742240, (0, 1, 0, 6, 0)),
    "key-2": (4093138188, (0, 1, 0, 4, 12)),
    "key-3": (2034982562, (0, 2, 2, 4, 2)),
    "\u00e9": (269551495, (1, 1, 3, 3, 7)),
    "caf\u00e9": (605818632, (0, 0, 0, 6, 8)),
    "\u65e5\u672c": (3302619458, (0, 0, 2, 3, 2)),
    "\U0001f600": (3199479546, (0, 1, 2, 2, 10)),
}


# ------------------------------------------------------------------ hash vectors


@pytest.mark.parametrize("key", list(JAVA_VECTORS))
def test_java_string_hash_is_javas_string_hashcode(key: str) -> None:
    java, partitions = JAVA_VECTORS[key]
    assert java_string_hash(key) == java
    assert java_string_key_hash(key) == java & 0x7FFFFFFF
    got = tuple(partition_for_key(key, n, HashingScheme.JavaStringHash) for n in PARTITION_COUNTS)
    assert got == partitions


@pytest.mark.parametrize("key", list(MURMUR3_VECTORS))
def test_murmur3_32_hash_is_the_reference_murmur3(key: str) -> None:
    unsigned, partitions = MURMUR3_VECTORS[key]
    assert murmur3_32(key.encode()) == unsigned
    assert murmur3_key_hash(key) == unsigned & 0x7FFFFFFF
    got = tuple(partition_for_key(key, n, HashingScheme.Murmur3_32Hash) for n in PARTITION_COUNTS)
    assert got == partitions


def test_the_broker_key_shared_slot_uses_the_same_murmur3() -> None:
    assert key_hash("hello") == (613153351 & 0x7FFFFFFF) % 65536


def test_java_string_hash_is_the_default_and_boost_hash_is_refused() -> None:
    assert partition_for_key("user-1", 16) == 15  # JavaStringHash (Murmur3 would say 3)
    with pytest.raises(Unsupported, match="BoostHash"):
        partition_for_key("user-1", 16, HashingScheme.BoostHash)
    with pytest.raises(Unsupported, match="BoostHash"):
        ProducerConfig(hashing_scheme=HashingScheme.BoostHash)


# ------------------------------------------------------------------ routers


def test_round_robin_hashes_keys_and_moves_per_batch_and_takes_in_added_partitions() -> None:
    r = RoundRobinRouter(2, start=1, hashing_scheme=HashingScheme.Murmur3_32Hash)
    assert r.choose("key-0") == 1 and r.choose("key-1") == 0
    assert r.choose(None) == 1
    r.batch_sent(0)  # a keyed batch elsewhere does not move the round robin
    assert r.choose(None) == 1
    r.batch_sent(1)
    assert r.choose(None) == 0
    r.resize(4)
    assert r.choose("key-0") == 3  # keys hash over the new count, as in Pulsar
    seen = []
    for _ in range(4):
        seen.append(r.choose(None))
        r.batch_sent(seen[-1])
    assert seen == [0, 1, 2, 3]


def test_single_partition_keeps_unkeyed_messages_on_one_partition() -> None:
    r = SinglePartitionRouter(4, chosen=2)
    for _ in range(10):
        r.batch_sent(r.choose(None))
    assert r.choose(None) == 2
    assert r.choose("key-1") == 3  # keyed: JavaStringHash, not the single partition
    r.resize(7)
    assert r.choose(None) == 2 and r.choose("key-1") == 4


def test_custom_router_sees_a_pulsar_like_message_and_its_answer_is_checked() -> None:
    seen: list[tuple[Any, ...]] = []

    def router(msg: Any, n: int) -> int:
        seen.append((msg.data(), msg.properties(), msg.partition_key(), msg.ordering_key(), msg.event_timestamp(), n))
        return int(msg.properties().get("p", "0"))

    r = CustomRouter(router, 3)
    assert r.route(b"x", {"p": "2"}, "k", 5, "o") == 2
    assert r.route(b"y", None, None, None, None) == 0
    assert seen == [(b"x", {"p": "2"}, "k", "o", 5, 3), (b"y", {}, "", "", 0, 3)]
    with pytest.raises(MagnetarError, match="chose partition 3, but the topic has 3 partitions"):
        r.route(b"z", {"p": "3"}, None, None, None)
    with pytest.raises(MagnetarError, match="message_router failed: ValueError"):
        r.route(b"z", {"p": "nope"}, None, None, None)


# ------------------------------------------------------------------ create_producer options


def test_create_producer_takes_pulsar_client_arguments_in_their_order() -> None:
    # pulsar-client 3.x pulsar/__init__.py Client.create_producer, in order (message_router last).
    pulsar_order = [
        "topic",
        "producer_name",
        "schema",
        "initial_sequence_id",
        "send_timeout_millis",
        "compression_type",
        "max_pending_messages",
        "max_pending_messages_across_partitions",
        "block_if_queue_full",
        "batching_enabled",
        "batching_max_messages",
        "batching_max_allowed_size_in_bytes",
        "batching_max_publish_delay_ms",
        "chunking_enabled",
        "message_routing_mode",
        "lazy_start_partitioned_producers",
        "properties",
        "batching_type",
        "encryption_key",
        "crypto_key_reader",
        "access_mode",
        "message_router",
    ]
    for fn in (magnetar.Client.create_producer, magnetar.asyncio.Client.create_producer):
        params = list(inspect.signature(fn).parameters.values())[1:]
        positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert positional == pulsar_order
        assert [p.name for p in params if p.kind is p.KEYWORD_ONLY] == ["hashing_scheme"]
    defaults = inspect.signature(magnetar.Client.create_producer).parameters
    assert defaults["block_if_queue_full"].default is False
    assert defaults["max_pending_messages_across_partitions"].default == 50000
    assert defaults["message_routing_mode"].default is PartitionsRoutingMode.RoundRobinDistribution


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("schema", type("JsonSchema", (), {})()),  # not a magnetar.schema.Schema: pulsar-client's check
    ],
)
def test_options_of_the_wrong_type_are_refused_by_name(option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=option.split("_")[0]):
        ProducerConfig(**{option: value})


def test_routing_options_are_checked_and_combined_as_pulsar_does() -> None:
    with pytest.raises(ValueError, match="CustomPartition needs a message_router"):
        ProducerConfig(message_routing_mode=PartitionsRoutingMode.CustomPartition)
    cfg = ProducerConfig(message_router=lambda msg, n: 0)  # setMessageRouter implies CustomPartition
    assert cfg.message_routing_mode is PartitionsRoutingMode.CustomPartition
    chunked = ProducerConfig(chunking_enabled=True)
    assert chunked.chunking_enabled and not chunked.batching_enabled
    assert ProducerConfig(initial_sequence_id=0).initial_sequence_id is None  # pulsar-client: `if initial_sequence_id:`
    cfg = ProducerConfig(max_pending_messages=1000, max_pending_messages_across_partitions=50000)
    assert cfg.max_pending_per_partition(100) == 500 and cfg.max_pending_per_partition(4) == 1000


# ------------------------------------------------------------------ on a standalone


def partitioned(standalone: StandaloneProcess, topic: str, n: int, *, update: bool = False) -> None:
    status, body = admin_call(standalone, "POST" if update else "PUT", topic_path(topic) + "/partitions", n)
    assert status == 204, body


def receive_all(consumer: magnetar.Consumer, n: int) -> list[magnetar.Message]:
    out = [consumer.receive(10_000) for _ in range(n)]
    for m in out:
        consumer.acknowledge(m)
    return out


KEYS = ["key-0", "key-1", "key-2", "key-3", "order-17", "user-1", "hello", "caf\u00e9"]


@pytest.mark.parametrize(
    ("scheme", "vectors"),
    [(HashingScheme.JavaStringHash, JAVA_VECTORS), (HashingScheme.Murmur3_32Hash, MURMUR3_VECTORS)],
)
def test_keys_land_on_the_partitions_a_pulsar_producer_picks(
    standalone: StandaloneProcess, topic: str, scheme: HashingScheme, vectors: dict[str, Any]
) -> None:
    partitioned(standalone, topic, 4)
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False, hashing_scheme=scheme)
        ids = {key: producer.send(key.encode(), partition_key=key) for key in KEYS}
        expected = {key: vectors[key][1][PARTITION_COUNTS.index(4)] for key in KEYS}
        assert {key: i.partition() for key, i in ids.items()} == expected
        got = {m.partition_key(): m.message_id().partition() for m in receive_all(consumer, len(KEYS))}
        assert got == expected


def test_round_robin_keeps_each_batch_on_one_partition_and_spreads_the_batches(
    standalone: StandaloneProcess, topic: str
) -> None:
    partitioned(standalone, topic, 4)
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=5, batching_max_publish_delay_ms=60_000)
        ids: list[Any] = []
        for i in range(20):
            producer.send_async(f"m{i}".encode(), lambda res, mid: ids.append(mid))
        producer.flush()
        assert len(ids) == 20
        assert sorted(Counter(i.partition() for i in ids).values()) == [5, 5, 5, 5]
        assert len({(i.partition(), i.ledger_id(), i.entry_id()) for i in ids}) == 4  # four entries: four batches
        unbatched = client.create_producer(topic, batching_enabled=False)
        spread = Counter(unbatched.send(b"u").partition() for _ in range(8))
        assert sorted(spread.values()) == [2, 2, 2, 2]


def test_use_single_partition_sends_every_unkeyed_message_to_one_partition(
    standalone: StandaloneProcess, topic: str
) -> None:
    partitioned(standalone, topic, 4)
    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(
            topic, batching_enabled=False, message_routing_mode=PartitionsRoutingMode.UseSinglePartition
        )
        assert len({producer.send(b"u").partition() for _ in range(12)}) == 1
        assert producer.send(b"k", partition_key="key-1").partition() == 3  # keyed still by hash


def test_a_custom_message_router_decides_every_message(standalone: StandaloneProcess, topic: str) -> None:
    partitioned(standalone, topic, 3)

    def by_region(msg: Any, num_partitions: int) -> int:
        return {"eu": 0, "us": 1}.get(msg.properties().get("region", ""), num_partitions - 1)

    with magnetar.Client(standalone.service_url) as client:
        producer = client.create_producer(topic, message_router=by_region)
        sent = [
            producer.send(b"1", {"region": "eu"}, partition_key="key-1"),  # the router wins over the key
            producer.send(b"2", {"region": "us"}),
            producer.send(b"3"),
        ]
        assert [i.partition() for i in sent] == [0, 1, 2]
        bad = client.create_producer(topic, message_router=lambda msg, n: n)
        with pytest.raises(MagnetarError, match="message_router chose partition 3"):
            bad.send(b"x")
        results: list[Any] = []
        bad.send_async(b"y", lambda res, mid: results.append(res))
        wait_for("the failed send's callback", lambda: bool(results), 15.0, interval=0.02)
        assert isinstance(results[0], MagnetarError)


def test_initial_sequence_id_numbers_the_first_message_one_after_it(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False, initial_sequence_id=41)
        producer.send(b"a")
        producer.send(b"b")
        assert producer.last_sequence_id() == 43
        assert [m.sequence_id() for m in receive_all(consumer, 2)] == [42, 43]


def test_options_magnetar_lacks_fail_at_create_time(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        with pytest.raises(ValueError, match="crypto_key_reader"):  # encryption needs the key reader
            client.create_producer(topic, encryption_key="k")
        with pytest.raises(Unsupported, match="BoostHash"):
            client.create_producer(topic, hashing_scheme=HashingScheme.BoostHash)


def test_producers_and_consumers_pick_up_added_partitions_without_restarting(
    standalone: StandaloneProcess, topic: str
) -> None:
    """2 partitions, a producer and a consumer running, updated to 4: messages reach 2 and 3 and are consumed.

    The consumer's client looks for new partitions less often than the producer's, so the producer
    writes to partitions 2 and 3 before the consumer has subscribed them: those messages must not be
    lost (an added partition is subscribed from its earliest message).
    """
    partitioned(standalone, topic, 2)
    with (
        magnetar.Client(standalone.service_url, partitions_update_interval=0.1) as pclient,
        magnetar.Client(standalone.service_url, partitions_update_interval=1.0) as cclient,
    ):
        consumer = cclient.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared)
        producer = pclient.create_producer(topic, batching_enabled=False)
        before = [producer.send(f"before-{i}".encode()) for i in range(4)]
        assert {i.partition() for i in before} == {0, 1}
        assert len(receive_all(consumer, 4)) == 4

        partitioned(standalone, topic, 4, update=True)
        wait_for(
            "the producer to attach to partitions 2 and 3",
            lambda: len(producer._p.partitions) == 4,
            15.0,
            interval=0.02,
        )
        assert len(consumer._c.partitions) == 2  # the consumer has not looked yet
        after = [producer.send(f"after-{i}".encode()) for i in range(8)]
        assert Counter(i.partition() for i in after) == {0: 2, 1: 2, 2: 2, 3: 2}
        assert producer.send(b"keyed", partition_key="key-1").partition() == 3  # keys hash over 4 now

        got = receive_all(consumer, 9)
        assert sorted(m.data() for m in got) == sorted([f"after-{i}".encode() for i in range(8)] + [b"keyed"])
        assert {m.message_id().partition() for m in got} == {0, 1, 2, 3}
        assert {p.partition for p in consumer._c.partitions} == {0, 1, 2, 3}
        with pytest.raises(magnetar.Timeout):
            consumer.receive(200)
