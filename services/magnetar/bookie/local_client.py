"""``BookieClient`` for a bookie in the same process: standalone mode skips the TCP hop.

It goes through the same storage calls as the server, so fencing, CRC checks and read-only mode
behave exactly as over the wire; only serialization and the socket are skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.bookie_api import ReadResult


class LocalBookieClient:
    def __init__(self, storage: BookieStorage, bookie_id: str) -> None:
        self._storage = storage
        self._bookie_id = bookie_id

    @property
    def bookie_id(self) -> str:
        return self._bookie_id

    @property
    def read_only(self) -> bool:
        """Whether the bookie refuses adds now (its disk is full): what a cluster's bookie
        publishes in its registration, asked directly (re-checked at most once a second)."""
        return self._storage.check_disk()

    async def add_entry(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> None:
        await self._storage.add_nowait(ledger_id, entry_id, data, crc, lac, recovery=recovery)

    def add_entry_nowait(
        self, ledger_id: int, entry_id: int, data: bytes, crc: int, lac: int, *, recovery: bool = False
    ) -> asyncio.Future[None]:
        """The storage's own future (resolved by its group commit); a refusal before queueing
        (CRC, read-only, closed) comes back as a failed future, as over TCP."""
        try:
            return self._storage.add_nowait(ledger_id, entry_id, data, crc, lac, recovery=recovery)
        except Exception as exc:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            return fut

    def add_entry_callback(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes,
        crc: int,
        lac: int,
        callback: Callable[[BaseException | None], None],
    ) -> None:
        """The write handle's fast path (``WriteHandle._send``): the storage calls ``callback``
        straight from the group commit's resolution, one turn of the loop sooner than a future."""
        self._storage.add_callback(ledger_id, entry_id, data, crc, lac, callback)

    async def read_entry(self, ledger_id: int, entry_id: int, *, fence: bool = False) -> ReadResult:
        if fence:
            await self._storage.fence(ledger_id)
        return self._storage.read_sync(ledger_id, entry_id)

    async def read_lac(self, ledger_id: int) -> int:
        return self._storage.read_lac_sync(ledger_id)

    async def fence(self, ledger_id: int) -> int:
        return await self._storage.fence(ledger_id)

    async def delete_ledger(self, ledger_id: int) -> None:
        await self._storage.delete_ledger(ledger_id)
