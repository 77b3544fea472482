"""BookieServer on a real loopback port: pipelining, hostile input, registration, failures."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from prometheus_client import CollectorRegistry

from magnetar.bookie.registration import lookup
from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.bookie.service import BookieService
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.metadata import paths
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol import commands as c
from magnetar.protocol.errors import BookieReadOnly, NoSuchLedger, NotConnected, Timeout
from magnetar.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode_frame

from .conftest import entry


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[BookieService]:
    svc = BookieService(tmp_path / "bookie", bookie_id="b1", readonly_threshold=None)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def _raw_exchange(port: int, payload: bytes) -> list[Any]:
    """On a fresh connection: one valid add (awaiting its answer), then the raw ``payload``;
    return every frame received until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder = FrameDecoder()
    frames: list[Any] = []
    async with asyncio.timeout(5):
        writer.write(encode_frame(_add(1, 10, 0)))
        while not frames:
            frames += decoder.feed(await reader.read(65536))
        writer.write(payload)
        while chunk := await reader.read(65536):
            frames += decoder.feed(chunk)
    writer.close()
    return frames


def _add(rid: int, ledger: int, e: int, data: bytes = b"d") -> dict[str, Any]:
    data, crc = entry(data)
    return {"t": "bk_add", "rid": rid, "ledger": ledger, "entry": e, "data": data, "crc": crc, "lac": e - 1}


async def test_pipelined_adds_on_one_connection_are_all_answered(service: BookieService) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
    writer.write(b"".join(encode_frame(_add(rid, 1, rid)) for rid in range(200)))  # one write, no waiting
    decoder = FrameDecoder()
    answers: list[Any] = []
    async with asyncio.timeout(5):
        while len(answers) < 200:
            answers += decoder.feed(await reader.read(65536))
    writer.close()
    assert sorted(a["rid"] for a in answers) == list(range(200))
    assert all(a["t"] == "bk_response" and a["code"] == "OK" for a in answers)
    assert await service.storage.last_entry(1) == 199


