"""Bookie storage: a ledger storage over a key-value store, with a journal in front.

``BookieStorage`` (``ledger_storage.py``) is what the server, the in-process client and the
scrubber use; ``STORAGE.md`` one level up tells the whole story. The modules, from the bytes up:

=====================  ==========================================================================
``entry_format.py``    key layout, entry and ledger-state encodings, CRC32C checks (the disk format)
``kv.py``              the key-value seam: the protocols an engine satisfies
``lmdb_engine.py``     LMDB behind that seam; ``verify_directory`` for the scrubber's child process
``verify.py``          the walk over every stored value (``verify_all``)
``writes.py``          the write operations: how each is decided and applied to the store
``group_commit.py``    the writer thread: many writes, one transaction, one sync
``journal_overlay.py`` journal mode: acknowledged once journaled, readable from an overlay meanwhile
``read_only.py``       refusing adds when the disk is (nearly) full
``reads.py``           reads, inline on the event loop
``ledger_storage.py``  ``BookieStorage``, composing them
=====================  ==========================================================================

The names below are what other packages and tests import from ``magnetar.bookie.storage``.
"""

from __future__ import annotations

from magnetar.bookie.storage.entry_format import (
    CRC,
    ENTRY_HEAD,
    ENTRY_KEY,
    FORMAT,
    FORMAT_KEY,
    JOURNAL_KEY,
    LEDGER_KEY,
    LEDGER_STATE,
    LEDGER_STATE_V2,
)
from magnetar.bookie.storage.journal_overlay import (
    JOURNAL_DIR,
    JOURNAL_ENV,
    JOURNAL_RECORD,
    REPLAY_CHUNK_OPS,
    decode_record,
    journal_default,
)
from magnetar.bookie.storage.ledger_storage import CORRUPT_FILE, OPEN_FILE, BookieStorage, StorageCorrupt
from magnetar.bookie.storage.lmdb_engine import DEFAULT_MAP_SIZE, verify_directory
from magnetar.bookie.storage.read_only import DiskUsage
from magnetar.bookie.storage.verify import VerifyReport

__all__ = [
    "CORRUPT_FILE",
    "CRC",
    "DEFAULT_MAP_SIZE",
    "ENTRY_HEAD",
    "ENTRY_KEY",
    "FORMAT",
    "FORMAT_KEY",
    "JOURNAL_DIR",
    "JOURNAL_ENV",
    "JOURNAL_KEY",
    "JOURNAL_RECORD",
    "LEDGER_KEY",
    "LEDGER_STATE",
    "LEDGER_STATE_V2",
    "OPEN_FILE",
    "REPLAY_CHUNK_OPS",
    "BookieStorage",
    "DiskUsage",
    "StorageCorrupt",
    "VerifyReport",
    "decode_record",
    "journal_default",
    "verify_directory",
]
