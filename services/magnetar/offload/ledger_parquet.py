"""One closed ledger as one Parquet object, with an index to find its entries by id or publish time.

Why Parquet: an offloaded ledger should be readable by the tools that query a lake, not only by the
broker. The object holds one row per message with exactly the columns of the Spark data source
(``columnar.message_rows``: built by the same code, so a ledger read from the bookies and the same
ledger read from its object give the same rows), and ``spark.read.parquet`` or
``pyarrow.parquet.read_table`` read it as it is.

Why the broker can still serve it: consumers must get each stored entry back *byte for byte* (its
checksum, its batch, its ids). Two hidden columns make that possible:

- ``__entry_meta``, on the first row of each entry (null on the others): the entry's metadata map
  exactly as its msgpack bytes were stored, sliced out of the entry rather than re-encoded;
- ``__raw_payload``, on the same row, only where the rows cannot give the stored payload back:
  a compressed batch (the rows hold the messages decompressed, and another version of a codec may
  compress them to other bytes), or any entry whose rebuild differed from the original when it was
  written (a record with an ordering key, nil properties, ...). The writer rebuilds every entry
  from its rows and compares, so this decision is checked, never assumed. An entry whose batch
  does not decode, or holds no message, is kept too: one row marked ``magnetar.entry.unreadable``
  (``columnar.message_rows.UNREADABLE``) carries it, so one bad send never keeps a ledger on the
  bookies.

Rebuilding an entry: ``[meta, payload]`` in msgpack (``protocol.entry.encode_entry``), where
``payload`` is ``__raw_payload`` when present; else the row's ``payload`` for an opaque entry (a
chunk or an encrypted entry is one row whose payload is the stored payload itself, so nothing is
stored twice); else the msgpack batch of the entry's rows' records (``protocol.batch``). The
rebuilt payload must match the CRC32C in its own meta, or the read fails.

Row groups hold whole entries, about ``row_group_bytes`` of stored entries each (the store's read
buffer), so a seek reads one row group. A read fetches the footer and the row groups it needs as
ranged reads, checks each against the index (``ledger_index``) before Parquet decodes it, and never
reads the rest of the object.
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgpack
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq  # type: ignore[import-untyped, unused-ignore]

from magnetar.columnar.message_rows import RowColumns, StoredEntry, ValueDecoding, is_opaque
from magnetar.offload.errors import CorruptObject
from magnetar.offload.ledger_index import LedgerIndex, RowGroupInfo, check_object
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import EntryMeta

__all__ = [
    "ENTRY_META_COLUMN",
    "RAW_PAYLOAD_COLUMN",
    "AsyncLedgerObjectReader",
    "LedgerIndex",
    "LedgerObjectReader",
    "RowGroupInfo",
    "check_object",
    "entry_at_time",
    "read_entries",
    "split_entry",
    "write_ledger",
]

ENTRY_META_COLUMN = "__entry_meta"
RAW_PAYLOAD_COLUMN = "__raw_payload"

_PARQUET_MAGIC = b"PAR1"
_FOOTER_KEPT = 1 << 20  # a footer larger than this (thousands of row groups) is not cross-checked
_ARRAY_OF_TWO = b"\x92"  # msgpack fixarray header of [meta, payload]
# Columns a reader may filter or sort on keep their Parquet statistics (row-group pushdown in
# Spark); the payloads' would only bloat the footer.
_STATISTICS = ["topic", "partition", "ledger_id", "entry_id", "batch_index", "publish_time", "event_time", "key"]
_DICTIONARY = ["topic", "producer_name", "key"]
_REBUILD_COLUMNS = [
    "entry_id",
    "event_time",
    "key",
    "properties",
    "payload",
    "sequence_id",
    ENTRY_META_COLUMN,
    RAW_PAYLOAD_COLUMN,
]


def split_entry(data: bytes) -> tuple[bytes, EntryMeta, bytes]:
    """A stored entry's meta as its exact msgpack bytes, the meta decoded, and the payload."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    try:
        count = unpacker.read_array_header()
        start = unpacker.tell()
        meta = unpacker.unpack()
        end = unpacker.tell()
        payload = unpacker.unpack()
    except Exception as exc:  # msgpack's errors are not all ValueErrors (OutOfData)
        raise ValueError(f"not a [meta, payload] entry: {type(exc).__name__}: {exc}") from None
    if count != 2 or not isinstance(meta, dict) or not isinstance(payload, bytes) or unpacker.tell() != len(data):
        raise ValueError("not a [meta, payload] entry")
    return data[start:end], meta, payload  # type: ignore[return-value]


