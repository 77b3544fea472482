"""R33-R36 of WIRE.md: the broker → bookie commands, against the standalone's own bookie (and, for
a checksum failure on read, a bookie server over damaged storage).

The ledgers used here have ids far above the ones the standalone's brokers allocate (they count
from 1), so the tests never touch a topic's data.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path
from typing import Any

import lmdb
from tests.support.standalone import StandaloneProcess

from magnetar.bookie.server import BookieServer
from magnetar.bookie.storage import CRC, ENTRY_KEY, BookieStorage
from magnetar.protocol import commands as c
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.framing import FrameDecoder, encode_frame

from .wire import Wire

_ledgers = itertools.count(10**12 + uuid.uuid4().int % 10**9)


def _add(bookie: Wire, ledger: int, entry: int, data: bytes, *, recovery: bool = False) -> Any:
    return bookie.request(c.bk_add(ledger, entry, data, crc32c(data), entry - 1, recovery))


# ---------------------------------------------------------------------------------------------- R33


def test_r33_bk_add_is_answered_once_the_entry_is_durable(fresh_standalone: StandaloneProcess) -> None:
    ledger = next(_ledgers)
    with Wire(fresh_standalone.bookie_address) as bookie:
        answers = [_add(bookie, ledger, e, b"entry-%d" % e) for e in range(3)]
    assert answers == [c.bk_response(a["rid"]) for a in answers]
    fresh_standalone.kill9()  # acknowledged means on disk: a crash right after loses nothing
    fresh_standalone.start()
    with Wire(fresh_standalone.bookie_address) as bookie:
        assert [bookie.request(c.bk_read(ledger, e))["data"] for e in range(3)] == [b"entry-%d" % e for e in range(3)]


# ---------------------------------------------------------------------------------------------- R34


def test_r34_bk_read_bk_read_lac_and_bk_delete_answers(standalone: StandaloneProcess) -> None:
    ledger = next(_ledgers)
    with Wire(standalone.bookie_address) as bookie:
        _add(bookie, ledger, 0, b"zero")
        _add(bookie, ledger, 1, b"one")  # carries lac 0
        read = bookie.request(c.bk_read(ledger, 1))
        assert read == c.bk_read_response(read["rid"], b"one", crc32c(b"one"), 0)
        lac = bookie.request(c.bk_read_lac(ledger))
        assert lac == c.bk_lac_response(lac["rid"], 0)
        deleted = bookie.request(c.bk_delete(ledger))
        assert deleted == c.bk_response(deleted["rid"])
        gone = bookie.request(c.bk_read(ledger, 0))
        assert gone == c.bk_error(gone["rid"], "NoSuchLedger", gone["message"])


# ---------------------------------------------------------------------------------------------- R35


def test_r35_bk_fence_answers_the_lac_and_refuses_later_non_recovery_adds(standalone: StandaloneProcess) -> None:
    ledger = next(_ledgers)
    with Wire(standalone.bookie_address) as bookie:
        _add(bookie, ledger, 0, b"zero")
        _add(bookie, ledger, 1, b"one")
        fenced = bookie.request(c.bk_fence(ledger))
        assert fenced == c.bk_lac_response(fenced["rid"], 0)
        refused = _add(bookie, ledger, 2, b"two")
        assert refused["code"] == "LedgerFenced"
        assert _add(bookie, ledger, 2, b"two", recovery=True)["code"] == c.BK_OK  # recovery may still write
        assert bookie.request(c.bk_read(ledger, 2))["data"] == b"two"


# ---------------------------------------------------------------------------------------------- R36


def test_r36_bk_add_with_a_wrong_crc_gets_checksum_error(standalone: StandaloneProcess) -> None:
    ledger = next(_ledgers)
    with Wire(standalone.bookie_address) as bookie:
        refused = bookie.request(c.bk_add(ledger, 0, b"data", crc32c(b"data") ^ 1, -1))
        assert refused["code"] == "ChecksumError"
        assert bookie.request(c.bk_read_lac(ledger))["code"] == "NoSuchLedger"  # nothing was stored
        assert _add(bookie, ledger, 0, b"data")["code"] == c.BK_OK  # and the connection is still served


async def test_r36_bk_read_of_a_damaged_entry_gets_checksum_error(tmp_path: Path) -> None:
    storage = BookieStorage(tmp_path)
    for entry, data in enumerate((b"damaged-" + bytes(32), b"intact")):
        await storage.add(1, entry, data, crc32c(data), entry - 1)
    await storage.close()
    env = lmdb.open(str(tmp_path / "ledgers"), max_dbs=2, subdir=True)
    with env.begin(write=True, db=env.open_db(b"entries")) as txn:
        stored = txn.get(ENTRY_KEY.pack(1, 0))
        assert stored is not None
        value = bytes(stored)
        txn.put(ENTRY_KEY.pack(1, 0), value[: CRC.size + 3] + bytes([value[CRC.size + 3] ^ 1]) + value[CRC.size + 4 :])
    env.close()
    storage = BookieStorage(tmp_path)
    server = BookieServer(storage, bookie_id="damaged")
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_frame(c.bk_read(1, 0, rid=1)) + encode_frame(c.bk_read(1, 1, rid=2)))
        decoder = FrameDecoder()
        answers: dict[int, Any] = {}
        async with asyncio.timeout(10):
            while len(answers) < 2:
                answers.update((f["rid"], f) for f in decoder.feed(await reader.read(65536)))
        writer.close()
    finally:
        await server.stop()
        await storage.close()
    assert answers[1]["code"] == "ChecksumError"
    assert answers[2] == c.bk_read_response(2, b"intact", crc32c(b"intact"), 0)
