"""What a client sends a broker: command names, option values, ``TypedDict``s and constructors.

Requests carry a ``rid`` (last in the map, 0 until the client's connection assigns the real one);
``send``, ``flow``, ``ack`` without ``rid``, ``redeliver``, ``ping``/``pong`` and ``auth_response``
are answered by nothing or by a push. The broker's answers are in ``broker_to_client.py``.
"""

# No ``from __future__ import annotations`` here: TypedDict reads NotRequired[...] at runtime,
# and REQUIRED_FIELDS (served.py) is derived from that.

from collections.abc import Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

from magnetar.protocol.commands.common import PROTOCOL_VERSION, WireBatchAck, WireMessageId, WirePosition
from magnetar.protocol.entry import EntryMeta

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
SEEK_PUBLISH_TIME: Final = "seek_publish_time"
GET_LAST_MESSAGE_ID: Final = "get_last_message_id"
GET_TOPICS_OF_NAMESPACE: Final = "get_topics_of_namespace"
GET_SCHEMA: Final = "get_schema"  # a topic's schema by version (WIRE.md R121)
AUTH_RESPONSE: Final = "auth_response"  # answer to AUTH_CHALLENGE (WIRE.md R62)

# Subscription types, as Pulsar's ConsumerType values.
SUB_EXCLUSIVE: Final = "Exclusive"
SUB_SHARED: Final = "Shared"
SUB_FAILOVER: Final = "Failover"
SUB_KEY_SHARED: Final = "Key_Shared"

# Key_Shared modes, as Pulsar's KeySharedMode names.
KEY_SHARED_AUTO_SPLIT: Final = "AUTO_SPLIT"
KEY_SHARED_STICKY: Final = "STICKY"
# Key_Shared hashes keys into this many slots (0..65535), as Pulsar's DEFAULT_HASH_RANGE_SIZE.
KEY_HASH_RANGE: Final = 65536

ACK_INDIVIDUAL: Final = "individual"
ACK_CUMULATIVE: Final = "cumulative"


# Required fields are declared first, in the order of REQUIRED_FIELDS (it is derived from them).


class Connect(TypedDict):
    t: Literal["connect"]
    rid: int
    client_version: NotRequired[str]
    protocol_version: NotRequired[int]
    # Credentials (WIRE.md R60): ``auth_method`` "token" with the JWT as ``auth_data``.
    auth_method: NotRequired[str]
    auth_data: NotRequired[bytes]


class Ping(TypedDict):
    t: Literal["ping"]


class Pong(TypedDict):
    t: Literal["pong"]


class Lookup(TypedDict):
    t: Literal["lookup"]
    rid: int
    topic: str
    listener_name: NotRequired[str]  # R110: answer this advertised listener's address


class PartitionedMetadata(TypedDict):
    t: Literal["partitioned_metadata"]
    rid: int
    topic: str


class Producer(TypedDict):
    t: Literal["producer"]
    rid: int
    topic: str
    producer_id: int
    producer_name: NotRequired[str]
    access_mode: NotRequired[str]  # R102
    epoch: NotRequired[int]  # R103
    metadata: NotRequired[dict[str, str]]  # R104
    # The producer's schema (R118-R119): ``SchemaInfo.to_wire()``; absent means bytes (no schema).
    schema: NotRequired[dict[str, Any]]


class Send(TypedDict):
    t: Literal["send"]
    producer_id: int
    seq: int
    meta: EntryMeta
    payload: bytes


class CloseProducer(TypedDict):
    t: Literal["close_producer"]
    rid: int
    producer_id: int


class Subscribe(TypedDict):
    t: Literal["subscribe"]
    rid: int
    topic: str
    subscription: str
    consumer_id: int
    sub_type: str
    initial_position: NotRequired[str]
    consumer_name: NotRequired[str]
    # Failover and Shared: lower numbers are served first (Pulsar's priorityLevel; default 0).
    priority_level: NotRequired[int]
    # Key_Shared: KEY_SHARED_AUTO_SPLIT (default) or KEY_SHARED_STICKY with ``key_ranges``
    # ([[start, end], ...], inclusive, within 0..KEY_HASH_RANGE-1); ``allow_out_of_order`` lifts
    # the recently-joined-consumers rule.
    key_shared_mode: NotRequired[str]
    key_ranges: NotRequired[Sequence[Sequence[int]]]
    allow_out_of_order: NotRequired[bool]
    # False for a reader: the cursor lives in the broker's memory only and goes with the consumer.
    durable: NotRequired[bool]
    # Readers (non-durable): where to start, instead of ``initial_position``. [-1, -1, -1] is
    # the earliest message, [2**63-1, 2**63-1, -1] the latest.
    start_message_id: NotRequired[WireMessageId]
    start_inclusive: NotRequired[bool]
    # Read the compacted view, then the topic after its horizon (WIRE.md R46b; Exclusive/Failover).
    read_compacted: NotRequired[bool]
    # The consumer's properties (pulsar-client's ``subscribe(properties=...)``, WIRE.md R106):
    # shown as the consumer's ``metadata`` in the subscription's stats.
    properties: NotRequired[dict[str, str]]
    # The consumer's (reader's) schema (R120): ``SchemaInfo.to_wire()``; absent means bytes.
    schema: NotRequired[dict[str, Any]]


