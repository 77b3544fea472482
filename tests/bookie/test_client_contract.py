"""The ``BookieClient`` contract, run in-process (LocalBookieClient) and over TCP
(TcpBookieClient against a real BookieServer on a loopback port): errors must be the same
exception classes either way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.bookie.service import BookieService
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.ledger.bookie_api import NO_ENTRY, BookieClient
from magnetar.protocol.errors import ChecksumError, LedgerFenced, NoSuchEntry, NoSuchLedger

from .conftest import entry


@pytest.fixture(params=["local", "tcp"])
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BookieClient]:
    service = BookieService(tmp_path / "bookie", bookie_id="b1", readonly_threshold=None)
    await service.start()
    try:
        if request.param == "local":
            yield service.local_client()
        else:
            async with TcpBookieClient("b1", "127.0.0.1", service.port) as tcp:
                yield tcp
    finally:
        await service.stop()


async def test_add_then_read(client: BookieClient) -> None:
    data, crc = entry(b"hello")
    await client.add_entry(1, 0, data, crc, NO_ENTRY)
    result = await client.read_entry(1, 0)
    assert (result.data, result.crc, result.lac) == (b"hello", crc, NO_ENTRY)
    assert client.bookie_id == "b1"


async def test_pipelined_adds_and_reads(client: BookieClient) -> None:
    payloads = [entry(f"e{e}".encode() * (e + 1)) for e in range(300)]
    await asyncio.gather(*(client.add_entry(2, e, d, c, e - 1) for e, (d, c) in enumerate(payloads)))
    results = await asyncio.gather(*(client.read_entry(2, e) for e in range(300)))
    assert [r.data for r in results] == [d for d, _ in payloads]
    assert await client.read_lac(2) == 298


async def test_errors_keep_their_class(client: BookieClient) -> None:
    data, crc = entry(b"x")
    with pytest.raises(ChecksumError):
        await client.add_entry(3, 0, data, crc + 1, NO_ENTRY)
    with pytest.raises(NoSuchLedger):
        await client.read_entry(3, 0)
    await client.add_entry(3, 0, data, crc, NO_ENTRY)
    with pytest.raises(NoSuchEntry):
        await client.read_entry(3, 5)


async def test_fence_returns_lac_and_refuses_later_adds(client: BookieClient) -> None:
    data, crc = entry(b"x")
    await client.add_entry(4, 0, data, crc, NO_ENTRY)
    await client.add_entry(4, 1, data, crc, 0)
    assert await client.fence(4) == 0
    with pytest.raises(LedgerFenced):
        await client.add_entry(4, 2, data, crc, 1)
    await client.add_entry(4, 2, data, crc, 1, recovery=True)


async def test_fencing_read_fences_then_reads(client: BookieClient) -> None:
    data, crc = entry(b"x")
    await client.add_entry(5, 0, data, crc, NO_ENTRY)
    assert (await client.read_entry(5, 0, fence=True)).data == b"x"
    with pytest.raises(LedgerFenced):
        await client.add_entry(5, 1, data, crc, 0)


async def test_delete_ledger(client: BookieClient) -> None:
    data, crc = entry(b"x")
    await client.add_entry(6, 0, data, crc, NO_ENTRY)
    await client.delete_ledger(6)
    with pytest.raises(NoSuchLedger):
        await client.read_lac(6)


async def test_nowait_adds_pipelined_in_one_turn_all_resolve(client: BookieClient) -> None:
    """``add_entry_nowait`` (the write handle's path): 300 adds queued in one loop turn (over TCP
    one write to the socket) resolve, are stored, and raise the LAC as ``add_entry`` does."""
    payloads = [entry(f"n{e}".encode() * (e + 1)) for e in range(300)]
    futures = [client.add_entry_nowait(5, e, d, c, e - 1) for e, (d, c) in enumerate(payloads)]
    assert await asyncio.gather(*futures) == [None] * 300
    results = await asyncio.gather(*(client.read_entry(5, e) for e in range(300)))
    assert [r.data for r in results] == [d for d, _ in payloads]
    assert await client.read_lac(5) == 298


async def test_nowait_errors_come_through_the_future_with_their_class(client: BookieClient) -> None:
    data, crc = entry(b"x")
    await client.add_entry(6, 0, data, crc, NO_ENTRY)  # over TCP: the connection exists, so the fast path runs
    bad = client.add_entry_nowait(6, 1, data, crc + 1, NO_ENTRY)  # refused before queueing: still a future
    with pytest.raises(ChecksumError):
        await bad
    await client.fence(6)
    with pytest.raises(LedgerFenced):
        await client.add_entry_nowait(6, 1, data, crc, 0)
    assert (await client.add_entry_nowait(6, 1, data, crc, 0, recovery=True)) is None
