"""The key-value seam (bookie/storage/kv.py): what every engine beneath the bookie's storage must do.

The ledger storage relies on each of these: bytewise key order within a table (one ledger's
big-endian keys are contiguous, ``last_entry`` is one seek), separate tables, atomic write
transactions that vanish when their block raises, snapshot reads, cursors that seek, step back
and delete, and what is committed being there after a reopen. A new engine is one more entry in
``ENGINES``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.bookie.storage.kv import KeyValueStorage
from magnetar.bookie.storage.lmdb_engine import LmdbEngine

Opener = Callable[[Path], KeyValueStorage[Any]]

ENGINES: list[Any] = [
    pytest.param(lambda path: LmdbEngine(path, map_size=1 << 30), id="lmdb"),
]

KEY = struct.Struct(">QQ")


@pytest.fixture(params=ENGINES)
def open_kv(request: pytest.FixtureRequest) -> Opener:
    opener: Opener = request.param
    return opener


@pytest.fixture
def kv(open_kv: Opener, tmp_path: Path) -> Iterator[KeyValueStorage[Any]]:
    store = open_kv(tmp_path)
    try:
        yield store
    finally:
        store.close()


def test_put_get_delete(kv: KeyValueStorage[Any]) -> None:
    t = kv.table(b"entries")
    with kv.begin(write=True) as txn:
        assert txn.get(b"k", db=t) is None
        txn.put(b"k", b"v1", db=t)
        assert bytes(txn.get(b"k", db=t) or b"") == b"v1"  # a transaction sees its own writes
        txn.put(b"k", b"v2", db=t)
    with kv.begin() as txn:
        assert bytes(txn.get(b"k", db=t) or b"") == b"v2"
    with kv.begin(write=True) as txn:
        assert txn.delete(b"k", db=t)
        assert not txn.delete(b"k", db=t)
    with kv.begin() as txn:
        assert txn.get(b"k", db=t) is None


def test_tables_are_separate(kv: KeyValueStorage[Any]) -> None:
    a, b = kv.table(b"entries"), kv.table(b"ledgers")
    with kv.begin(write=True) as txn:
        txn.put(b"k", b"in a", db=a)
        txn.put(b"k", b"in b", db=b)
        txn.put(b"only a", b"x", db=a)
    with kv.begin() as txn:
        assert bytes(txn.get(b"k", db=a) or b"") == b"in a"
        assert bytes(txn.get(b"k", db=b) or b"") == b"in b"
        assert txn.get(b"only a", db=b) is None
        assert txn.stat(a)["entries"] == 2
        assert txn.stat(b)["entries"] == 1


def test_a_write_transaction_that_raises_leaves_nothing(kv: KeyValueStorage[Any]) -> None:
    t = kv.table(b"entries")
    with kv.begin(write=True) as txn:
        txn.put(b"kept", b"1", db=t)
    with pytest.raises(RuntimeError), kv.begin(write=True) as txn:
        txn.put(b"lost", b"1", db=t)
        txn.delete(b"kept", db=t)
        raise RuntimeError("abandon")
    with kv.begin() as txn:
        assert txn.get(b"lost", db=t) is None
        assert bytes(txn.get(b"kept", db=t) or b"") == b"1"


def test_a_read_transaction_sees_one_snapshot(kv: KeyValueStorage[Any]) -> None:
    t = kv.table(b"entries")
    with kv.begin(write=True) as txn:
        txn.put(b"k", b"old", db=t)
    with kv.begin() as reader:
        with kv.begin(write=True) as writer:
            writer.put(b"k", b"new", db=t)
            writer.put(b"other", b"x", db=t)
        assert bytes(reader.get(b"k", db=t) or b"") == b"old"
        assert reader.get(b"other", db=t) is None


def _fill(kv: KeyValueStorage[Any], t: Any, keys: list[tuple[int, int]]) -> None:
    with kv.begin(write=True) as txn:
        for ledger, entry in keys:
            txn.put(KEY.pack(ledger, entry), f"{ledger}:{entry}".encode(), db=t)


def test_keys_iterate_in_bytewise_order(kv: KeyValueStorage[Any]) -> None:
    t = kv.table(b"entries")
    keys = [(2, 0), (1, 300), (1, 2), (256, 1), (1, 0), (2**64 - 1, 5)]
    _fill(kv, t, keys)
    with kv.begin() as txn:
        found = [KEY.unpack(k) for k in txn.cursor(db=t).iternext(keys=True, values=False)]
        items = [(KEY.unpack(k), bytes(v)) for k, v in txn.cursor(db=t).iternext()]
    assert found == sorted(keys)
    assert items == [(k, f"{k[0]}:{k[1]}".encode()) for k in sorted(keys)]


def test_cursor_seeks_steps_back_and_finds_the_last_key(kv: KeyValueStorage[Any]) -> None:
    t = kv.table(b"entries")
    _fill(kv, t, [(1, 0), (1, 7), (3, 2)])
    with kv.begin() as txn:
        cursor = txn.cursor(db=t)
        assert cursor.set_range(KEY.pack(2, 0))  # the first key at or after
        assert KEY.unpack(cursor.key()) == (3, 2)
        assert cursor.prev()
        assert KEY.unpack(cursor.key()) == (1, 7)  # the highest entry of ledger 1
        assert cursor.set_range(KEY.pack(1, 7))
        assert KEY.unpack(cursor.key()) == (1, 7)
        assert not cursor.set_range(KEY.pack(4, 0))  # nothing at or after
        assert cursor.last()
        assert KEY.unpack(cursor.key()) == (3, 2)
    empty = kv.table(b"ledgers")
    with kv.begin() as txn:
        assert not txn.cursor(db=empty).last()


def test_cursor_delete_removes_a_range(kv: KeyValueStorage[Any]) -> None:
    t = kv.table(b"entries")
    _fill(kv, t, [(1, 0), (2, 0), (2, 1), (2, 2), (3, 0)])
    with kv.begin(write=True) as txn:
        cursor = txn.cursor(db=t)
        assert cursor.set_range(KEY.pack(2, 0))
        while KEY.unpack(cursor.key())[0] == 2:  # delete moves to the next key
            assert cursor.delete()
    with kv.begin() as txn:
        assert [KEY.unpack(k) for k in txn.cursor(db=t).iternext(keys=True, values=False)] == [(1, 0), (3, 0)]


def test_committed_writes_are_there_after_reopening(open_kv: Opener, tmp_path: Path) -> None:
    store = open_kv(tmp_path)
    t = store.table(b"entries")
    with store.begin(write=True) as txn:
        txn.put(b"k", b"v" * 10_000, db=t)
    assert store.size_bytes() > 0
    store.close()
    again = open_kv(tmp_path)
    try:
        t = again.table(b"entries")  # tables are opened before the transactions that use them
        with again.begin() as txn:
            assert bytes(txn.get(b"k", db=t) or b"") == b"v" * 10_000
    finally:
        again.close()


def test_corruption_names_exception_types(kv: KeyValueStorage[Any]) -> None:
    assert kv.corruption
    assert all(isinstance(t, type) and issubclass(t, BaseException) for t in kv.corruption)