class Flow(TypedDict):
    t: Literal["flow"]
    consumer_id: int
    permits: int


class Ack(TypedDict):
    t: Literal["ack"]
    consumer_id: int
    kind: str
    positions: Sequence[WirePosition]
    rid: NotRequired[int]
    # Individual acks of some messages of batched entries (batch-index acknowledgement).
    batch_acks: NotRequired[Sequence[WireBatchAck]]


class Redeliver(TypedDict):
    t: Literal["redeliver"]
    consumer_id: int
    positions: NotRequired[Sequence[WirePosition]]


class CloseConsumer(TypedDict):
    t: Literal["close_consumer"]
    rid: int
    consumer_id: int


class Unsubscribe(TypedDict):
    t: Literal["unsubscribe"]
    rid: int
    consumer_id: int


class Seek(TypedDict):
    t: Literal["seek"]
    rid: int
    consumer_id: int
    position: WirePosition


class SeekPublishTime(TypedDict):
    t: Literal["seek_publish_time"]
    rid: int
    consumer_id: int
    publish_time: int


class GetLastMessageId(TypedDict):
    t: Literal["get_last_message_id"]
    rid: int
    consumer_id: int


class GetTopicsOfNamespace(TypedDict):
    t: Literal["get_topics_of_namespace"]
    rid: int
    namespace: str
    # Which domains to list (WIRE.md R107): TOPICS_PERSISTENT (the default), TOPICS_NON_PERSISTENT
    # or TOPICS_ALL, Pulsar's CommandGetTopicsOfNamespace.Mode.
    mode: NotRequired[str]


class GetSchema(TypedDict):
    """A topic's schema (R121): ``version`` absent means the newest live version."""

    t: Literal["get_schema"]
    rid: int
    topic: str
    version: NotRequired[int]


TOPICS_PERSISTENT: Final = "PERSISTENT"
TOPICS_NON_PERSISTENT: Final = "NON_PERSISTENT"
TOPICS_ALL: Final = "ALL"
TOPICS_MODES: Final = (TOPICS_PERSISTENT, TOPICS_NON_PERSISTENT, TOPICS_ALL)


class AuthResponse(TypedDict):
    """The client's answer to ``auth_challenge``: fresh credentials (WIRE.md R62); no ``rid``."""

    t: Literal["auth_response"]
    auth_method: str
    auth_data: bytes


# Requests a client sends with Connection.request*, which assigns ``rid``.
Request = (
    Connect
    | Lookup
    | PartitionedMetadata
    | Producer
    | CloseProducer
    | Subscribe
    | Ack
    | CloseConsumer
    | Unsubscribe
    | Seek
    | SeekPublishTime
    | GetLastMessageId
    | GetTopicsOfNamespace
    | GetSchema
)


# Constructors: plain functions returning the map, keys in wire order.


def connect(
    client_version: str,
    protocol_version: int = PROTOCOL_VERSION,
    rid: int = 0,
    *,
    auth_method: str | None = None,
    auth_data: bytes | None = None,
) -> Connect:
    """Credentials are sent only when given (WIRE.md R60)."""
    cmd: Connect = {"t": CONNECT, "client_version": client_version, "protocol_version": protocol_version, "rid": rid}
    if auth_method is not None:
        cmd["auth_method"] = auth_method
    if auth_data is not None:
        cmd["auth_data"] = auth_data
    return cmd


def ping() -> Ping:
    return {"t": PING}


def pong() -> Pong:
    return {"t": PONG}


def lookup(topic: str, rid: int = 0, listener_name: str | None = None) -> Lookup:
    """``listener_name`` (R110) is sent only when given."""
    if listener_name:
        return {"t": LOOKUP, "topic": topic, "rid": rid, "listener_name": listener_name}
    return {"t": LOOKUP, "topic": topic, "rid": rid}


def partitioned_metadata(topic: str, rid: int = 0) -> PartitionedMetadata:
    return {"t": PARTITIONED_METADATA, "topic": topic, "rid": rid}


def producer(
    topic: str,
    producer_id: int,
    producer_name: str | None = None,
    rid: int = 0,
    *,
    access_mode: str | None = None,
    epoch: int | None = None,
    metadata: dict[str, str] | None = None,
    schema: dict[str, Any] | None = None,
) -> Producer:
    """``producer_name`` is sent only when given and non-empty (the broker then picks one); the
    access mode other than ``Shared``, the epoch and non-empty metadata (R102-R104) only when given."""
    cmd: dict[str, Any] = {"t": PRODUCER, "topic": topic, "producer_id": producer_id}
    if producer_name:
        cmd["producer_name"] = producer_name
    if access_mode is not None and access_mode != "Shared":
        cmd["access_mode"] = access_mode
    if epoch is not None:
        cmd["epoch"] = epoch
    if metadata:
        cmd["metadata"] = metadata
    if schema is not None:
        cmd["schema"] = schema
    cmd["rid"] = rid
    return cast(Producer, cmd)