MALFORMED = {
    "garbage_bytes": (struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1", "MalformedFrame"),
    "oversize_length_prefix": (b"\xff\xff\xff\xff" + b"x" * 100, "FrameTooLarge"),
    "not_a_map": (encode_frame([1, 2, 3]), "MalformedFrame"),
    "unknown_command": (encode_frame({"t": "bk_explode", "rid": 1}), "UnknownCommand"),
    "client_command_sent_to_bookie": (encode_frame({"t": "ping"}), "UnknownCommand"),
    "missing_field": (
        encode_frame({"t": "bk_add", "rid": 1, "ledger": 9, "entry": 0, "crc": 0}),
        "InvalidCommand",
    ),
    "mistyped_field": (encode_frame({**_add(1, 9, 0), "ledger": "nine"}), "InvalidCommand"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_malformed_input_closes_only_that_connection(service: BookieService, case: str) -> None:
    payload, code = MALFORMED[case]
    async with TcpBookieClient("b1", "127.0.0.1", service.port) as good:
        data, crc = entry(b"before")
        await good.add_entry(8, 0, data, crc, NO_ENTRY)
        frames = await _raw_exchange(service.port, payload)
        assert frames[0]["code"] == "OK"  # the valid frame before the bad one was served
        assert frames[-1]["t"] == "error" and frames[-1]["rid"] is None and frames[-1]["code"] == code
        data, crc = entry(b"after")
        await good.add_entry(8, 1, data, crc, 0)  # the other connection never noticed
        assert (await good.read_entry(8, 1)).data == b"after"
        with pytest.raises(NoSuchLedger):
            await good.read_lac(9)  # nothing of the bad frame was stored


async def test_truncated_frame_is_dropped_and_nothing_stored(service: BookieService) -> None:
    frame = encode_frame(_add(1, 11, 0))
    frames = await _raw_exchange_half_closed(service.port, frame[: len(frame) - 3])
    assert frames == []
    with pytest.raises(NoSuchLedger):
        await service.storage.read_lac(11)


async def _raw_exchange_half_closed(port: int, payload: bytes) -> list[Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    writer.write_eof()  # the connection ends inside the frame
    decoder = FrameDecoder()
    frames: list[Any] = []
    async with asyncio.timeout(5):
        while chunk := await reader.read(65536):
            frames += decoder.feed(chunk)
    writer.close()
    return frames


async def test_registration_lifecycle_and_metadata_resolver(tmp_path: Path) -> None:
    store = await LmdbMetadataStore.open(tmp_path / "meta")
    resolver = MetadataBookieResolver(store, request_timeout=5)
    try:
        svc = BookieService(tmp_path / "b1", bookie_id="b1", store=store, readonly_threshold=None)
        await svc.start()
        reg = await lookup(store, "b1")
        assert reg is not None and reg.port == svc.port and not reg.read_only
        stored = await store.get(paths.bookie_available("b1"))
        assert stored is not None and stored.stat.ephemeral
        assert await resolver.writable_bookies() == ["b1"]
        data, crc = entry(b"via metadata")
        await resolver.client("b1").add_entry(1, 0, data, crc, NO_ENTRY)
        assert (await svc.storage.read(1, 0)).data == b"via metadata"
        await svc.stop()
        assert await lookup(store, "b1") is None
        assert await resolver.writable_bookies() == []
        with pytest.raises(NotConnected):
            await resolver.client("b2").read_lac(1)  # never registered
    finally:
        await resolver.close()
        await store.close()


async def test_read_only_bookie_refuses_adds_over_tcp_and_leaves_new_ensembles(tmp_path: Path) -> None:
    store = await LmdbMetadataStore.open(tmp_path / "meta")
    svc = BookieService(tmp_path / "b1", bookie_id="b1", store=store, readonly_threshold=0.0)
    await svc.start()
    try:
        reg = await lookup(store, "b1")
        assert reg is not None and reg.read_only
        assert await MetadataBookieResolver(store).writable_bookies() == []
        async with TcpBookieClient("b1", "127.0.0.1", svc.port) as client:
            data, crc = entry(b"x")
            with pytest.raises(BookieReadOnly):
                await client.add_entry(1, 0, data, crc, NO_ENTRY)
        svc.storage.readonly_threshold = None
        assert not await svc.check_disk()
        reg = await lookup(store, "b1")
        assert reg is not None and not reg.read_only
    finally:
        await svc.stop()
        await store.close()


async def test_client_reports_not_connected_then_reconnects_lazily(tmp_path: Path) -> None:
    svc = BookieService(tmp_path / "b1", bookie_id="b1", readonly_threshold=None)
    await svc.start()
    port = svc.port
    client = TcpBookieClient("b1", "127.0.0.1", port, connect_timeout=2)
    try:
        data, crc = entry(b"x")
        await client.add_entry(1, 0, data, crc, NO_ENTRY)
        await svc.stop()
        with pytest.raises(NotConnected):
            await client.read_lac(1)
        svc = BookieService(tmp_path / "b1", bookie_id="b1", port=port, readonly_threshold=None)
        await svc.start()
        assert await client.read_lac(1) == NO_ENTRY  # same client, new connection
    finally:
        await client.close()
        await svc.stop()


async def test_unanswered_request_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # reads everything, answers nothing
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with TcpBookieClient("mute", "127.0.0.1", port, request_timeout=0.2) as client:
            with pytest.raises(Timeout):
                await client.read_lac(1)
    finally:
        server.close()
        await server.wait_closed()


async def test_unanswered_nowait_adds_time_out_each_at_its_own_deadline() -> None:
    """The fast add path has no timer per request: one sweep per connection fails each add whose
    deadline passed, and re-arms for the next. The bookie here answers reads of the LAC (so the
    connection is up and adds take the fast path) and never answers an add."""
    data, crc = entry(b"lost")

    async def reads_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(DEFAULT_MAX_FRAME_SIZE)
        while chunk := await reader.read(65536):
            for cmd in decoder.feed(chunk):
                if cmd["t"] == c.BK_READ_LAC:
                    writer.write(encode_frame(c.bk_lac_response(cmd["rid"], NO_ENTRY)))
        writer.close()

    server = await asyncio.start_server(reads_only, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with TcpBookieClient("mute", "127.0.0.1", port, request_timeout=0.3) as client:
            assert await client.read_lac(1) == NO_ENTRY
            first = client.add_entry_nowait(1, 0, data, crc, NO_ENTRY)
            await asyncio.sleep(0.2)  # a later deadline: the sweep must re-arm for it
            second = client.add_entry_nowait(1, 1, data, crc, NO_ENTRY)
            with pytest.raises(Timeout, match="mute did not answer bk_add"):
                await first
            assert not second.done()
            with pytest.raises(Timeout):
                await second
            assert await client.read_lac(1) == NO_ENTRY  # the connection stays usable
    finally:
        server.close()
        await server.wait_closed()


async def test_metrics_count_adds_and_batches(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    svc = BookieService(tmp_path / "b1", bookie_id="m1", readonly_threshold=None, registry=registry)
    await svc.start()
    try:
        client = svc.local_client()
        data, crc = entry(b"z" * 10)
        await asyncio.gather(*(client.add_entry(1, e, data, crc, e - 1) for e in range(20)))
        await client.read_entry(1, 3)
        labels = {"bookie": "m1"}
        assert registry.get_sample_value("magnetar_bookie_adds_total", labels) == 20
        assert registry.get_sample_value("magnetar_bookie_add_bytes_total", labels) == 200
        assert registry.get_sample_value("magnetar_bookie_reads_total", labels) == 1
        if svc.storage.journaled:  # acknowledged per journal sync; LMDB catches up behind
            synced = registry.get_sample_value("magnetar_bookie_journal_batch_size_count", labels)
            assert synced is not None and 1 <= synced < 20
            svc.storage.verify_all()  # returns once every acknowledged write is in LMDB
        batches = registry.get_sample_value("magnetar_bookie_group_commit_batch_size_count", labels)
        assert batches is not None and 1 <= batches < 20
    finally:
        await svc.stop()


def test_msgpack_bin_round_trip_is_bytes() -> None:
    """The server's type checks rely on msgpack decoding ``bin`` to ``bytes``."""
    assert isinstance(msgpack.unpackb(msgpack.packb(b"x", use_bin_type=True), raw=False), bytes)
