"""Hypothesis strategies: every command of ``protocol/commands/``, built by its constructor."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from magnetar.protocol import commands as c

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
ids = st.integers(min_value=0, max_value=2**63 - 1)
rids = st.integers(min_value=1, max_value=2**32)
text = st.text(max_size=40)
blobs = st.binary(max_size=300)
positions = st.tuples(ids, ids)
optional_text = st.none() | text

entry_meta = st.fixed_dictionaries(
    {"crc": st.integers(min_value=0, max_value=2**32 - 1)},
    optional={
        "pn": text,
        "seq": ids,
        "n": st.integers(min_value=1, max_value=10_000),
        "comp": st.integers(min_value=0, max_value=4),
        "usize": ids,
        "pt": ids,
        "b": st.booleans(),
    },
)


def commands() -> st.SearchStrategy[Any]:
    """Any command of the protocol, in either direction, as its constructor builds it."""
    return st.one_of(
        # client -> broker
        st.builds(c.connect, text, ints, rids),
        st.builds(c.ping),
        st.builds(c.pong),
        st.builds(c.lookup, text, rids),
        st.builds(c.partitioned_metadata, text, rids),
        st.builds(c.producer, text, ids, optional_text, rids),
        st.builds(c.send, ids, ids, entry_meta, blobs),
        st.builds(c.close_producer, ids, rids),
        st.builds(
            c.subscribe,
            text,
            text,
            ids,
            st.sampled_from([c.SUB_EXCLUSIVE, c.SUB_SHARED, c.SUB_FAILOVER, c.SUB_KEY_SHARED]),
            st.sampled_from(["Latest", "Earliest"]),
            optional_text,
            rids,
        ),
        st.builds(c.flow, ids, st.integers(min_value=0, max_value=2**31)),
        st.builds(
            c.ack,
            ids,
            st.sampled_from([c.ACK_INDIVIDUAL, c.ACK_CUMULATIVE]),
            st.lists(positions, max_size=20),
            st.none() | rids,
        ),
        st.builds(c.redeliver, ids, st.none() | st.lists(positions, max_size=20)),
        st.builds(c.close_consumer, ids, rids),
        st.builds(c.unsubscribe, ids, rids),
        st.builds(c.seek, ids, positions, rids),
        # broker -> client
        st.builds(c.connected, rids, text, ints, ids),
        st.builds(c.success, rids),
        st.builds(c.error_frame, st.none() | rids, text, text),
        st.builds(c.lookup_response, rids, text, st.booleans()),
        st.builds(c.partitioned_metadata_response, rids, ids),
        st.builds(c.producer_success, rids, text, ints),
        st.builds(c.send_receipt, ids, ids, ids, ids),
        st.builds(c.send_error, ids, ids, text, text),
        st.builds(c.message, ids, ids, ids, entry_meta, blobs, ids),
        st.builds(c.ack_response, rids),
        st.builds(c.close_producer_pushed, ids),
        st.builds(c.close_consumer_pushed, ids),
        # broker -> bookie, and its answers
        st.builds(c.bk_add, ids, ids, blobs, ids, ints, st.booleans(), rids),
        st.builds(c.bk_read, ids, ids, st.booleans(), rids),
        st.builds(c.bk_read_lac, ids, rids),
        st.builds(c.bk_fence, ids, rids),
        st.builds(c.bk_delete, ids, rids),
        st.builds(c.bk_response, rids),
        st.builds(c.bk_lac_response, rids, ints),
        st.builds(c.bk_read_response, rids, blobs, ids, ints),
        st.builds(c.bk_error, rids, text, text),
    )
