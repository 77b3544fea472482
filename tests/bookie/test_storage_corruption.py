"""Corruption on disk surfaces as ChecksumError on read, never as bad data. One test per case.

LMDB does not checksum its pages, so each case damages a stored value behind the storage's back
(directly through lmdb, or by flipping a byte in ``data.mdb`` itself) and checks the CRC32C
stored with every entry catches it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest

from magnetar.bookie.storage import CRC, ENTRY_KEY, BookieStorage
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.errors import ChecksumError

from .conftest import entry

#: The storage contract: every test here runs against each engine (conftest.STORAGE_ENGINES).
pytestmark = pytest.mark.usefixtures("storage_engine")


async def _store_one(directory: Path, data: bytes) -> None:
    storage = BookieStorage(directory)
    payload, crc = entry(data)
    await storage.add(1, 0, payload, crc, NO_ENTRY)
    neighbour, ncrc = entry(b"entry-neighbour")
    await storage.add(1, 1, neighbour, ncrc, 0)  # must stay readable
    await storage.close()


def _rewrite(directory: Path, damage: Callable[[bytes], bytes]) -> None:
    env = lmdb.open(str(directory / "ledgers"), max_dbs=2, subdir=True)
    db = env.open_db(b"entries")
    with env.begin(write=True, db=db) as txn:
        key = ENTRY_KEY.pack(1, 0)
        txn.put(key, damage(bytes(txn.get(key))))
    env.close()


async def _assert_detected(directory: Path) -> None:
    storage = BookieStorage(directory)
    try:
        with pytest.raises(ChecksumError):
            await storage.read(1, 0)
        assert (await storage.read(1, 1)).data.startswith(b"entry-")
    finally:
        await storage.close()


def _flip(value: bytes, index: int) -> bytes:
    return value[:index] + bytes([value[index] ^ 0x01]) + value[index + 1 :]


async def test_flipped_bit_in_the_data_is_detected(tmp_path: Path) -> None:
    await _store_one(tmp_path, b"entry-" + os.urandom(64))
    _rewrite(tmp_path, lambda v: _flip(v, CRC.size + 10))
    await _assert_detected(tmp_path)


async def test_flipped_bit_in_the_stored_crc_is_detected(tmp_path: Path) -> None:
    await _store_one(tmp_path, b"entry-" + os.urandom(64))
    _rewrite(tmp_path, lambda v: _flip(v, 2))
    await _assert_detected(tmp_path)


async def test_truncated_entry_is_detected(tmp_path: Path) -> None:
    await _store_one(tmp_path, b"entry-" + os.urandom(64))
    _rewrite(tmp_path, lambda v: v[: len(v) // 2])
    await _assert_detected(tmp_path)


async def test_value_shorter_than_its_crc_is_detected(tmp_path: Path) -> None:
    await _store_one(tmp_path, b"entry-" + os.urandom(64))
    _rewrite(tmp_path, lambda v: v[:2])
    await _assert_detected(tmp_path)


async def test_flipped_byte_inside_the_lmdb_file_is_detected(tmp_path: Path) -> None:
    marker = b"entry-" + os.urandom(256)  # random, so it occurs in the file only where stored
    await _store_one(tmp_path, marker)
    data_file = tmp_path / "ledgers" / "data.mdb"
    raw = bytearray(data_file.read_bytes())
    # Copy-on-write leaves older copies of the page in the file: damage every one of them.
    hits = 0
    at = raw.find(marker)
    while at >= 0:
        raw[at + 100] ^= 0xFF
        hits += 1
        at = raw.find(marker, at + 1)
    assert hits >= 1, "the entry should be stored verbatim in data.mdb"
    data_file.write_bytes(bytes(raw))
    await _assert_detected(tmp_path)
