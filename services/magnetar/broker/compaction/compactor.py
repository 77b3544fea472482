"""The compactor: the latest message of every key, written to a new compacted ledger.

Pulsar's two-phase compaction over the topic's *compacted view* (the previous compacted ledger,
then the topic after the previous horizon, up to the new horizon, the last entry stored when the
run starts):

1. read everything once and remember, per key, the position (entry and batch index) of its latest
   message; a message with an empty payload is a tombstone and forgets its key; a message
   without a key is dropped (Pulsar 3.2+, ``topicCompactionRetainNullKey=false``) unless
   ``retain_null_key``;
2. read it all again and write the survivors, in order, to a new ledger, each under its original
   position (``view.encode_compacted``). An entry whose messages all survive is copied as stored;
   a batch that loses some is rewritten with an empty placeholder record at each dropped index and
   those indexes listed in its meta as ``cx`` (WIRE.md R46c), so the survivors keep their batch
   indexes and the dispatcher hands ``cx`` to the client as acknowledged indexes (R20c).

A chunked message (chunk keys in the meta, WIRE.md R41a) is one message spread over entries whose
payload slices cannot be decoded alone: it is keyed by its meta ``k``, its last chunk decides
whether it is the latest of its key, and all its chunks survive or none.

An end-to-end encrypted entry (WIRE.md R114, R116) cannot be decoded here either (the broker has no
keys): as Pulsar's compactor does with an unreadable batch, it is one unit keyed by its meta ``k``,
kept whole and still encrypted when it is the latest of that key. Its tombstones are invisible here,
so a deleted key's last (encrypted, null-value) entry stays, and a batch of mixed keys counts as its
first key only: encrypt unbatched or with key-based batching to compact per key.

The caller owns the metadata: it gets the new ledger through ``create_ledger`` (so it can record
it as pending before anything is written) and installs the resulting view.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from magnetar.broker.compaction.view import CompactedView, encode_compacted, position_key, removed_indexes
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.write_handle import WriteHandle
from magnetar.managed_ledger import ManagedLedger, Position
from magnetar.protocol.batch import decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.compression import compress
from magnetar.protocol.entry import META_ENCRYPTION_KEYS, EntryMeta, decode_entry, encode_entry

# Topic entries per read, and compacted entries in flight to the bookies at most.
READ_CHUNK = 1000
MAX_IN_FLIGHT = 1000
# What a dropped message of a rewritten batch becomes: an empty record (payload, properties,
# key, event time, sequence id) the client never hands out (its index is in ``cx``).
_PLACEHOLDER: list[Any] = [b"", {}, None, 0, 0]

# A key's latest message: (position key, batch index), or the uuid of a chunked message.
Latest = tuple[int, int] | str


@dataclass(slots=True)
class CompactionResult:
    view: CompactedView
    # Messages read in phase two (the previous view's survivors and the new data) and kept.
    messages_read: int
    messages_kept: int
    bytes_read: int

    @property
    def removed(self) -> int:
        return self.messages_read - self.messages_kept


def _chunk_uuid(meta: EntryMeta) -> str | None:
    uuid = meta.get("uuid")
    return str(uuid) if uuid is not None and "cn" in meta else None


class _Source:
    """The compacted view as the compactor reads it: previous survivors, then the topic after
    the previous horizon up to ``horizon``."""

    def __init__(self, ml: ManagedLedger, previous: CompactedView | None, horizon: Position) -> None:
        self.ml = ml
        self.previous = previous
        self.horizon = horizon
        self.start = (
            Position(previous.horizon.ledger_id, previous.horizon.entry_id + 1) if previous else ml.first_position
        )

    async def entries(self) -> AsyncIterator[list[tuple[Position, bytes]]]:
        if self.previous is not None:
            async for chunk in self.previous.chunks():
                yield chunk
        pos = self.start
        while pos <= self.horizon:
            got = await self.ml.read_entries(pos, READ_CHUNK)
            if not got:
                return
            within = [(p, d) for p, d in got if p <= self.horizon]
            if within:
                yield within
            if len(within) < len(got):
                return
            pos = Position(got[-1][0].ledger_id, got[-1][0].entry_id + 1)


def _records(meta: EntryMeta, payload: bytes) -> list[list[Any]]:
    return decode_batch(meta, payload)


async def _phase_one(source: _Source, retain_null_key: bool) -> dict[str | None, Latest]:
    latest: dict[str | None, Latest] = {}
    async for chunk in source.entries():
        for pos, stored in chunk:
            meta, payload = decode_entry(stored)
            uuid = _chunk_uuid(meta)
            if uuid is not None:
                key = meta.get("k")
                if key is not None and int(meta.get("cid", 0)) == int(meta.get("cn", 1)) - 1:
                    latest[key] = uuid
                continue
            pk = position_key(pos)
            if META_ENCRYPTION_KEYS in meta:  # opaque: one unit under its meta key (WIRE.md R116)
                key = meta.get("k")
                if key is not None:
                    latest[key] = (pk, -1)
                continue
            dropped = removed_indexes(meta)
            for i, rec in enumerate(_records(meta, payload)):
                if i in dropped:
                    continue
                key = rec[2]
                if key is None and not retain_null_key:
                    continue
                if key is not None and not rec[0]:
                    latest.pop(key, None)  # a tombstone
                elif key is not None:
                    latest[key] = (pk, i)
        await asyncio.sleep(0)  # let the broker breathe between chunks
    return latest


def _rewrite(meta: EntryMeta, records: list[list[Any]], keep: set[int]) -> bytes:
    """A batch entry with only ``keep`` left: the others become placeholders listed in ``cx``."""
    raw = msgpack.packb([rec if i in keep else _PLACEHOLDER for i, rec in enumerate(records)], use_bin_type=True)
    payload = compress(int(meta.get("comp", 0)), raw)
    new: dict[str, Any] = dict(meta)
    new["crc"] = crc32c(payload)
    new["usize"] = len(raw)
    new["cx"] = [i for i in range(len(records)) if i not in keep]
    return encode_entry(new, payload)  # type: ignore[arg-type]


async def compact(
    ml: ManagedLedger,
    ledgers: LedgerManager,
    previous: CompactedView | None,
    create_ledger: Callable[[], Awaitable[WriteHandle]],
    *,
    retain_null_key: bool = False,
) -> CompactionResult | None:
    """Compact ``ml`` up to its last stored entry; None when nothing was stored since ``previous``."""
    horizon = ml.last_confirmed
    source = _Source(ml, previous, horizon)
    if not ml.is_readable(horizon) or (previous is not None and horizon <= previous.horizon):
        return None
    latest = await _phase_one(source, retain_null_key)
    handle = await create_ledger()
    pending: deque[asyncio.Future[int]] = deque()
    index: array[int] = array("q")
    read = kept = nbytes = 0
    async for chunk in source.entries():
        for pos, stored in chunk:
            nbytes += len(stored)
            meta, payload = decode_entry(stored)
            uuid = _chunk_uuid(meta)
            if uuid is not None:
                out: bytes | None = stored if latest.get(meta.get("k")) == uuid else None
                if int(meta.get("cid", 0)) == int(meta.get("cn", 1)) - 1:
                    read += 1
                    kept += out is not None
            elif META_ENCRYPTION_KEYS in meta:  # kept whole and encrypted, or not at all
                key = meta.get("k")
                survives = latest.get(key) == (position_key(pos), -1) if key is not None else retain_null_key
                out = stored if survives else None
                read += int(meta.get("n", 1))
                kept += int(meta.get("n", 1)) if survives else 0
            else:
                pk = position_key(pos)
                dropped = removed_indexes(meta)
                records = _records(meta, payload)
                keep = {
                    i
                    for i, rec in enumerate(records)
                    if i not in dropped
                    and ((rec[2] is None and retain_null_key) or (rec[2] is not None and latest.get(rec[2]) == (pk, i)))
                }
                read += len(records) - len(dropped)
                kept += len(keep)
                if not keep:
                    out = None
                elif len(keep) == len(records):
                    out = stored
                else:
                    out = _rewrite(meta, records, keep)
            if out is None:
                continue
            index.append(position_key(pos))
            pending.append(handle.append_nowait(encode_compacted(pos, out)))
            while len(pending) >= MAX_IN_FLIGHT:
                await pending.popleft()
        await asyncio.sleep(0)
    while pending:
        await pending.popleft()
    await handle.close()
    view = CompactedView(ledgers, handle.ledger_id, horizon, len(index), handle.length, index)
    return CompactionResult(view, read, kept, nbytes)


def now_ms() -> int:
    return int(time.time() * 1000)
