"""Dispatch tests: a real in-process storage stack (LMDB metadata, one LMDB bookie, ledgers, a
managed ledger) under a real ``Subscription``; only the client connection is replaced, by
``FakeSink``, which records what the broker pushes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.resolver import StaticBookieResolver
from magnetar.bookie.storage import BookieStorage
from magnetar.broker.subscriptions.consumer import ServerConsumer
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.ledger.manager import LedgerManager
from magnetar.managed_ledger import ManagedLedger, ManagedLedgerConfig, Position
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.protocol.batch import encode_batch, make_record
from magnetar.protocol.entry import EntryMeta, encode_entry

CONFIG = ManagedLedgerConfig(cursor_flush_delay=0.001)
TOPIC = "persistent://public/default/dispatch"


@dataclass
class Delivered:
    consumer_id: int
    pos: Position
    meta: EntryMeta
    payload: bytes
    redelivery_count: int
    acked: Sequence[int] | None

    @property
    def key(self) -> str:
        return str(self.meta.get("k", ""))


class FakeSink:
    """Stands in for the client connection: records messages and active-consumer changes."""

    def __init__(self) -> None:
        self.messages: list[Delivered] = []
        self.active_changes: list[tuple[int, bool]] = []
        self._event = asyncio.Event()

    def send_message(
        self,
        consumer_id: int,
        pos: Position,
        meta: EntryMeta,
        payload: bytes,
        redelivery_count: int,
        acked: Sequence[int] | None = None,
    ) -> None:
        self.messages.append(Delivered(consumer_id, pos, meta, payload, redelivery_count, acked))
        self._event.set()

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.active_changes.append((consumer_id, is_active))
        self._event.set()

    def of(self, consumer_id: int) -> list[Delivered]:
        return [m for m in self.messages if m.consumer_id == consumer_id]

    async def wait_until(self, predicate: Callable[[], bool], within: float = 5.0) -> None:
        deadline = time.monotonic() + within
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"condition not met in {within}s; got {len(self.messages)} messages")
            self._event.clear()
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except TimeoutError:
                pass


async def dispatch_idle(sub: Subscription) -> None:
    """Wait until the subscription's dispatch loop has run out of work (to assert a non-event)."""
    while sub._task is not None and not sub._task.done():
        await asyncio.wait_for(asyncio.shield(sub._task), 5)


async def eventually(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``predicate`` (for state with no event to await) until it holds or the deadline passes."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {within}s")
        await asyncio.sleep(0.001)


@contextlib.asynccontextmanager
async def open_ml(tmp_path: Path, config: ManagedLedgerConfig = CONFIG) -> AsyncIterator[ManagedLedger]:
    """A managed ledger on its own metadata store and one in-process bookie, closed afterwards."""
    store = await LmdbMetadataStore.open(tmp_path / "meta")
    storage = BookieStorage(tmp_path / "bookie")
    ledgers = LedgerManager(store, StaticBookieResolver({"b1": LocalBookieClient(storage, "b1")}))
    ml = await ManagedLedger.open(f"public/default/t-{uuid.uuid4().hex[:8]}", store, ledgers, config)
    yield ml
    await ml.close()
    await storage.close()
    await store.close()


@pytest.fixture
async def ml(tmp_path: Path) -> AsyncIterator[ManagedLedger]:
    async with open_ml(tmp_path) as opened:
        yield opened


async def publish(
    ml: ManagedLedger,
    *payloads: bytes,
    key: str | None = None,
    deliver_at: int | None = None,
) -> Position:
    """Store one entry (a batch of ``payloads``) as a producer would."""
    records = [make_record(p, None, key, 0, i) for i, p in enumerate(payloads)]
    meta, payload = encode_batch(
        records, producer_name="p", first_sequence_id=0, batched=len(payloads) > 1, key=key, deliver_at=deliver_at
    )
    return await ml.add_entry(encode_entry(meta, payload), messages=len(payloads))


async def subscription(ml: ManagedLedger, sub_type: str, topic: str = TOPIC, name: str = "sub") -> Subscription:
    cursor = await ml.open_cursor(name, start_at_earliest=True)
    return Subscription(topic, ml, cursor, sub_type)


def consumer(
    sink: FakeSink,
    cid: int,
    name: str | None = None,
    *,
    permits: int = 0,
    priority: int = 0,
    mode: str | None = None,
    ranges: list[tuple[int, int]] | None = None,
    out_of_order: bool = False,
) -> ServerConsumer:
    return ServerConsumer(
        cid,
        name or f"c{cid}",
        sink,
        permits=permits,
        priority_level=priority,
        key_shared_mode=mode,
        key_ranges=ranges,
        allow_out_of_order=out_of_order,
    )