def send(producer_id: int, seq: int, meta: EntryMeta, payload: bytes) -> Send:
    return {"t": SEND, "producer_id": producer_id, "seq": seq, "meta": meta, "payload": payload}


def close_producer(producer_id: int, rid: int = 0) -> CloseProducer:
    return {"t": CLOSE_PRODUCER, "producer_id": producer_id, "rid": rid}


def subscribe(
    topic: str,
    subscription: str,
    consumer_id: int,
    sub_type: str,
    initial_position: str = "Latest",
    consumer_name: str | None = None,
    rid: int = 0,
    *,
    priority_level: int = 0,
    key_shared_mode: str | None = None,
    key_ranges: Sequence[Sequence[int]] | None = None,
    allow_out_of_order: bool = False,
    durable: bool = True,
    start_message_id: WireMessageId | None = None,
    start_inclusive: bool = False,
    read_compacted: bool = False,
    properties: dict[str, str] | None = None,
    schema: dict[str, Any] | None = None,
) -> Subscribe:
    """Optional fields are sent only when they differ from their defaults (an old broker then
    sees exactly the command it knows)."""
    cmd: Subscribe = {
        "t": SUBSCRIBE,
        "topic": topic,
        "subscription": subscription,
        "consumer_id": consumer_id,
        "sub_type": sub_type,
        "initial_position": initial_position,
        "rid": rid,
    }
    if consumer_name:
        cmd["consumer_name"] = consumer_name
    if priority_level:
        cmd["priority_level"] = priority_level
    if key_shared_mode is not None:
        cmd["key_shared_mode"] = key_shared_mode
    if key_ranges is not None:
        cmd["key_ranges"] = key_ranges
    if allow_out_of_order:
        cmd["allow_out_of_order"] = True
    if not durable:
        cmd["durable"] = False
    if start_message_id is not None:
        cmd["start_message_id"] = start_message_id
    if start_inclusive:
        cmd["start_inclusive"] = True
    if read_compacted:
        cmd["read_compacted"] = True
    if properties:
        cmd["properties"] = dict(properties)
    if schema is not None:
        cmd["schema"] = schema
    return cmd


def get_schema(topic: str, version: int | None = None, rid: int = 0) -> GetSchema:
    cmd: GetSchema = {"t": GET_SCHEMA, "topic": topic, "rid": rid}
    if version is not None:
        cmd["version"] = version
    return cmd


def flow(consumer_id: int, permits: int) -> Flow:
    return {"t": FLOW, "consumer_id": consumer_id, "permits": permits}


def ack(
    consumer_id: int,
    kind: str,
    positions: Sequence[WirePosition],
    rid: int | None = None,
    batch_acks: Sequence[WireBatchAck] | None = None,
) -> Ack:
    """Without ``rid`` no ``ack_response`` comes back (``Connection.request*`` adds one)."""
    cmd: Ack = {"t": ACK, "consumer_id": consumer_id, "kind": kind, "positions": positions}
    if batch_acks:
        cmd["batch_acks"] = batch_acks
    if rid is not None:
        cmd["rid"] = rid
    return cmd


def redeliver(consumer_id: int, positions: Sequence[WirePosition] | None = None) -> Redeliver:
    """Without ``positions``: every unacknowledged entry of the consumer."""
    if positions is None:
        return {"t": REDELIVER, "consumer_id": consumer_id}
    return {"t": REDELIVER, "consumer_id": consumer_id, "positions": positions}


def close_consumer(consumer_id: int, rid: int = 0) -> CloseConsumer:
    return {"t": CLOSE_CONSUMER, "consumer_id": consumer_id, "rid": rid}


def unsubscribe(consumer_id: int, rid: int = 0) -> Unsubscribe:
    return {"t": UNSUBSCRIBE, "consumer_id": consumer_id, "rid": rid}


def seek(consumer_id: int, position: WirePosition, rid: int = 0) -> Seek:
    return {"t": SEEK, "consumer_id": consumer_id, "position": position, "rid": rid}


def seek_publish_time(consumer_id: int, publish_time: int, rid: int = 0) -> SeekPublishTime:
    return {"t": SEEK_PUBLISH_TIME, "consumer_id": consumer_id, "publish_time": publish_time, "rid": rid}


def get_last_message_id(consumer_id: int, rid: int = 0) -> GetLastMessageId:
    return {"t": GET_LAST_MESSAGE_ID, "consumer_id": consumer_id, "rid": rid}


def get_topics_of_namespace(namespace: str, rid: int = 0, *, mode: str = TOPICS_PERSISTENT) -> GetTopicsOfNamespace:
    cmd: GetTopicsOfNamespace = {"t": GET_TOPICS_OF_NAMESPACE, "namespace": namespace, "rid": rid}
    if mode != TOPICS_PERSISTENT:
        cmd["mode"] = mode
    return cmd


def auth_response(auth_method: str, auth_data: bytes) -> AuthResponse:
    return {"t": AUTH_RESPONSE, "auth_method": auth_method, "auth_data": auth_data}