def _entry_bytes(meta_bytes: bytes, payload: bytes) -> bytes:
    """``encode_entry(meta, payload)`` with the meta's stored bytes."""
    packed: bytes = msgpack.packb(payload, use_bin_type=True)
    return _ARRAY_OF_TWO + meta_bytes + packed


def _batch_payload(
    payloads: Sequence[bytes | None],
    properties: Sequence[Any],
    keys: Sequence[str | None],
    event_us: Sequence[int | None],
    sequence_ids: Sequence[int],
) -> bytes:
    """The uncompressed batch of these rows' records, as ``protocol.batch.encode_batch`` packs it."""
    records = [
        [p, dict(props or {}), k, 0 if et is None else et // 1000, seq]
        for p, props, k, et, seq in zip(payloads, properties, keys, event_us, sequence_ids, strict=True)
    ]
    packed: bytes = msgpack.packb(records, use_bin_type=True)
    return packed


class _Sink:
    """Where pyarrow writes: passes bytes on to ``out``, counting them and their CRC32C, whole and
    per span (a row group, the footer). It never closes ``out``: the caller owns it."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.size = 0
        self.crc = 0
        self.span_start = 0
        self.span_crc = 0
        self.chunks: list[bytes] = []  # of the current span while it is small enough to be the footer

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.out.write(view)
        self.size += len(view)
        self.crc = crc32c(view, self.crc)
        self.span_crc = crc32c(view, self.span_crc)
        if self.size - self.span_start <= _FOOTER_KEPT:
            self.chunks.append(bytes(view))
        return len(view)

    def span(self) -> tuple[int, int, int]:
        """``(offset, length, crc32c)`` of the bytes since the last span; starts the next one."""
        out = (self.span_start, self.size - self.span_start, self.span_crc)
        self.span_start, self.span_crc = self.size, 0
        self.chunks = []
        return out

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


@dataclass
class _Group:
    """The entries of the row group being filled (the rows themselves are in ``RowColumns``)."""

    meta: list[bytes | None] = field(default_factory=list)
    raw: list[bytes | None] = field(default_factory=list)
    first: int = -1
    last: int = -1
    min_pt: int = 0
    max_pt: int = 0
    stored_bytes: int = 0


def write_ledger(
    entries: Iterable[tuple[int, bytes]],
    out: BinaryIO,
    *,
    topic: str,
    partition: int,
    ledger_id: int,
    row_group_bytes: int,
    values: ValueDecoding | None = None,
) -> LedgerIndex:
    """Write ``entries`` (``(entry id, stored entry bytes)``, ids increasing) to ``out`` as one
    Parquet object; returns its index. ``values``: the topic's schema decoder for the typed
    ``schema_version`` / ``value`` columns (None: no such columns)."""
    cols = RowColumns(topic, partition, ledger_id, values=values)
    schema = cols.schema.append(pa.field(ENTRY_META_COLUMN, pa.binary())).append(
        pa.field(RAW_PAYLOAD_COLUMN, pa.binary())
    )
    sink = _Sink(out)
    writer = pq.ParquetWriter(
        sink,
        schema,
        compression="zstd",
        use_dictionary=_DICTIONARY,
        write_statistics=_STATISTICS,
        write_page_checksum=True,
    )
    sink.span()  # the leading magic bytes belong to no row group
    groups: list[RowGroupInfo] = []
    group = _Group()
    entry_count = message_count = 0
    previous = -1

    def flush() -> None:
        nonlocal group
        batch = cols.flush()
        arrays = [*batch.columns, pa.array(group.meta, pa.binary()), pa.array(group.raw, pa.binary())]
        table = pa.Table.from_batches([pa.RecordBatch.from_arrays(arrays, schema=schema)])
        writer.write_table(table, row_group_size=table.num_rows)
        offset, length, crc = sink.span()
        groups.append(
            RowGroupInfo(group.first, group.last, group.min_pt, group.max_pt, offset, length, table.num_rows, crc)
        )
        group = _Group()

    for entry_id, data in entries:
        where = f"topic {topic} ledger {ledger_id} entry {entry_id}"
        if entry_id <= previous:
            raise ValueError(f"{where}: entry ids must increase (after {previous})")
        previous = entry_id
        try:
            meta_bytes, meta, payload = split_entry(data)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        start = len(cols)
        stored = StoredEntry(entry_id, meta, payload)
        try:
            cols.add(stored)
        except (ValueError, TypeError) as exc:  # a producer's bad batch still has to be kept
            cols.truncate(start)
            cols.add_unreadable(stored, str(exc))
        if len(cols) == start:
            cols.add_unreadable(stored, "a batch of no messages")
        rows = len(cols) - start
        raw = None if _rebuilt(cols, start, meta_bytes, meta) == data else payload
        if raw is not None and _entry_bytes(meta_bytes, payload) != data:
            raise ValueError(f"{where}: not in the layout protocol.entry.encode_entry writes")
        group.meta.append(meta_bytes)
        group.raw.append(raw)
        group.meta.extend([None] * (rows - 1))
        group.raw.extend([None] * (rows - 1))
        publish_ms = int(meta.get("pt", 0))
        if group.first < 0:
            group.first, group.min_pt, group.max_pt = entry_id, publish_ms, publish_ms
        group.last = entry_id
        group.min_pt, group.max_pt = min(group.min_pt, publish_ms), max(group.max_pt, publish_ms)
        group.stored_bytes += len(data)
        entry_count += 1
        message_count += rows
        if group.stored_bytes >= row_group_bytes:
            flush()
    if group.first >= 0:
        flush()
    writer.close()
    footer = b"".join(sink.chunks)
    footer_offset, footer_length, footer_crc = sink.span()
    if footer_length == len(footer):
        _check_spans(pq.read_metadata(io.BytesIO(_PARQUET_MAGIC + footer)), groups)
    return LedgerIndex(
        topic,
        partition,
        ledger_id,
        entry_count,
        message_count,
        sink.size,
        sink.crc,
        footer_offset,
        footer_crc,
        groups,
    )


def _check_spans(metadata: Any, groups: list[RowGroupInfo]) -> None:
    """The spans recorded while writing hold each row group's column chunks, as the footer says.

    The spans come from where the writer's bytes fell between calls; this makes sure a pyarrow that
    buffered a row group past its call could not go unnoticed (its reads would all fail their CRC).
    """
    if metadata.num_row_groups != len(groups):
        raise RuntimeError(f"pyarrow wrote {metadata.num_row_groups} row groups, not {len(groups)}")
    for i, g in enumerate(groups):
        rg = metadata.row_group(i)
        for j in range(rg.num_columns):
            col = rg.column(j)
            start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            if rg.num_rows != g.rows or start < g.offset or start + col.total_compressed_size > g.offset + g.length:
                raise RuntimeError(f"pyarrow wrote row group {i} outside the bytes written for it")


def _rebuilt(cols: RowColumns, start: int, meta_bytes: bytes, meta: EntryMeta) -> bytes | None:
    """The entry as its rows (from ``start`` on) give it back, or None where they cannot."""
    if is_opaque(meta):
        payload = cols.payload[start]
        return None if payload is None else _entry_bytes(meta_bytes, payload)
    if int(meta.get("comp", 0)) != 0:
        return None
    return _entry_bytes(
        meta_bytes,
        _batch_payload(
            cols.payload[start:],
            cols.properties[start:],
            cols.key[start:],
            cols.event_us[start:],
            cols.sequence_id[start:],
        ),
    )


class _Spans:
    """A read-only file of the object's size that holds only the verified byte ranges, so that
    pyarrow decodes nothing that was not checked (a read elsewhere is a bug, and says so)."""

    def __init__(self, size: int, spans: list[tuple[int, bytes]]) -> None:
        self.size = size
        self.spans = spans
        self.pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        n = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        for offset, data in self.spans:
            if offset <= self.pos and self.pos + n <= offset + len(data):
                out = data[self.pos - offset : self.pos - offset + n]
                self.pos += n
                return out
        raise OSError(f"read of {n} bytes at {self.pos}: outside the verified ranges")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return False


class _ObjectParts:
    """What every read of one object shares, whatever fetches its bytes: the ranges to fetch (the
    footer once, then row groups), their checks against the index, and the decoding."""

    def __init__(self, index: LedgerIndex) -> None:
        self.index = index
        self.metadata: Any = None  # the Parquet footer, once read

    def footer_range(self) -> tuple[str, int, int, int]:
        index = self.index
        return "footer", index.footer_offset, index.size - index.footer_offset, index.footer_crc32c

    def group_range(self, i: int) -> tuple[str, int, int, int]:
        g = self.index.row_groups[i]
        return f"row group {i}", g.offset, g.length, g.crc32c

    def checked(self, what: str, offset: int, length: int, crc: int, data: bytes) -> bytes:
        lid = self.index.ledger_id
        if len(data) != length:
            raise CorruptObject(f"ledger {lid} object: {what} truncated ({len(data)} of {length} bytes at {offset})")
        got = crc32c(data)
        if got != crc:
            raise CorruptObject(f"ledger {lid} object: {what} CRC32C {got:#010x}, the index says {crc:#010x}")
        return data

    def parse_footer(self, footer: bytes) -> None:
        self.metadata = pq.read_metadata(io.BytesIO(_PARQUET_MAGIC + footer))

    def table(self, i: int, data: bytes, columns: list[str]) -> Any:
        """Row group ``i`` (its checked bytes) as a ``pyarrow.Table`` of ``columns``."""
        pf = pq.ParquetFile(_Spans(self.index.size, [(self.index.row_groups[i].offset, data)]), metadata=self.metadata)
        return pf.read_row_group(i, columns=columns)

    def group_at_time(self, publish_ms: int) -> int | None:
        """The first row group whose latest publish time reaches ``publish_ms``: earlier groups hold
        no such entry, and this one holds the first (publish times need not be ordered)."""
        return next((i for i, g in enumerate(self.index.row_groups) if g.max_publish_ms >= publish_ms), None)

    def first_at_time(self, i: int, table: Any, publish_ms: int) -> int:
        times = table.column("publish_time").cast(pa.int64()).to_pylist()
        for entry_id, us in zip(table.column("entry_id").to_pylist(), times, strict=True):
            if us // 1000 >= publish_ms:
                return int(entry_id)
        raise CorruptObject(f"ledger {self.index.ledger_id} object: row group {i} has no publish time >= its max")


_TIME_COLUMNS = ["entry_id", "publish_time"]


class LedgerObjectReader(_ObjectParts):
    """Reads one ledger object through ranged reads of a seekable ``source`` (file-like), each
    checked against the index before it is decoded. Keep it to serve several reads of one object:
    the footer is fetched once."""

    def __init__(self, source: BinaryIO, index: LedgerIndex) -> None:
        super().__init__(index)
        self.source = source

    def _fetch(self, what: str, offset: int, length: int, crc: int) -> bytes:
        self.source.seek(offset)
        return self.checked(what, offset, length, crc, self.source.read(length))

    def row_group(self, i: int, columns: list[str]) -> Any:
        if self.metadata is None:
            self.parse_footer(self._fetch(*self.footer_range()))
        return self.table(i, self._fetch(*self.group_range(i)), columns)

    def read_entries(self, first: int, last: int) -> list[tuple[int, bytes]]:
        groups = self.index.groups_for(first, last)
        return [e for i in groups for e in _entries_of(self.row_group(i, _REBUILD_COLUMNS), self.index, first, last)]

    def entry_at_time(self, publish_ms: int) -> int | None:
        i = self.group_at_time(publish_ms)
        return None if i is None else self.first_at_time(i, self.row_group(i, _TIME_COLUMNS), publish_ms)


# Fetches ``length`` bytes at ``offset`` of the object (a ranged read of the store).
Fetch = Callable[[int, int], Awaitable[bytes]]


class AsyncLedgerObjectReader(_ObjectParts):
    """``LedgerObjectReader`` for an event loop: the object's bytes come from ``fetch`` (e.g. an
    object store's ranged reads), with the same checks."""

    def __init__(self, fetch: Fetch, index: LedgerIndex) -> None:
        super().__init__(index)
        self.fetch = fetch

    async def _fetch(self, what: str, offset: int, length: int, crc: int) -> bytes:
        return self.checked(what, offset, length, crc, await self.fetch(offset, length))

    async def row_group(self, i: int, columns: list[str]) -> Any:
        if self.metadata is None:
            self.parse_footer(await self._fetch(*self.footer_range()))
        return self.table(i, await self._fetch(*self.group_range(i)), columns)

    async def read_entries(self, first: int, last: int) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        for i in self.index.groups_for(first, last):
            out.extend(_entries_of(await self.row_group(i, _REBUILD_COLUMNS), self.index, first, last))
        return out

    async def entry_at_time(self, publish_ms: int) -> int | None:
        i = self.group_at_time(publish_ms)
        return None if i is None else self.first_at_time(i, await self.row_group(i, _TIME_COLUMNS), publish_ms)


def _entries_of(table: Any, index: LedgerIndex, first: int, last: int) -> list[tuple[int, bytes]]:
    """Rebuild the stored entries ``first`` .. ``last`` of one row group's rows, each checked
    against its own CRC32C."""
    ids = table.column("entry_id").to_pylist()
    event_us = table.column("event_time").cast(pa.int64()).to_pylist()
    keys = table.column("key").to_pylist()
    props = table.column("properties").to_pylist()
    payloads = table.column("payload").to_pylist()
    seqs = table.column("sequence_id").to_pylist()
    metas = table.column(ENTRY_META_COLUMN).to_pylist()
    raws = table.column(RAW_PAYLOAD_COLUMN).to_pylist()
    starts = [r for r, m in enumerate(metas) if m is not None]
    if not starts or starts[0] != 0:
        raise CorruptObject(f"ledger {index.ledger_id} object: a row group does not start with an entry")
    out: list[tuple[int, bytes]] = []
    for start, end in zip(starts, [*starts[1:], len(metas)], strict=True):
        entry_id = ids[start]
        if not first <= entry_id <= last:
            continue
        where = f"ledger {index.ledger_id} entry {entry_id}"
        if any(i != entry_id for i in ids[start:end]):
            raise CorruptObject(f"{where}: rows of several entries share its meta")
        meta_bytes: bytes = metas[start]
        meta = msgpack.unpackb(meta_bytes, raw=False, strict_map_key=False)
        payload: bytes | None = raws[start]
        if payload is None and is_opaque(meta):
            payload = payloads[start]
        elif payload is None:
            if int(meta.get("comp", 0)) != 0:
                raise CorruptObject(f"{where}: a compressed entry without its stored payload")
            payload = _batch_payload(
                payloads[start:end], props[start:end], keys[start:end], event_us[start:end], seqs[start:end]
            )
        if payload is None or ("crc" in meta and crc32c(payload) != meta["crc"]):
            raise CorruptObject(f"{where}: the rebuilt payload fails the entry's CRC32C")
        out.append((entry_id, _entry_bytes(meta_bytes, payload)))
    return out


def read_entries(source: BinaryIO, index: LedgerIndex, first: int, last: int) -> list[tuple[int, bytes]]:
    """The stored bytes of entries ``first`` .. ``last`` (inclusive), reading only their row groups."""
    return LedgerObjectReader(source, index).read_entries(first, last)


def entry_at_time(index: LedgerIndex, source: BinaryIO, publish_ms: int) -> int | None:
    """The first entry (by id) published at or after ``publish_ms``; None when every one is earlier.
    Reads one row group: the first whose latest publish time reaches ``publish_ms``."""
    return LedgerObjectReader(source, index).entry_at_time(publish_ms)
