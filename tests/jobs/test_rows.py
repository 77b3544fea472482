"""The Spark source's rows of one stored entry, without Spark: a chunk is one opaque row.

A chunk of a large message cannot be decoded on its own (the source does not reassemble), so
it is handed over whole with the properties that let a job put the message back together.
"""

from __future__ import annotations

from magnetar.columnar.message_rows import CHUNK_COUNT, CHUNK_ID, CHUNK_TOTAL_SIZE, CHUNK_UUID, StoredEntry, entry_rows
from magnetar.protocol.entry import META_CHUNK_ID, META_CHUNK_UUID, META_NUM_CHUNKS, META_TOTAL_CHUNK_SIZE


def test_a_chunk_is_one_row_with_its_chunk_properties_and_its_bytes_as_stored() -> None:
    meta = {
        "pn": "p",
        "seq": 7,
        "pt": 1_700_000_000_000,
        "k": "key",
        META_CHUNK_UUID: "p-7",
        META_CHUNK_ID: 1,
        META_NUM_CHUNKS: 3,
        META_TOTAL_CHUNK_SIZE: 300,
    }
    rows = entry_rows("persistent://public/default/t", -1, 5, StoredEntry(9, meta, b"middle chunk"))  # type: ignore[arg-type]
    assert len(rows) == 1
    row = rows[0]
    assert (row["entry_id"], row["batch_index"], row["payload"]) == (9, -1, b"middle chunk")
    assert (row["key"], row["producer_name"], row["sequence_id"]) == ("key", "p", 7)
    props = dict(row["properties"])
    assert props == {CHUNK_UUID: "p-7", CHUNK_ID: "1", CHUNK_COUNT: "3", CHUNK_TOTAL_SIZE: "300"}
