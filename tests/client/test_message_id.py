"""``MessageId`` in pulsar-client 3.x's shape (issue 16): constructor order, accessor methods,
``earliest``/``latest``, ``serialize``/``deserialize(data, topic=...)``, ``wrap``, ordering, hashing
and ``str()``; then on a real standalone, ids that round-trip through bytes still acknowledge and
seek, and ``topic=`` picks the topic of a consumer on several topics (where a bare id is refused).
"""

from __future__ import annotations

import inspect
import pickle
import uuid

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar import InitialPosition, MessageId

pytestmark = pytest.mark.timeout(120)


# --------------------------------------------------------------------------- shape (no broker needed)


def test_constructor_takes_pulsars_order_and_defaults() -> None:
    params = inspect.signature(MessageId.__init__).parameters
    assert list(params)[1:] == ["partition", "ledger_id", "entry_id", "batch_index"]
    assert all(p.default == -1 for name, p in params.items() if name != "self")
    mid = MessageId(2, 5, 9, 3)
    assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (2, 5, 9, 3)
    kw = MessageId(ledger_id=5, entry_id=9)
    assert (kw.partition(), kw.ledger_id(), kw.entry_id(), kw.batch_index()) == (-1, 5, 9, -1)
    blank = MessageId()
    assert (blank.partition(), blank.ledger_id(), blank.entry_id(), blank.batch_index()) == (-1, -1, -1, -1)


def test_accessors_are_methods_not_attributes() -> None:
    for name in ("ledger_id", "entry_id", "partition", "batch_index", "serialize"):
        assert inspect.isfunction(inspect.getattr_static(MessageId, name)), name
    assert isinstance(inspect.getattr_static(MessageId, "deserialize"), staticmethod)
    assert isinstance(inspect.getattr_static(MessageId, "wrap"), classmethod)


def test_str_is_pulsars_parenthesised_form_and_parse_reads_both_forms() -> None:
    mid = MessageId(1, 12, 34, 5)
    assert str(mid) == "(12,34,1,5)"
    assert MessageId.parse(str(mid)) == mid and MessageId.parse("12:34:1:5") == mid
    assert "ledger_id=12" in repr(mid)
    for bad in ("12:34", "(1,2,3)", "a:b:c:d", ""):
        with pytest.raises(ValueError):
            MessageId.parse(bad)


def test_earliest_and_latest_bound_every_id() -> None:
    assert isinstance(MessageId.earliest, MessageId) and isinstance(MessageId.latest, MessageId)
    assert str(MessageId.earliest) == "(-1,-1,-1,-1)"
    assert MessageId.latest.partition() == -1 and MessageId.latest.ledger_id() == 2**63 - 1
    real = MessageId(-1, 0, 0, 0)
    assert MessageId.earliest < real < MessageId.latest


def test_ordering_is_ledger_entry_batch_and_equality_takes_the_partition_in() -> None:
    ids = [MessageId(-1, 3, 0, 1), MessageId(-1, 1, 9, -1), MessageId(-1, 3, 0, 0), MessageId(-1, 2, 0, -1)]
    assert sorted(ids) == [ids[1], ids[3], ids[2], ids[0]]
    a, b = MessageId(0, 4, 4, -1), MessageId(1, 4, 4, -1)
    assert a != b and not a < b and not b < a and not a <= b and not a >= b  # same place, other partition
    assert MessageId(0, 4, 4, -1) <= a and a >= MessageId(0, 4, 4, -1) and a > MessageId(0, 4, 3, 7)
    assert (a == "4:4:0:-1") is False and a != object()


def test_equal_ids_hash_equal_and_key_dicts() -> None:
    a, b = MessageId(2, 7, 8, 1), MessageId(2, 7, 8, 1)
    assert a is not b and a == b and hash(a) == hash(b)
    assert len({a, b, MessageId(2, 7, 8, 2), MessageId(3, 7, 8, 1)}) == 3
    assert {a: "x"}[b] == "x"


