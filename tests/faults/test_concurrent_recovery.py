"""Five concurrent recoveries of one ledger while its writer keeps adding (e), on real bookie processes.

The in-process version is ``tests/ledger/test_recovery.py``; here the writer and each recovery have
their own etcd session, ``MetadataBookieResolver`` and TCP connections to the three bookie
processes, as five brokers racing to take over a topic would.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from tests.faults.nemesis import record
from tests.support.cluster import LocalCluster

from magnetar.bookie.resolver import MetadataBookieResolver
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_format import LedgerState
from magnetar.metadata.etcd_store import EtcdMetadataStore
from magnetar.protocol.errors import LedgerFenced

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def payload(i: int) -> bytes:
    return f"<entry {i}>".encode() * (1 + i % 7)


@contextlib.asynccontextmanager
async def manager(cluster: LocalCluster) -> AsyncIterator[LedgerManager]:
    store = await EtcdMetadataStore.connect(cluster.metadata_url)
    resolver = MetadataBookieResolver(store)
    try:
        yield LedgerManager(store, resolver)
    finally:
        await resolver.close()
        await store.close()


@pytest.mark.parametrize("cluster", [{"brokers": 0}], indirect=True, ids=["bookies-only"])
async def test_five_concurrent_recoveries_agree_while_the_writer_keeps_adding(cluster: LocalCluster) -> None:
    async with contextlib.AsyncExitStack() as stack:
        writer_mgr = await stack.enter_async_context(manager(cluster))
        recoverers = [await stack.enter_async_context(manager(cluster)) for _ in range(5)]
        handle = await writer_mgr.create(3, 3, 2)
        acked: list[int] = []
        errors: list[BaseException] = []
        warmed_up = asyncio.Event()

        async def keep_writing() -> None:
            i = 0
            while not errors:
                batch = [handle.append_nowait(payload(i + k)) for k in range(8)]
                i += 8
                for outcome in await asyncio.gather(*batch, return_exceptions=True):
                    if isinstance(outcome, BaseException):
                        errors.append(outcome)
                    else:
                        acked.append(outcome)
                if len(acked) >= 200:
                    warmed_up.set()

        writer = asyncio.create_task(keep_writing())
        await asyncio.wait_for(warmed_up.wait(), 30)
        t0 = time.monotonic()
        readers = await asyncio.wait_for(
            asyncio.gather(*(m.open(handle.ledger_id, recovery=True) for m in recoverers)), 60
        )
        t_recovered = time.monotonic()
        await asyncio.wait_for(writer, 30)

        lasts = sorted({r.last_entry_id for r in readers})
        md = await writer_mgr.get_metadata(handle.ledger_id)
        record(
            "e-five-concurrent-recoveries",
            ledger=handle.ledger_id,
            acked=len(acked),
            max_acked=max(acked),
            recovered_last_entry=lasts,
            writer_errors=sorted({type(e).__name__ for e in errors}),
            recovery_s=round(t_recovered - t0, 3),
        )
        assert len(lasts) == 1, f"recoveries disagree: {lasts}"
        (last,) = lasts
        assert acked == list(range(len(acked))), "acknowledgements out of order or with gaps"
        assert max(acked) <= last
        assert all(isinstance(e, LedgerFenced) for e in errors), errors[:3]
        assert (md.state, md.last_entry_id) == (LedgerState.CLOSED, last)
        assert await readers[0].read(0, last) == [payload(i) for i in range(last + 1)]
