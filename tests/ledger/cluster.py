"""Test clusters: real bookies (``BookieStorage`` behind ``LocalBookieClient``) and the real LMDB
metadata store, with a fault-injecting wrapper so tests can kill a bookie or delay its acknowledgements.

The wrapper never fakes storage: an add always goes to the real bookie first; faults only decide
what the ledger layer *hears* (an error instead of an ack, or an ack later), which is exactly what a
crashed or slow bookie looks like from the writer's side.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.bookie_api import BookieClient, ReadResult
from magnetar.ledger.manager import LedgerManager
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol.errors import NotConnected


class FaultyBookie:
    """A real bookie client whose answers the test can take away (``kill``), hold back
    (``hold_acks``, ``stall_adds``) or spoil (``fail_reads``, ``fail_fences``, ``corrupt_reads``)."""

    def __init__(self, inner: BookieClient, storage: BookieStorage) -> None:
        self.inner = inner
        self.storage = storage
        self.dead = False
        self.fail_reads = False
        self.fail_fences = False
        self.corrupt_reads = False
        self.adds_sent = 0
        self._held: set[int] | None = set()  # entry ids whose acks wait; None = all
        self._stalled: set[int] | None = set()  # entry ids whose adds wait before storing
        self._release = asyncio.Event()
        self._stored: dict[tuple[int, int], asyncio.Event] = {}

    @property
    def bookie_id(self) -> str:
        return self.inner.bookie_id

    # -- fault controls

    def kill(self) -> None:
        """From now on every call fails with ``NotConnected``; held acks are lost."""
        self.dead = True
        self._release.set()

    def hold_acks(self, entries: set[int] | None = None) -> None:
        """Store adds of ``entries`` (all if None) but delay their acknowledgement."""
        self._held = None if entries is None else set(entries)
        self._rearm()

    def stall_adds(self, entries: set[int] | None = None) -> None:
        """Hold writer adds of ``entries`` (all if None) *before* storing them, as if the request
        were stuck in the network. Recovery adds pass."""
        self._stalled = None if entries is None else set(entries)
        self._rearm()

    def _rearm(self) -> None:
        if self._release.is_set() and not self.dead:
            self._release = asyncio.Event()

    def release(self) -> None:
        self._held = set()
        self._stalled = set()
        self._release.set()

    def stored(self, ledger_id: int, entry_id: int) -> asyncio.Event:
        """Set once this bookie has durably stored the entry (whether or not it acked yet)."""
        return self._stored.setdefault((ledger_id, entry_id), asyncio.Event())

    def _check(self) -> None:
        if self.dead:
            raise NotConnected(f"bookie {self.bookie_id} is down")

    # -- BookieClient

    async def add_entry(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> None:
        self._check()
        self.adds_sent += 1
        if not recovery and (self._stalled is None or entry_id in self._stalled):
            await self._release.wait()
            self._check()
        await self.inner.add_entry(ledger_id, entry_id, data, crc, lac, recovery=recovery)
        self.stored(ledger_id, entry_id).set()
        if not recovery and (self._held is None or entry_id in self._held):
            await self._release.wait()
        self._check()

    def add_entry_nowait(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> asyncio.Future[None]:
        return asyncio.ensure_future(self.add_entry(ledger_id, entry_id, data, crc, lac, recovery=recovery))

    async def read_entry(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> ReadResult:
        self._check()
        if self.fail_reads:
            raise NotConnected(f"bookie {self.bookie_id}: reads fail")
        result = await self.inner.read_entry(ledger_id, entry_id, fence=fence)
        if self.corrupt_reads:
            flipped = bytes([result.data[0] ^ 0xFF]) + result.data[1:] if result.data else b"x"
            return ReadResult(flipped, result.crc, result.lac)
        return result

    async def read_lac(self, ledger_id: int) -> int:
        self._check()
        return await self.inner.read_lac(ledger_id)

    async def fence(self, ledger_id: int) -> int:
        self._check()
        if self.fail_fences:
            raise NotConnected(f"bookie {self.bookie_id}: fence request lost")
        return await self.inner.fence(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        self._check()
        await self.inner.delete_ledger(ledger_id)


class Resolver:
    """``BookieResolver`` over the test's bookies; a dead bookie is not writable (its
    registration would have expired)."""

    def __init__(self, bookies: dict[str, FaultyBookie]) -> None:
        self.bookies = bookies

    def client(self, bookie_id: str) -> BookieClient:
        return self.bookies[bookie_id]

    async def writable_bookies(self) -> list[str]:
        return [b for b, c in self.bookies.items() if not c.dead]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = LmdbMetadataStore(root / "metadata")
        self.bookies: dict[str, FaultyBookie] = {}
        self.resolver = Resolver(self.bookies)
        self.manager = LedgerManager(self.store, self.resolver)

    def add_bookie(self) -> FaultyBookie:
        bookie_id = f"bookie-{len(self.bookies)}"
        storage = BookieStorage(self.root / bookie_id, sync=False)
        bookie = FaultyBookie(LocalBookieClient(storage, bookie_id), storage)
        self.bookies[bookie_id] = bookie
        return bookie

    def bookie(self, bookie_id: str) -> FaultyBookie:
        return self.bookies[bookie_id]

    async def close(self) -> None:
        for bookie in self.bookies.values():
            bookie.release()
            await bookie.storage.close()
        await self.store.close()
