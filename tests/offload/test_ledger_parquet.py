"""The offloaded ledger format: stored entries -> one Parquet object + index -> the same bytes back.

The entries are built as the client builds them (``protocol.batch.encode_batch``, the producer's
codecs, ``client.producer.chunking.split_payload``, ``client.encryption`` sealing, a schema version
stamped in meta) and stored as the broker stores them (``protocol.entry.encode_entry``). Every kind
must come back byte for byte, the object must read as plain Parquet with the Spark source's
columns, a read must fetch only the row groups it needs, and a damaged byte must be caught.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from tests.offload.conftest import PrefixedStore
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.client.encryption.crypto import CryptoKeyReader, Decryptor, Encryptor
from magnetar.client.producer.chunking import chunk_uuid, split_payload
from magnetar.columnar.message_rows import COLUMNS, ENCRYPTION_KEYS, UNREADABLE, StoredEntry, entry_rows
from magnetar.jobs.admin_client import AdminClient
from magnetar.jobs.schema_versions import SchemaVersion
from magnetar.jobs.topic_plan import LedgerRange, plan_reads
from magnetar.jobs.value_schema import TypedValues, typed_values
from magnetar.offload.blob_store import put_verified
from magnetar.offload.errors import CorruptObject
from magnetar.offload.ledger_parquet import (
    ENTRY_META_COLUMN,
    RAW_PAYLOAD_COLUMN,
    AsyncLedgerObjectReader,
    LedgerIndex,
    LedgerObjectReader,
    check_object,
    entry_at_time,
    read_entries,
    write_ledger,
)
from magnetar.protocol.batch import decode_batch, encode_batch, make_record
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.compression import CompressionType
from magnetar.protocol.entry import EntryMeta, decode_entry, encode_entry
from magnetar.schema import AvroSchema, Integer, Record, String
from magnetar.schema.info import SchemaType

TOPIC = "persistent://public/default/offloaded"
LEDGER = 42
MIB = 1024 * 1024
T0 = 1_790_000_000_000  # publish times are set here, so seeks by time know what to expect

Entry = tuple[int, bytes]


def stored(meta: EntryMeta, payload: bytes, publish_ms: int | None = None) -> bytes:
    if publish_ms is not None:
        meta["pt"] = publish_ms
    return encode_entry(meta, payload)


def batch(entry_id: int, n: int = 5, **options: Any) -> bytes:
    """A producer's batch of ``n`` keyed messages with properties and event times."""
    records = [
        make_record(
            f"e{entry_id}-m{i}".encode(), {"i": str(i), "e": str(entry_id)}, f"key-{i % 3}", T0 - i, 10 * entry_id + i
        )
        for i in range(n)
    ]
    meta, payload = encode_batch(records, producer_name="prod-1", first_sequence_id=10 * entry_id, **options)
    return stored(meta, payload, T0 + entry_id)


def write(entries: list[Entry], row_group_bytes: int = 1 << 20, **options: Any) -> tuple[bytes, LedgerIndex]:
    out = io.BytesIO()
    index = write_ledger(
        entries, out, topic=TOPIC, partition=-1, ledger_id=LEDGER, row_group_bytes=row_group_bytes, **options
    )
    data = out.getvalue()
    assert (len(data), index.entry_count) == (index.size, len(entries))
    check_object(data, index)
    return data, LedgerIndex.from_bytes(index.to_bytes())


def round_trip(entries: list[Entry], **options: Any) -> tuple[bytes, LedgerIndex]:
    data, index = write(entries, **options)
    first, last = entries[0][0], entries[-1][0]
    assert read_entries(io.BytesIO(data), index, first, last) == entries
    return data, index


def raw_payload_rows(data: bytes) -> list[bool]:
    """Per entry (its first row): whether the object had to keep the stored payload."""
    table = pq.read_table(io.BytesIO(data), columns=[ENTRY_META_COLUMN, RAW_PAYLOAD_COLUMN]).to_pylist()
    return [r[RAW_PAYLOAD_COLUMN] is not None for r in table if r[ENTRY_META_COLUMN] is not None]