def test_serialize_round_trips_partition_batch_and_first_chunk() -> None:
    for mid in (MessageId(), MessageId(3, 10, 20, 4), MessageId(-1, 10, 20).with_first_chunk(10, 17)):
        data = mid.serialize()
        assert isinstance(data, bytes)
        again = MessageId.deserialize(data)
        assert again == mid and again.first_chunk == mid.first_chunk and again.topic is None
    assert MessageId.deserialize(bytearray(b"1:2:-1:-1")) == MessageId(-1, 1, 2)
    with pytest.raises(ValueError):
        MessageId.deserialize(b"not an id")


def test_deserialize_takes_a_topic_and_topic_name_sets_one() -> None:
    assert list(inspect.signature(MessageId.deserialize).parameters) == ["message_id_bytes", "topic"]
    mid = MessageId.deserialize(MessageId(-1, 1, 2).serialize(), topic="persistent://public/default/a")
    assert mid.topic == "persistent://public/default/a" and mid == MessageId(-1, 1, 2)
    other = MessageId(-1, 1, 2)
    other.topic_name("persistent://public/default/b")
    assert other.topic == "persistent://public/default/b"


def test_wrap_copies_and_refuses_what_is_not_an_id() -> None:
    mid = MessageId(1, 2, 3, 4).with_first_chunk(2, 1)
    wrapped = MessageId.wrap(mid)
    assert wrapped == mid and wrapped is not mid and wrapped.first_chunk == (2, 1)
    with pytest.raises(TypeError):
        MessageId.wrap(b"1:2:3:4")


def test_ids_pickle_with_their_first_chunk_and_topic() -> None:
    mid = MessageId.deserialize(b"5:6:1:-1;5:2", topic="t")
    again = pickle.loads(pickle.dumps(mid))
    assert again == mid and again.first_chunk == (5, 2) and again.topic == "t"


# --------------------------------------------------------------------------- on a real standalone


def test_send_receive_and_serialized_ids_agree(standalone: StandaloneProcess, topic: str) -> None:
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        receipts: list[MessageId] = []
        for i in range(3):
            producer.send_async(b"m%d" % i, lambda res, mid: receipts.append(mid))
        producer.flush()
        sent = sorted(receipts)
        got = [consumer.receive(timeout_millis=10_000) for _ in range(3)]
        assert [m.message_id() for m in got] == sent
        assert [m.message_id().batch_index() for m in got] == [0, 1, 2]
        assert all(m.message_id().partition() == -1 for m in got)
        # Acknowledge by ids that went through bytes (as an application storing them would).
        for m in got:
            consumer.acknowledge(MessageId.deserialize(m.message_id().serialize()))
        consumer.close()
        after = client.create_producer(topic, batching_enabled=False).send(b"after")
        again = client.subscribe(topic, "s")
        first = again.receive(timeout_millis=10_000)
        assert first.data() == b"after" and first.message_id() == after  # the acked batch stays acked
        again.seek(MessageId.deserialize(sent[0].serialize()))
        # Back into the batch's entry, after the message sought (as pulsar-client): its second message.
        back = again.receive(timeout_millis=10_000)
        assert back.message_id().position == sent[0].position and back.data() == b"m1"


def test_deserialize_topic_tells_a_multi_topic_consumer_which_topic(standalone: StandaloneProcess) -> None:
    a = f"persistent://public/default/mid-a-{uuid.uuid4().hex[:8]}"
    b = f"persistent://public/default/mid-b-{uuid.uuid4().hex[:8]}"
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe([a, b], "s", initial_position=InitialPosition.Earliest)
        for t in (a, b):
            producer = client.create_producer(t, batching_enabled=False)
            producer.send(t.encode())
            producer.close()
        got = {m.topic_name(): m for m in (consumer.receive(timeout_millis=10_000) for _ in range(2))}
        assert set(got) == {a, b}
        stored = {t: (m.message_id().serialize(), t) for t, m in got.items()}
        # Both topics are unpartitioned: a bare id (partition -1) could be either's.
        with pytest.raises(magnetar.OperationNotSupported):
            consumer.acknowledge(MessageId.deserialize(stored[a][0]))
        consumer.acknowledge(MessageId.deserialize(stored[a][0], topic=a))
        consumer.close()
        again = client.subscribe([a, b], "s")
        left = again.receive(timeout_millis=10_000)
        assert left.topic_name() == b and left.data() == b.encode()
