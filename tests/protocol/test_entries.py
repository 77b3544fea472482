"""R29-R32 of WIRE.md: the entry metadata, the stored entry, the consumer's check, message ids."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgpack
import pytest
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.protocol import commands as c
from magnetar.protocol.batch import decode_batch, encode_batch, make_record
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.compression import CompressionType, decompress
from magnetar.protocol.entry import EntryMeta, decode_entry, encode_entry
from magnetar.protocol.errors import ChecksumError
from magnetar.protocol.message_id import MessageId

from .wire import Wire, admin, batch, open_producer, session

# ---------------------------------------------------------------------------------------------- R29


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD])
def test_r29_meta_has_the_documented_keys_and_payload_is_a_list_of_records(compression: CompressionType) -> None:
    records = [make_record(b"one", {"k": "v"}, "key", 17, 5), make_record(b"two", None, None, 0, 6)]
    before = int(time.time() * 1000)
    meta, payload = encode_batch(records, producer_name="p", first_sequence_id=5, compression=compression)
    assert list(meta) == ["pn", "seq", "n", "crc", "comp", "usize", "pt", "b"]
    # The optional keys: a Key_Shared routing key, a delayed message's deliver-at time, the highest
    # sequence id (R40a), the chunk keys (R41a), a compacted copy's removed indexes (R46c), the
    # encryption keys (R114) and the writer's schema version (R122).
    optional = {"k", "dt", "hs", "uuid", "cid", "cn", "ts", "cx", "ek", "ep", "ea", "sv"}
    assert set(meta) | optional == set(EntryMeta.__annotations__)
    keyed, _ = encode_batch(records, producer_name="p", first_sequence_id=5, key="key", deliver_at=123)
    assert (keyed["k"], keyed["dt"]) == ("key", 123)
    assert (meta["pn"], meta["seq"], meta["n"], meta["comp"], meta["b"]) == ("p", 5, 2, int(compression), True)
    assert meta["crc"] == crc32c(payload)
    assert before <= meta["pt"] <= int(time.time() * 1000)
    raw = decompress(meta["comp"], payload, meta["usize"])
    assert len(raw) == meta["usize"]
    assert msgpack.unpackb(raw, raw=False) == [[b"one", {"k": "v"}, "key", 17, 5], [b"two", {}, None, 0, 6]]
    unbatched, _ = encode_batch(records[:1], producer_name="p", first_sequence_id=5, batched=False)
    assert unbatched["b"] is False


# ---------------------------------------------------------------------------------------------- R30


def test_r30_the_broker_stores_meta_and_payload_as_sent(standalone: StandaloneProcess, topic: str) -> None:
    opaque = b"\xc1\xc1 never decoded by the broker"  # not msgpack: the broker must not care
    meta: dict[str, Any] = {"crc": crc32c(opaque), "n": 1, "pn": "raw"}
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        wire.send(c.send(1, 0, meta, opaque))  # type: ignore[arg-type]
        receipt = wire.next_t(c.SEND_RECEIPT)
        batched_meta, batched_payload = batch(b"a", b"b", seq=1)
        wire.send(c.send(1, 1, batched_meta, batched_payload))
        second = wire.next_t(c.SEND_RECEIPT)
    with Wire(standalone.bookie_address) as bookie:
        stored = bookie.request(c.bk_read(receipt["ledger"], receipt["entry"]))
        stored_batch = bookie.request(c.bk_read(second["ledger"], second["entry"]))
    assert stored["code"] == c.BK_OK and stored["data"] == encode_entry(meta, opaque)  # type: ignore[arg-type]
    assert decode_entry(stored["data"]) == (meta, opaque)
    assert decode_entry(stored_batch["data"]) == (batched_meta, batched_payload)
    assert msgpack.unpackb(stored_batch["data"], raw=False) == [batched_meta, batched_payload]  # the layout


def test_r30_decode_entry_reads_what_encode_entry_wrote() -> None:
    meta, payload = batch(b"x", b"y")
    data = encode_entry(meta, payload)
    assert data == msgpack.packb([meta, payload], use_bin_type=True)
    assert decode_entry(data) == (meta, payload)
    with pytest.raises((TypeError, ValueError)):
        decode_entry(msgpack.packb([meta, payload, "extra"], use_bin_type=True))


# ---------------------------------------------------------------------------------------------- R31


def test_r31_the_consumer_checks_the_crc_before_decoding() -> None:
    """The client side (dropping and negatively acknowledging such an entry) is in
    tests/client/test_client_consumer.py::test_entry_with_bad_crc_is_dropped_and_negatively_acked."""
    meta, payload = batch(b"x")
    assert [r[0] for r in decode_batch(meta, payload)] == [b"x"]
    garbage = b"\xc1\xc1\xc1"  # would fail msgpack decoding: the CRC check must come first
    with pytest.raises(ChecksumError):
        decode_batch(meta, garbage)
    with pytest.raises(ChecksumError):
        decode_batch({**meta, "crc": meta["crc"] ^ 1}, payload)


# ---------------------------------------------------------------------------------------------- R32


def test_r32_message_id_text_form() -> None:
    mid = MessageId(-1, 12, 34, -1)
    assert str(mid) == "(12,34,-1,-1)" and mid.serialize() == b"12:34:-1:-1"  # Pulsar's str(); R32's form
    assert MessageId.parse("12:34:-1:-1") == mid and MessageId.parse(str(mid)) == mid
    assert MessageId.parse(str(MessageId(3, 1, 2, 4))) == MessageId(3, 1, 2, 4)
    with pytest.raises(ValueError):
        MessageId.parse("12:34")


def test_r32_partition_and_batch_are_minus_one_unless_partitioned_and_batched(
    standalone: StandaloneProcess, topic: str
) -> None:
    partitioned = topic + "-p"
    admin(standalone, "PUT", f"/admin/v2/persistent/{partitioned.removeprefix('persistent://')}/partitions", 2)
    client = magnetar.Client(standalone.service_url)
    try:
        single = client.create_producer(topic, batching_enabled=False).send(b"alone")
        assert (single.partition(), single.batch_index()) == (-1, -1)
        assert single.serialize() == f"{single.ledger_id()}:{single.entry_id()}:-1:-1".encode()
        batched = client.create_producer(topic, batching_max_publish_delay_ms=60_000)
        ids: list[MessageId] = []
        done = threading.Event()

        def sent(result: Any, msg_id: MessageId | None) -> None:
            assert msg_id is not None, result
            ids.append(msg_id)
            if len(ids) == 2:
                done.set()

        batched.send_async(b"first", sent)
        batched.send_async(b"second", sent)
        batched.flush()
        assert done.wait(10)
        assert sorted((m.partition(), m.batch_index()) for m in ids) == [(-1, 0), (-1, 1)]
        assert len({m.position for m in ids}) == 1  # one entry
        on_partition = client.create_producer(partitioned, batching_enabled=False).send(b"p")
        assert on_partition.partition() in (0, 1) and on_partition.batch_index() == -1
    finally:
        client.close()