@pytest.fixture(scope="module")
def rsa_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(public key path, private key path) of a fresh RSA pair, in the PEM files a producer reads."""
    d: Path = tmp_path_factory.mktemp("keys")
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub, priv = d / "k.pub", d / "k.pem"
    priv.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pub.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return str(pub), str(priv)


def test_plain_batches_come_back_byte_exact_from_their_rows_alone() -> None:
    entries = [(e, batch(e)) for e in range(20)]
    data, index = round_trip(entries, row_group_bytes=1024)
    assert len(index.row_groups) > 3 and index.message_count == 100
    assert raw_payload_rows(data) == [False] * 20  # rebuilt from the rows: nothing stored twice


def test_one_message_sent_without_batching() -> None:
    meta, payload = encode_batch(
        [make_record(b"alone", None, "k", 0, 7)], producer_name="p", first_sequence_id=7, batched=False, key="k"
    )
    meta2, payload2 = encode_batch(
        [make_record(b"", {"x": "y"}, None, 5, 8)], producer_name="p", first_sequence_id=8, batched=False
    )
    entries = [(0, stored(meta, payload, T0)), (1, stored(meta2, payload2, T0))]
    data, _ = round_trip(entries)
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    assert [r["batch_index"] for r in rows] == [-1, -1]
    assert [r["payload"] for r in rows] == [b"alone", b""]
    assert raw_payload_rows(data) == [False, False]


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZLib, CompressionType.ZSTD])
def test_compressed_batches_keep_their_stored_payload_and_decompressed_rows(codec: CompressionType) -> None:
    entries = [(e, batch(e, n=30, compression=codec)) for e in range(4)]
    data, _ = round_trip(entries)
    assert raw_payload_rows(data) == [True] * 4
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    assert rows[31]["payload"] == b"e1-m1" and rows[31]["properties"] == [("i", "1"), ("e", "1")]


def test_null_values_and_empty_payloads_stay_apart() -> None:
    records = [
        make_record(None, {}, "gone", 0, 0),
        make_record(b"", {}, "empty", 0, 1),
        make_record(b"x", {}, None, 0, 2),
    ]
    meta, payload = encode_batch(records, producer_name="p", first_sequence_id=0)
    entries = [(0, stored(meta, payload, T0))]
    data, _ = round_trip(entries)
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    assert [r["payload"] for r in rows] == [None, b"", b"x"]
    assert [r["key"] for r in rows] == ["gone", "empty", None]
    assert raw_payload_rows(data) == [False]


def test_chunks_of_a_large_message_are_opaque_rows_stored_once() -> None:
    body = os.urandom(5000)
    meta, payload = encode_batch(
        [make_record(body, {"big": "yes"}, "k", 0, 3)],
        producer_name="p",
        first_sequence_id=3,
        batched=False,
        key="k",
        compression=CompressionType.LZ4,
    )
    chunks = split_payload(meta, payload, 1000, chunk_uuid("p", 3))
    entries = [(e, stored(m, p, T0 + e)) for e, (m, p) in enumerate(chunks)]
    assert len(entries) > 2
    data, _ = round_trip(entries)
    assert raw_payload_rows(data) == [False] * len(entries)  # the row's payload is the chunk itself
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    assert b"".join(r["payload"] for r in rows) == payload


def test_encrypted_entries_stay_sealed_and_open_for_a_key_holder(rsa_keys: tuple[str, str]) -> None:
    pub, priv = rsa_keys
    records = [make_record(f"secret-{i}".encode(), {"i": str(i)}, "k", 0, i) for i in range(3)]
    meta, payload = encode_batch(records, producer_name="p", first_sequence_id=0, key="k")
    sealed = Encryptor(["rsa-key"], CryptoKeyReader(pub, "")).seal(meta, payload)
    plain = batch(1)
    entries = [(0, stored(meta, sealed, T0)), (1, plain)]
    data, index = round_trip(entries)
    assert raw_payload_rows(data) == [False, False]
    assert b"secret-" not in data
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    assert rows[0]["payload"] == sealed and dict(rows[0]["properties"])[ENCRYPTION_KEYS] == "rsa-key"
    ((_, back),) = read_entries(io.BytesIO(data), index, 0, 0)
    got_meta, got_payload = decode_entry(back)
    opened = Decryptor(CryptoKeyReader("", priv)).open(got_meta, got_payload)
    assert [r[0] for r in decode_batch(got_meta, opened, verify=False)] == [b"secret-0", b"secret-1", b"secret-2"]


def test_ordering_keys_custom_sequence_ids_and_delayed_messages() -> None:
    with_ordering_key = [*make_record(b"o", {}, "pk", 0, 100), "ordering"]  # what the producer sends
    meta, payload = encode_batch([with_ordering_key], producer_name="p", first_sequence_id=100, batched=False)
    meta2, payload2 = encode_batch(
        [make_record(b"a", {}, None, 0, 500), make_record(b"b", {}, None, 0, 900)],
        producer_name="p",
        first_sequence_id=1,
        deliver_at=T0 + 60_000,
    )
    meta2["seq"], meta2["hs"] = 500, 900
    entries = [(0, stored(meta, payload, T0)), (1, stored(meta2, payload2, T0))]
    data, _ = round_trip(entries)
    assert raw_payload_rows(data) == [True, False]  # the ordering key has no column: kept as stored


def test_entries_whose_messages_cannot_be_listed_are_kept_whole() -> None:
    """A batch that does not decode (its CRC is good: the broker stored it) and a batch of none."""
    garbage = b"\xc1 not msgpack"
    meta, _ = encode_batch([make_record(b"x", {}, None, 0, 0)], producer_name="p", first_sequence_id=0)
    meta["crc"] = crc32c(garbage)
    empty_meta, empty = encode_batch([], producer_name="p", first_sequence_id=1)
    entries = [(0, stored(meta, garbage, T0)), (1, stored(empty_meta, empty, T0)), (2, batch(2))]
    data, _ = round_trip(entries)
    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    marked = [r for r in rows if UNREADABLE in dict(r["properties"])]
    assert [(r["entry_id"], r["batch_index"], r["payload"]) for r in marked] == [(0, -1, garbage), (1, -1, empty)]
    assert len(rows) == 2 + 5


ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}],
}


def avro(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), record)
    return out.getvalue()


def test_rows_read_as_plain_parquet_with_the_spark_columns_and_the_typed_value() -> None:
    values = TypedValues.merge({TOPIC: [SchemaVersion(0, SchemaType.AVRO, json.dumps(ORDER))]})
    assert values is not None
    records = [make_record(avro({"id": f"o-{i}", "qty": i}), {"p": "v"}, f"k{i}", T0 - 5, i) for i in range(3)]
    meta, payload = encode_batch(records, producer_name="prod-1", first_sequence_id=0)
    meta["sv"] = 0  # the producer's schema stamp
    entries = [(0, stored(meta, payload, T0)), (1, batch(1))]
    data, _ = round_trip(entries, values=values.for_topic(TOPIC))
    table = pq.read_table(io.BytesIO(data))
    assert table.column_names == [*COLUMNS, "schema_version", "value", ENTRY_META_COLUMN, RAW_PAYLOAD_COLUMN]
    rows = table.to_pylist()
    first = rows[0]
    assert (first["topic"], first["partition"], first["ledger_id"], first["entry_id"]) == (TOPIC, -1, LEDGER, 0)
    assert (first["batch_index"], first["key"], first["properties"]) == (0, "k0", [("p", "v")])
    assert first["publish_time"].timestamp() * 1000 == T0 and first["event_time"].timestamp() * 1000 == T0 - 5
    assert (first["producer_name"], first["sequence_id"]) == ("prod-1", 0)
    assert [r["value"] for r in rows[:3]] == [{"id": f"o-{i}", "qty": i} for i in range(3)]
    assert [r["schema_version"] for r in rows] == [0, 0, 0] + [None] * 5
    # The same rows as the Spark source builds from the bookies' copy of the entries.
    spark_rows = [
        row
        for e, raw in entries
        for row in entry_rows(TOPIC, -1, LEDGER, StoredEntry(e, *decode_entry(raw)), values.for_topic(TOPIC))
    ]
    assert [{k: r[k] for k in spark_rows[0]} for r in rows] == spark_rows


class CountingReads(io.BytesIO):
    """The object behind a ranged-read store: every read's (offset, length) is recorded."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, n: int | None = -1) -> bytes:
        at = self.tell()
        out = super().read(n)
        self.reads.append((at, len(out)))
        return out


