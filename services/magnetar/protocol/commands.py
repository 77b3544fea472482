"""Command names and their required fields, for the client↔broker and broker↔bookie protocols.

Commands are plain msgpack maps ``{"t": <name>, ...}`` rather than classes: they are built and
read on the hot path, and a map is what msgpack decodes to for free. ``missing_fields`` is the
one validation step servers run before dispatching, so that a well-formed frame carrying a
command with missing fields gets an ``InvalidCommand`` error instead of a ``KeyError``.
WIRE.md beside this module documents every command.
"""

from __future__ import annotations

from typing import Any, Final

PROTOCOL_VERSION: Final = 1

# --- client -> broker
CONNECT: Final = "connect"
PING: Final = "ping"
PONG: Final = "pong"
LOOKUP: Final = "lookup"
PARTITIONED_METADATA: Final = "partitioned_metadata"
PRODUCER: Final = "producer"
SEND: Final = "send"
CLOSE_PRODUCER: Final = "close_producer"
SUBSCRIBE: Final = "subscribe"
FLOW: Final = "flow"
ACK: Final = "ack"
REDELIVER: Final = "redeliver"
CLOSE_CONSUMER: Final = "close_consumer"
UNSUBSCRIBE: Final = "unsubscribe"
SEEK: Final = "seek"

# --- broker -> client
CONNECTED: Final = "connected"
SUCCESS: Final = "success"
ERROR: Final = "error"
LOOKUP_RESPONSE: Final = "lookup_response"
PARTITIONED_METADATA_RESPONSE: Final = "partitioned_metadata_response"
PRODUCER_SUCCESS: Final = "producer_success"
SEND_RECEIPT: Final = "send_receipt"
SEND_ERROR: Final = "send_error"
MESSAGE: Final = "message"
ACK_RESPONSE: Final = "ack_response"

# --- broker -> bookie
BK_ADD: Final = "bk_add"
BK_READ: Final = "bk_read"
BK_READ_LAC: Final = "bk_read_lac"
BK_FENCE: Final = "bk_fence"
BK_DELETE: Final = "bk_delete"
BK_RESPONSE: Final = "bk_response"

# Subscription types, as Pulsar's ConsumerType values.
SUB_EXCLUSIVE: Final = "Exclusive"
SUB_SHARED: Final = "Shared"
SUB_FAILOVER: Final = "Failover"
SUB_KEY_SHARED: Final = "Key_Shared"

ACK_INDIVIDUAL: Final = "individual"
ACK_CUMULATIVE: Final = "cumulative"

REQUIRED_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    CONNECT: ("rid",),
    PING: (),
    PONG: (),
    LOOKUP: ("rid", "topic"),
    PARTITIONED_METADATA: ("rid", "topic"),
    PRODUCER: ("rid", "topic", "producer_id"),
    SEND: ("producer_id", "seq", "meta", "payload"),
    CLOSE_PRODUCER: ("rid", "producer_id"),
    SUBSCRIBE: ("rid", "topic", "subscription", "consumer_id", "sub_type"),
    FLOW: ("consumer_id", "permits"),
    ACK: ("consumer_id", "kind", "positions"),
    REDELIVER: ("consumer_id",),
    CLOSE_CONSUMER: ("rid", "consumer_id"),
    UNSUBSCRIBE: ("rid", "consumer_id"),
    SEEK: ("rid", "consumer_id", "position"),
    BK_ADD: ("rid", "ledger", "entry", "data", "crc"),
    BK_READ: ("rid", "ledger", "entry"),
    BK_READ_LAC: ("rid", "ledger"),
    BK_FENCE: ("rid", "ledger"),
    BK_DELETE: ("rid", "ledger"),
}


def missing_fields(cmd: Any) -> str | None:
    """Return an error text if ``cmd`` is not a map with a known ``t`` and its required fields."""
    if not isinstance(cmd, dict):
        return f"a command must be a map, got {type(cmd).__name__}"
    name = cmd.get("t")
    if not isinstance(name, str):
        return "a command needs a string field 't'"
    required = REQUIRED_FIELDS.get(name)
    if required is None:
        return None  # unknown commands are reported separately, as UnknownCommand
    absent = [f for f in required if f not in cmd]
    if absent:
        return f"command {name!r} is missing field(s): {', '.join(absent)}"
    return None


def error_frame(rid: int | None, code: str, message: str) -> dict[str, Any]:
    return {"t": ERROR, "rid": rid, "code": code, "message": message}
