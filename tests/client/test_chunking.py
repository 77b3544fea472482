"""Message chunking (``client.producer.chunking`` and ``client.consumer.chunks``, WIRE.md R41a/R41b):
the pure split and reassembly rules, then round trips through a real standalone broker.

The unit tests pin Pulsar's consumer rules one by one (interleaving, the pending limit with and
without auto-ack, expiry, duplicates from a producer's resend). The standalone tests show what a
user sees: a 50 MiB message byte-identical through an Exclusive consumer and through a reader, a
chunked message id that acks, nacks and seeks as the whole message, chunks of several producers
interleaved in the log, and a producer process killed with ``kill -9`` half way through a message:
the consumer never gets the half message, gets the next whole one, and the half message's chunks
are acknowledged once they expire.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from typing import Any

import pytest
from tests.support.admin import sub_stats
from tests.support.standalone import StandaloneProcess

from magnetar.client import aio
from magnetar.client.consumer.chunks import ChunkAssembler
from magnetar.client.options import InitialPosition, Result
from magnetar.client.producer.chunking import ChunkedSendReceipt, chunk_uuid, make_chunk_batches, split_payload
from magnetar.client.producer.producer import PartitionProducer
from magnetar.protocol import commands as cmds
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.errors import MessageTooLarge, Timeout
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE
from magnetar.protocol.message_id import MessageId

MiB = 1024 * 1024


def payload_of(size: int, seed: int = 0) -> bytes:
    """Deterministic, incompressible-looking bytes (so that chunk boundaries are real)."""
    block = bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(65536))
    return (block * (size // len(block) + 1))[:size]


def chunks_of(
    name: str, seq: int, content: bytes, chunk_size: int, key: str | None = None
) -> list[tuple[EntryMeta, bytes]]:
    meta, payload = encode_batch(
        [[content, {"seq": str(seq)}, key, 0, seq]], producer_name=name, first_sequence_id=seq, batched=False, key=key
    )
    return split_payload(meta, payload, chunk_size, chunk_uuid(name, seq))


# ----------------------------------------------------------------------------- split (pure)


def test_split_payload_cuts_in_order_with_own_crc_and_chunk_keys() -> None:
    meta, payload = encode_batch([[b"x" * 1000, {}, "k", 0, 7]], producer_name="p", first_sequence_id=7, batched=False)
    chunks = split_payload(meta, payload, 300, "p-7")
    assert len(chunks) == -(-len(payload) // 300) == 4
    assert b"".join(p for _, p in chunks) == payload
    for cid, (m, p) in enumerate(chunks):
        assert len(p) <= 300
        assert m["crc"] == crc32c(p)
        assert (m["uuid"], m["cid"], m["cn"], m["ts"]) == ("p-7", cid, 4, len(payload))
        assert (m["seq"], m["n"], m["usize"], m["pn"]) == (7, 1, meta["usize"], "p")  # the message's own meta


def test_split_payload_of_an_exact_multiple_has_no_empty_chunk() -> None:
    meta = EntryMeta(crc=0)
    assert [len(p) for _, p in split_payload(meta, b"a" * 600, 300, "u")] == [300, 300]
    with pytest.raises(ValueError):
        split_payload(meta, b"a", 0, "u")


# ----------------------------------------------------------------------------- reassembly (pure)


def feed(
    asm: ChunkAssembler, chunks: list[tuple[EntryMeta, bytes]], positions: list[tuple[int, int]], now: float = 0.0
) -> Any:
    out = None
    for (meta, payload), pos in zip(chunks, positions, strict=True):
        out = asm.add(meta, pos, payload, now, int(time.time() * 1000))
    return out


def test_interleaved_chunks_of_two_producers_reassemble_each_message() -> None:
    a = chunks_of("a", 0, payload_of(1000, 1), 256)
    b = chunks_of("b", 0, payload_of(900, 2), 256)
    asm = ChunkAssembler()
    done = {}
    entry = 0
    for i in range(max(len(a), len(b))):
        for name, chunks in (("a", a), ("b", b)):
            if i < len(chunks):
                meta, payload = chunks[i]
                out = asm.add(meta, (1, entry), payload, 0.0, 0)
                entry += 1
                assert not out.ack and not out.untracked
                if out.message is not None:
                    done[name] = out.message
    assert len(asm) == 0
    for name, seed, size in (("a", 1, 1000), ("b", 2, 900)):
        meta, payload = encode_batch(
            [[payload_of(size, seed), {"seq": "0"}, None, 0, 0]], producer_name=name, first_sequence_id=0, batched=False
        )
        assert done[name].payload == payload
    # a's chunks are at the even entries (a went first), b's at the odd ones
    assert done["a"].positions == [(1, 2 * i) for i in range(len(a))]


def test_pending_limit_drops_the_oldest_and_acks_it_only_with_auto_ack() -> None:
    for auto_ack in (True, False):
        asm = ChunkAssembler(max_pending=2, auto_ack_oldest=auto_ack)
        firsts = [chunks_of(n, 0, payload_of(600), 256)[0] for n in ("a", "b", "c")]
        outs = [asm.add(m, (1, i), p, float(i), 0) for i, (m, p) in enumerate(firsts)]
        assert len(asm) == 2  # a was dropped to make room for c
        dropped = outs[2]
        assert (dropped.ack, dropped.untracked) == (([(1, 0)], []) if auto_ack else ([], [(1, 0)]))


def test_zero_pending_limit_means_no_limit() -> None:
    asm = ChunkAssembler(max_pending=0)
    for i in range(50):
        m, p = chunks_of(f"p{i}", 0, payload_of(600), 256)[0]
        assert not asm.add(m, (1, i), p, 0.0, 0).ack
    assert len(asm) == 50


def test_incomplete_messages_expire_in_age_order_and_their_chunks_are_acked() -> None:
    asm = ChunkAssembler(expire_ms=1000)
    a = chunks_of("a", 0, payload_of(600), 256)
    b = chunks_of("b", 0, payload_of(600), 256)
    feed(asm, a[:2], [(1, 0), (1, 1)], now=10.0)
    feed(asm, b[:1], [(1, 2)], now=10.5)
    assert asm.next_expiry() == pytest.approx(11.0)
    assert asm.expire(10.9) == []
    assert asm.expire(11.0) == [(1, 0), (1, 1)]
    assert asm.next_expiry() == pytest.approx(11.5)
    assert asm.expire(12.0) == [(1, 2)]
    assert asm.next_expiry() is None and len(asm) == 0
    assert ChunkAssembler(expire_ms=0).expire(1e9) == []


def test_a_resent_message_supersedes_its_abandoned_copy_which_is_acked() -> None:
    asm = ChunkAssembler()
    chunks = chunks_of("p", 3, payload_of(700), 256)  # 3 chunks
    feed(asm, chunks[:2], [(1, 0), (1, 1)])  # the producer reconnected here and resends from chunk 0
    out = asm.add(*chunks[0][:1], (1, 2), chunks[0][1], 0.0, 0)
    assert out.ack == [(1, 0), (1, 1)]
    out = feed(asm, chunks[1:], [(1, 3), (1, 4)])
    assert out.message is not None and out.message.positions == [(1, 2), (1, 3), (1, 4)]


def test_a_redelivered_first_chunk_restarts_without_acking() -> None:
    asm = ChunkAssembler()
    chunks = chunks_of("p", 3, payload_of(700), 256)
    feed(asm, chunks[:2], [(1, 0), (1, 1)])
    out = asm.add(chunks[0][0], (1, 0), chunks[0][1], 0.0, 0)  # same position: a redelivery
    assert not out.ack and not out.untracked
    out = feed(asm, chunks[1:], [(1, 1), (1, 2)])
    assert out.message is not None and out.message.positions == [(1, 0), (1, 1), (1, 2)]


def test_duplicate_and_stray_chunks_are_acked_and_never_delivered() -> None:
    asm = ChunkAssembler(expire_ms=1000)
    chunks = chunks_of("p", 0, payload_of(700), 256)
    feed(asm, chunks[:2], [(1, 0), (1, 1)])
    out = asm.add(chunks[1][0], (1, 5), chunks[1][1], 0.0, 0)  # chunk 1 stored twice
    assert out.ack == [(1, 5)] and out.message is None
    assert feed(asm, chunks[2:], [(1, 6)]).message is not None
    out = asm.add(chunks[2][0], (1, 7), chunks[2][1], 0.0, 0)  # a stray copy after completion
    assert out.ack == [(1, 7)] and out.message is None
    # a chunk whose first chunk never came: left for redelivery while fresh, acked once expired
    orphan = chunks_of("q", 0, payload_of(700), 256)[1]
    now_ms = int(orphan[0]["pt"])
    assert asm.add(orphan[0], (1, 8), orphan[1], 0.0, now_ms).untracked == [(1, 8)]
    assert asm.add(orphan[0], (1, 8), orphan[1], 0.0, now_ms + 1001).ack == [(1, 8)]


def test_a_missing_chunk_abandons_the_message() -> None:
    asm = ChunkAssembler()
    chunks = chunks_of("p", 0, payload_of(700), 256)
    asm.add(chunks[0][0], (1, 0), chunks[0][1], 0.0, 0)
    out = asm.add(chunks[2][0], (1, 1), chunks[2][1], 0.0, 0)
    assert out.message is None and out.untracked == [(1, 0), (1, 1)] and len(asm) == 0


def test_chunked_message_id_is_the_last_chunk_and_keeps_the_first() -> None:
    mid = MessageId(-1, 5, 9, -1).with_first_chunk(5, 3)
    assert mid == MessageId(-1, 5, 9) and str(mid) == "(5,9,-1,-1)"
    again = MessageId.deserialize(mid.serialize())
    assert again == mid and again.first_chunk == (5, 3)
    assert MessageId.deserialize(MessageId(-1, 5, 9).serialize()).first_chunk is None


async def test_a_chunked_send_completes_with_the_chunked_id_or_the_first_failure() -> None:
    loop = asyncio.get_running_loop()
    chunks = chunks_of("p", 4, payload_of(700), 256)
    outcomes: list[Any] = []
    batches = make_chunk_batches(chunks, 4, 0.0, loop)
    batches[-1].add_callback(-1, lambda result, mid: outcomes.append((result, mid)))
    assert [b.count for b in batches] == [0, 0, 1]  # one pending message for the whole chunked one
    for entry, batch in enumerate(batches):
        batch.resolve(9, 10 + entry, 2)
    mid = await ChunkedSendReceipt(batches[-1], -1)
    assert (mid, mid.first_chunk, mid.partition()) == (MessageId(2, 9, 12), (9, 10), 2)
    assert outcomes == [(Result.Ok, mid)] and outcomes[0][1].first_chunk == (9, 10)
    # An earlier chunk that failed fails the message, even if the last one was stored.
    batches = make_chunk_batches(chunks, 5, 0.0, loop)
    batches[0].fail(Timeout("chunk 0 timed out"))
    batches[1].resolve(9, 20, -1)
    batches[2].resolve(9, 21, -1)
    with pytest.raises(Timeout):
        await ChunkedSendReceipt(batches[-1], -1)


# ----------------------------------------------------------------------------- standalone


async def backlog(sa: StandaloneProcess, topic: str, sub: str) -> int:
    return int((await asyncio.to_thread(sub_stats, sa, topic, sub))["msgBacklog"])


async def wait_backlog(sa: StandaloneProcess, topic: str, sub: str, want: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while (got := await backlog(sa, topic, sub)) != want:
        assert time.monotonic() < deadline, f"backlog of {sub} is {got}, not {want}"
        await asyncio.sleep(0.1)


async def test_50_mib_message_round_trips_exclusive_byte_identical(standalone: StandaloneProcess, topic: str) -> None:
    data = payload_of(50 * MiB, 3)
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        sent = await producer.send(data, properties={"a": "1"}, partition_key="key-1")
        after = await producer.send(b"small one")
        msg = await consumer.receive(60_000)
        assert msg.data() == data
        assert (msg.properties(), msg.partition_key()) == ({"a": "1"}, "key-1")
        assert msg.message_id() == sent and msg.message_id().first_chunk == sent.first_chunk
        assert sent.first_chunk is not None and sent.first_chunk < sent.position
        chunks = sent.entry_id() - sent.first_chunk[1] + 1
        assert chunks == 50 * MiB // DEFAULT_MAX_MESSAGE_SIZE + 1  # 5 MiB chunks, and the record's few bytes more
        small = await consumer.receive(10_000)
        assert (small.data(), small.message_id()) == (b"small one", after)
        await consumer.acknowledge(msg)  # acknowledges every one of its chunks
        await consumer.acknowledge(small)
        await consumer.close()
        await wait_backlog(standalone, topic, "s", 0)
        await producer.close()


async def test_50_mib_message_round_trips_through_a_reader(standalone: StandaloneProcess, topic: str) -> None:
    data = payload_of(50 * MiB, 4)
    async with aio.Client(standalone.service_url) as client:
        producer = await client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        before = await producer.send(b"before")
        sent = await producer.send(data)
        await producer.send(b"after")
        reader = await client.create_reader(topic, MessageId.earliest)
        assert [(await reader.read_next(60_000)).data() for _ in range(3)] == [b"before", data, b"after"]
        await reader.close()
        # Started at the chunked message's id: after it (exclusive), at its first chunk (inclusive).
        reader = await client.create_reader(topic, sent)
        assert (await reader.read_next(10_000)).data() == b"after"
        await reader.close()
        reader = await client.create_reader(topic, sent, start_message_id_inclusive=True)
        got = await reader.read_next(60_000)
        assert got.data() == data and got.message_id() == sent
        await reader.close()
        reader = await client.create_reader(topic, before)
        assert (await reader.read_next(60_000)).data() == data
        await reader.close()
        await producer.close()


async def test_without_chunking_a_large_message_is_refused_and_nothing_is_stored(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, batching_enabled=False)
        with pytest.raises(MessageTooLarge):
            await producer.send(payload_of(6 * MiB))
        await producer.send(b"next")
        assert (await consumer.receive(10_000)).data() == b"next"
        await producer.close()
        await consumer.close()


async def test_a_message_that_fits_is_not_chunked_and_non_persistent_topics_never_chunk(
    standalone: StandaloneProcess, topic: str
) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic, chunking_enabled=True)  # turns batching off
        sent = await producer.send(payload_of(4 * MiB))  # fits: one entry, a plain id
        assert sent.first_chunk is None and sent.batch_index() == -1
        assert (await consumer.receive(10_000)).message_id() == sent
        await producer.close()
        await consumer.close()
        # As the C++ client under pulsar-client: chunking applies to persistent topics only.
        np_producer = await client.create_producer(
            topic.replace("persistent:", "non-persistent:"), chunking_enabled=True
        )
        with pytest.raises(MessageTooLarge):
            await np_producer.send(payload_of(6 * MiB))
        await np_producer.close()


async def _raw_producer(client: aio.Client, topic: str, name: str) -> PartitionProducer:
    producer = await client.create_producer(topic, producer_name=name, batching_enabled=False)
    return producer.partitions[0]


def _write(part: PartitionProducer, seq: int, chunk: tuple[EntryMeta, bytes]) -> None:
    """Write one chunk as its producer would (interleaving is what these tests are about)."""
    assert part._conn is not None
    part._conn.write(cmds.send(part.producer_id, seq, chunk[0], chunk[1]))


async def test_chunks_of_producers_interleaved_in_the_log_reassemble(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        pa = await _raw_producer(client, topic, "pa")
        pb = await _raw_producer(client, topic, "pb")
        a, b = payload_of(300_000, 5), payload_of(250_000, 6)
        ca, cb = chunks_of("pa", 0, a, 64 * 1024), chunks_of("pb", 0, b, 64 * 1024)
        plain = await client.create_producer(topic, batching_enabled=False)
        for i in range(max(len(ca), len(cb))):
            if i < len(ca):
                _write(pa, 0, ca[i])
            if i < len(cb):
                _write(pb, 0, cb[i])
            if i == 1:
                await plain.send(b"between")  # an ordinary message in the middle of both
        got = [await consumer.receive(10_000) for _ in range(3)]
        assert [m.data() for m in got] == [b"between", b, a]  # b's last chunk comes before a's
        assert got[2].properties() == {"seq": "0"}
        assert got[2].message_id().first_chunk is not None
        for m in got:
            await consumer.acknowledge(m)
        await consumer.close()
        await wait_backlog(standalone, topic, "s", 0)


async def test_pending_limit_on_a_consumer_drops_the_oldest_message(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            initial_position=InitialPosition.Earliest,
            max_pending_chunked_message=2,
            auto_ack_oldest_chunked_message_on_queue_full=True,
        )
        parts = [await _raw_producer(client, topic, n) for n in ("p0", "p1", "p2")]
        messages = [payload_of(150_000, i) for i in range(3)]
        chunked = [chunks_of(f"p{i}", 0, m, 64 * 1024) for i, m in enumerate(messages)]
        for i in range(3):  # three first chunks: the third drops p0's message
            _write(parts[i], 0, chunked[i][0])
        for i in range(3):
            for chunk in chunked[i][1:]:
                _write(parts[i], 0, chunk)
        got = [(await consumer.receive(10_000)).data() for _ in range(2)]
        assert got == messages[1:]
        with pytest.raises(Timeout):
            await consumer.receive(500)
        await consumer.close()


async def test_chunked_id_acks_nacks_and_seeks_as_the_whole_message(standalone: StandaloneProcess, topic: str) -> None:
    data = payload_of(11 * MiB, 7)
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            initial_position=InitialPosition.Earliest,
            negative_ack_redelivery_delay_ms=100,
            start_message_id_inclusive=True,
        )
        producer = await client.create_producer(topic, chunking_enabled=True)
        sent = await producer.send(data)
        first = await consumer.receive(30_000)
        await consumer.negative_acknowledge(first)  # every chunk comes again, so the whole message does
        again = await consumer.receive(30_000)
        assert again.data() == data and again.redelivery_count() == 1
        await consumer.seek(sent)  # an inclusive seek to a chunked id reads it again from its first chunk
        sought = await consumer.receive(30_000)
        assert sought.data() == data
        await consumer.acknowledge(sent)  # a bare chunked MessageId acknowledges all its chunks
        await consumer.close()
        await wait_backlog(standalone, topic, "s", 0)
        await producer.close()


_KILLED_PRODUCER = textwrap.dedent(
    """
    import asyncio, sys
    from magnetar.client import aio

    async def main(url, topic):
        client = aio.Client(url)
        producer = await client.create_producer(topic, producer_name="doomed", chunking_enabled=True)
        part = producer.partitions[0]
        conn = part._conn
        real_write = conn.write
        def write(cmd):  # the process "dies" after its first two chunks went out
            meta = cmd.get("meta") or {}
            if cmd.get("t") == "send" and meta.get("cid", 0) >= 2:
                return
            real_write(cmd)
        conn.write = write
        await producer.send_async(b"x" * (11 * 1024 * 1024))  # its receipt never comes
        while len(part._inflight) > 1:  # until the broker stored chunks 0 and 1
            await asyncio.sleep(0.01)
        print("STORED", len(part._inflight), flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_producer_killed_mid_message_leaves_no_half_message(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "s",
            initial_position=InitialPosition.Earliest,
            expire_time_of_incomplete_chunked_message_ms=1000,
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _KILLED_PRODUCER, standalone.service_url, topic, stdout=asyncio.subprocess.PIPE
        )
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line.startswith(b"STORED 1"), line  # 3 chunks: 2 stored, the last never sent
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), 10)
        assert proc.returncode == -signal.SIGKILL
        await wait_backlog(standalone, topic, "s", 2)  # the two chunks are stored
        producer = await client.create_producer(topic, chunking_enabled=True)
        await producer.send(b"next whole message")
        msg = await consumer.receive(10_000)
        assert msg.data() == b"next whole message"  # never the half message
        await consumer.acknowledge(msg)
        await wait_backlog(standalone, topic, "s", 0)  # its chunks expired and were acknowledged
        with pytest.raises(Timeout):
            await consumer.receive(300)
        await producer.close()
        await consumer.close()


def test_blocking_client_round_trip_acks_every_chunk(standalone: StandaloneProcess, topic: str) -> None:
    import magnetar as pulsar

    big = payload_of(12 * MiB, 8)
    client = pulsar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, chunking_enabled=True)
        msg_id = producer.send(big, properties={"name": "intro.mp4"})
        assert msg_id.first_chunk is not None
        msg = consumer.receive(timeout_millis=30_000)
        assert msg.data() == big and msg.properties() == {"name": "intro.mp4"}
        assert msg.message_id() == msg_id
        consumer.acknowledge(msg)
        consumer.close()
        asyncio.run(wait_backlog(standalone, topic, "s", 0))
    finally:
        client.close()