def test_a_middle_range_reads_only_its_row_groups_and_the_footer() -> None:
    entries = [(e, batch(e, n=10)) for e in range(200)]
    data, index = write(entries, row_group_bytes=4096)
    assert len(index.row_groups) >= 10
    middle = index.row_groups[len(index.row_groups) // 2]
    first, last = middle.first_entry + 1, middle.last_entry + 1  # spans two row groups
    source = CountingReads(data)
    reader = LedgerObjectReader(source, index)
    assert reader.read_entries(first, last) == entries[first : last + 1]
    wanted = index.groups_for(first, last)
    assert len(wanted) == 2
    allowed = [(index.row_groups[i].offset, index.row_groups[i].length) for i in wanted]
    allowed.append((index.footer_offset, index.size - index.footer_offset))
    assert sorted(source.reads) == sorted(allowed)  # one ranged read each, nothing else
    read_bytes = sum(n for _, n in source.reads)
    print(f"\nentries {first}..{last}: {len(source.reads)} reads, {read_bytes} of {index.size} bytes")
    source.reads.clear()
    assert reader.read_entries(0, 0) == entries[:1]  # the footer is read once per reader
    assert source.reads == [(index.row_groups[0].offset, index.row_groups[0].length)]


def test_seek_by_publish_time_reads_one_row_group() -> None:
    entries = [(e, batch(e)) for e in range(100)]  # entry e published at T0 + e
    data, index = write(entries, row_group_bytes=2048)
    assert entry_at_time(index, io.BytesIO(data), T0 + 57) == 57
    assert entry_at_time(index, io.BytesIO(data), T0 - 1000) == 0
    assert entry_at_time(index, io.BytesIO(data), T0 + 100) is None
    source = CountingReads(data)
    assert entry_at_time(index, source, T0 + 57) == 57
    (group,) = [g for g in index.row_groups if g.first_entry <= 57 <= g.last_entry]
    assert sorted(source.reads) == sorted(
        [(group.offset, group.length), (index.footer_offset, index.size - index.footer_offset)]
    )


def test_publish_times_out_of_order_still_seek_to_the_first_entry_at_or_after() -> None:
    # Publish times come from the producers' clocks: two producers' entries interleave.
    times = [T0 + 10, T0 + 3, T0 + 20, T0 + 5, T0 + 30]
    entries = [
        (e, stored(*encode_batch([make_record(b"x", {}, None, 0, e)], producer_name="p", first_sequence_id=e), t))
        for e, t in enumerate(times)
    ]
    data, index = write(entries, row_group_bytes=1)  # one entry per row group
    assert entry_at_time(index, io.BytesIO(data), T0 + 4) == 0
    assert entry_at_time(index, io.BytesIO(data), T0 + 15) == 2
    assert entry_at_time(index, io.BytesIO(data), T0 + 21) == 4


def test_a_corrupted_byte_is_caught_by_its_checksum_never_returned() -> None:
    entries = [(e, batch(e, n=10)) for e in range(60)]
    data, index = write(entries, row_group_bytes=4096)
    victim = index.row_groups[2]
    damaged = bytearray(data)
    damaged[victim.offset + victim.length // 2] ^= 0x01
    with pytest.raises(CorruptObject, match="CRC32C"):
        check_object(bytes(damaged), index)
    with pytest.raises(CorruptObject, match=f"ledger {LEDGER} object: row group 2 CRC32C"):
        read_entries(io.BytesIO(bytes(damaged)), index, victim.first_entry, victim.first_entry)
    # The rest of the object is still served: the damage is confined to what it touched.
    other = index.row_groups[0]
    assert read_entries(io.BytesIO(bytes(damaged)), index, 0, other.last_entry) == entries[: other.last_entry + 1]
    footer = bytearray(data)
    footer[index.footer_offset + 3] ^= 0x80
    with pytest.raises(CorruptObject, match="footer CRC32C"):
        read_entries(io.BytesIO(bytes(footer)), index, 0, 0)
    with pytest.raises(CorruptObject, match="truncated"):
        read_entries(io.BytesIO(data[: victim.offset + 10]), index, victim.first_entry, victim.first_entry)
    with pytest.raises(CorruptObject, match="index unreadable"):
        LedgerIndex.from_bytes(index.to_bytes()[:-5])


def test_entries_out_of_order_or_not_entries_are_refused() -> None:
    with pytest.raises(ValueError, match="entry ids must increase"):
        write([(1, batch(1)), (1, batch(1))])
    with pytest.raises(ValueError, match=f"ledger {LEDGER} entry 2: not a \\[meta, payload\\] entry"):
        write([(1, batch(1)), (2, batch(2)[:-3])])


def test_a_hundred_thousand_messages() -> None:
    entries = [(e, batch(e, n=100)) for e in range(1000)]
    stored_bytes = sum(len(d) for _, d in entries)
    started = time.perf_counter()
    data, index = write(entries, row_group_bytes=1 << 20)
    wrote = time.perf_counter() - started
    started = time.perf_counter()
    back = read_entries(io.BytesIO(data), index, 0, 999)
    read = time.perf_counter() - started
    assert back == entries and index.message_count == 100_000
    print(
        f"\n100,000 messages in 1,000 entries ({stored_bytes / 1e6:.1f} MB stored): object {index.size / 1e6:.2f} MB "
        f"in {len(index.row_groups)} row groups; write {wrote:.2f} s ({stored_bytes / 1e6 / wrote:.1f} MB/s), "
        f"read back byte-exact {read:.2f} s ({stored_bytes / 1e6 / read:.1f} MB/s)"
    )


class Reading(Record):
    sensor = String(required=True)
    value = Integer()


def stored_entries(rng: LedgerRange) -> list[Entry]:
    """The entries of a ledger range exactly as the bookie stores them (no decoding in between)."""

    async def run() -> list[Entry]:
        bookie_id, (host, port) = next(iter(rng.bookies.items()))
        bookie = TcpBookieClient(bookie_id, host, port)
        try:
            return [
                (e, (await bookie.read_entry(rng.ledger_id, e)).data)
                for e in range(rng.first_entry, rng.last_entry + 1)
            ]
        finally:
            await bookie.close()

    return asyncio.run(run())


def ledgers_of(admin: AdminClient, topic: str) -> dict[int, list[Entry]]:
    out: dict[int, list[Entry]] = {}
    for rng in plan_reads(admin, [topic]).ranges:
        out.setdefault(rng.ledger_id, []).extend(stored_entries(rng))
    return out


def test_entries_a_real_broker_stored_come_back_byte_exact(
    standalone: StandaloneProcess, rsa_keys: tuple[str, str]
) -> None:
    """Every kind of entry the client sends, as a real standalone stored it on its bookie."""
    topic = f"persistent://public/default/offload-format-{uuid.uuid4().hex[:8]}"
    typed = f"persistent://public/default/offload-typed-{uuid.uuid4().hex[:8]}"
    pub, _ = rsa_keys
    with magnetar.Client(standalone.service_url) as client:
        batched = client.create_producer(topic, batching_max_publish_delay_ms=50)
        for i in range(200):
            batched.send_async(
                f"b{i}".encode(), None, properties={"i": str(i)}, partition_key=f"k{i % 7}", event_timestamp=T0 + i
            )
        batched.flush()
        lz4 = client.create_producer(topic, compression_type=magnetar.CompressionType.LZ4)
        for i in range(100):
            lz4.send_async(f"compressed {i} ".encode() * 20, None)
        lz4.flush()
        single = client.create_producer(topic, batching_enabled=False)
        single.send(None, partition_key="deleted")  # a null value (a tombstone)
        single.send(b"", properties={"empty": "yes"})
        single.send(b"ordered", ordering_key="ok-1")
        client.create_producer(topic, chunking_enabled=True, batching_enabled=False).send(os.urandom(11 * MIB))
        sealed = client.create_producer(topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, ""))
        sealed.send(b"for key holders only")
        with_schema = client.create_producer(typed, schema=AvroSchema(Reading))
        for i in range(50):
            with_schema.send_async(Reading(sensor=f"s{i % 3}", value=i), None)
        with_schema.flush()
    admin = AdminClient(standalone.admin_url)
    values = typed_values(admin, [typed])
    assert values is not None
    metas: list[EntryMeta] = []
    kept: list[bool] = []
    for name, decoder in ((topic, None), (typed, values.for_topic(typed))):
        for ledger_id, entries in ledgers_of(admin, name).items():
            out = io.BytesIO()
            index = write_ledger(
                entries, out, topic=name, partition=-1, ledger_id=ledger_id, row_group_bytes=64 * 1024, values=decoder
            )
            data = out.getvalue()
            check_object(data, index)
            assert read_entries(io.BytesIO(data), index, entries[0][0], entries[-1][0]) == entries
            rows = pq.read_table(io.BytesIO(data)).to_pylist()
            spark_rows = [
                row
                for e, raw in entries
                for row in entry_rows(name, -1, ledger_id, StoredEntry(e, *decode_entry(raw)), decoder)
            ]
            assert [{k: r[k] for k in spark_rows[0]} for r in rows] == spark_rows
            metas.extend(decode_entry(raw)[0] for _, raw in entries)
            kept.extend(raw_payload_rows(data))
            if name == typed:
                assert {r["value"]["sensor"] for r in rows} == {"s0", "s1", "s2"}
                assert sorted(r["value"]["value"] for r in rows) == list(range(50))
    # What was stored is what was meant: every kind is there, and only what the rows cannot give
    # back (the compressed batch, the message with an ordering key) keeps its stored payload.
    assert sum(1 for m in metas if m.get("cn", 1) > 1) == 3
    assert sum(1 for m in metas if "ek" in m) == 1
    assert [m.get("sv") for m in metas].count(0) >= 1
    compressed = [m.get("comp", 0) != 0 for m in metas]
    assert sum(compressed) >= 1 and sum(1 for m in metas if m.get("b") is False) >= 3
    assert sum(kept) == sum(compressed) + 1


async def test_reads_through_an_object_stores_ranged_reads(any_store: PrefixedStore) -> None:
    """The object and its index in a real store (SeaweedFS's S3, the filesystem); reads fetch
    the footer and the row groups they need, nothing else, and a damaged object is refused."""
    entries = [(e, batch(e, n=10)) for e in range(120)]
    data, index = write(entries, row_group_bytes=8192)
    store, key = any_store.store, any_store.key(f"ledger-{LEDGER}.parquet")
    await put_verified(store, key, data)  # the store's own read-back agrees with the index's CRC32C
    await put_verified(store, any_store.key(f"_ledger-{LEDGER}.index"), index.to_bytes())
    stored_index = LedgerIndex.from_bytes(await store.read_all(any_store.key(f"_ledger-{LEDGER}.index")))
    assert (stored_index.size, stored_index.crc32c) == (index.size, index.crc32c)
    fetched: list[tuple[int, int]] = []

    async def fetch(offset: int, length: int) -> bytes:
        fetched.append((offset, length))
        return await store.read(key, offset, offset + length)

    reader = AsyncLedgerObjectReader(fetch, stored_index)
    middle = index.row_groups[len(index.row_groups) // 2]
    assert (
        await reader.read_entries(middle.first_entry, middle.last_entry)
        == entries[middle.first_entry : middle.last_entry + 1]
    )
    assert sorted(fetched) == sorted(
        [(middle.offset, middle.length), (index.footer_offset, index.size - index.footer_offset)]
    )
    assert await reader.entry_at_time(T0 + 77) == 77 and await reader.entry_at_time(T0 + 500) is None
    damaged = bytearray(data)
    damaged[middle.offset + 7] ^= 0xFF
    await store.put(key, bytes(damaged))  # e.g. damaged at rest, after a verified put
    with pytest.raises(CorruptObject, match=f"row group {index.row_groups.index(middle)} CRC32C"):
        await AsyncLedgerObjectReader(fetch, stored_index).read_entries(middle.first_entry, middle.first_entry)
