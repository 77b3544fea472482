"""Commands of the client↔broker and broker↔bookie protocols: names, types, constructors.

Commands are plain msgpack maps ``{"t": <name>, ...}`` rather than classes: they are built and
read on the hot path, and a map is what msgpack decodes to for free. Each command has one
``TypedDict`` here (``Send``, ``SendReceipt``, ``BkAdd``, ...) so that mypy checks the fields
of every command built or read, and constructor functions (``send(...)``, ``send_receipt(...)``,
...) that return the map and do nothing else: no validation, no copying. A constructor writes the
keys in the order they go on the wire; a request's ``rid`` comes last and defaults to 0 because
the connection that sends it assigns the real one (``client.connection.Connection`` and
``bookie.tcp_client.TcpBookieClient`` overwrite ``cmd["rid"]``).

``missing_fields`` is the one validation step servers run before dispatching, so that a
well-formed frame carrying a command with missing fields gets an ``InvalidCommand`` error instead
of a ``KeyError``; after it passed, a handler takes the frame as that command's ``TypedDict``.
Its table, ``REQUIRED_FIELDS``, is derived from the request TypedDicts' required keys.
WIRE.md beside this module documents every command.
"""

# No ``from __future__ import annotations`` here: TypedDict reads NotRequired[...] at runtime,
# and REQUIRED_FIELDS is derived from that.

from collections.abc import Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

from magnetar.protocol.entry import EntryMeta

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
SEEK_PUBLISH_TIME: Final = "seek_publish_time"
GET_LAST_MESSAGE_ID: Final = "get_last_message_id"
GET_TOPICS_OF_NAMESPACE: Final = "get_topics_of_namespace"
GET_SCHEMA: Final = "get_schema"  # a topic's schema by version (WIRE.md R121)
AUTH_RESPONSE: Final = "auth_response"  # answer to AUTH_CHALLENGE (WIRE.md R62)

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
LAST_MESSAGE_ID_RESPONSE: Final = "last_message_id_response"
TOPICS_OF_NAMESPACE_RESPONSE: Final = "topics_of_namespace_response"
GET_SCHEMA_RESPONSE: Final = "get_schema_response"
ACTIVE_CONSUMER_CHANGE: Final = "active_consumer_change"
AUTH_CHALLENGE: Final = "auth_challenge"  # the token expired: send a fresh one (WIRE.md R62)
# ``auth_method`` of token authentication (Pulsar's "token"); ``auth_data`` is then the JWT.
AUTH_METHOD_TOKEN: Final = "token"

# --- broker -> bookie
BK_ADD: Final = "bk_add"
BK_READ: Final = "bk_read"
BK_READ_LAC: Final = "bk_read_lac"
BK_FENCE: Final = "bk_fence"
BK_DELETE: Final = "bk_delete"
BK_AUTH: Final = "bk_auth"  # a client's credentials, first frame to a bookie with auth on (WIRE.md R80)
BK_RESPONSE: Final = "bk_response"
BK_OK: Final = "OK"  # the ``code`` of a successful ``bk_response``

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

# A position on the wire: [ledger, entry] (a tuple when the client builds it, a list decoded).
WirePosition = Sequence[int]
# A message id on the wire: [ledger, entry, batch_index] (batch_index -1: the whole entry).
WireMessageId = Sequence[int]
# A partial acknowledgement of a batched entry: [ledger, entry, count, [acked batch indexes]].
WireBatchAck = Sequence[Any]


# ====================================================================== client -> broker
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


# ====================================================================== broker -> client


class Connected(TypedDict):
    t: Literal["connected"]
    rid: int
    server_version: str
    protocol_version: int
    max_message_size: int


class Success(TypedDict):
    t: Literal["success"]
    rid: int


class Error(TypedDict):
    """An error answer; ``rid`` is nil when it refuses the connection's input (and it closes)."""

    t: Literal["error"]
    rid: int | None
    code: str
    message: str


class LookupResponse(TypedDict):
    t: Literal["lookup_response"]
    rid: int
    broker_url: str
    redirect: bool
    # The same broker's TLS listener, when it has one (WIRE.md R66; Pulsar's brokerServiceUrlTls).
    broker_url_tls: NotRequired[str]


class PartitionedMetadataResponse(TypedDict):
    t: Literal["partitioned_metadata_response"]
    rid: int
    partitions: int


class ProducerSuccess(TypedDict):
    t: Literal["producer_success"]
    rid: int
    producer_name: str
    last_sequence_id: int
    topic_epoch: NotRequired[int]  # R103
    schema_version: NotRequired[int]  # R119: the version of the producer's schema, when it has one


class SendReceipt(TypedDict):
    t: Literal["send_receipt"]
    producer_id: int
    seq: int
    ledger: int
    entry: int


class SendError(TypedDict):
    t: Literal["send_error"]
    producer_id: int
    seq: int
    code: str
    message: str


class Message(TypedDict):
    t: Literal["message"]
    consumer_id: int
    ledger: int
    entry: int
    meta: EntryMeta
    payload: bytes
    redelivery_count: int
    # Batch indexes of this entry already acknowledged (batch-index ack): not for the application.
    acked: NotRequired[Sequence[int]]


class AckResponse(TypedDict):
    t: Literal["ack_response"]
    rid: int


class LastMessageIdResponse(TypedDict):
    """The topic's last message ([-1, -1, -1] when empty) and the subscription's mark-delete position."""

    t: Literal["last_message_id_response"]
    rid: int
    ledger: int
    entry: int
    batch: int
    mark_delete: WirePosition


class GetSchemaResponse(TypedDict):
    t: Literal["get_schema_response"]
    rid: int
    version: int
    schema: dict[str, Any]  # ``SchemaInfo.to_wire()``


class TopicsOfNamespaceResponse(TypedDict):
    t: Literal["topics_of_namespace_response"]
    rid: int
    topics: Sequence[str]


class ActiveConsumerChange(TypedDict):
    """Pushed to Failover consumers: whether this consumer is now the active one."""

    t: Literal["active_consumer_change"]
    consumer_id: int
    is_active: bool


class AuthChallenge(TypedDict):
    """Pushed when the connection's credentials expired: answer ``auth_response`` (WIRE.md R62)."""

    t: Literal["auth_challenge"]
    auth_method: str
    auth_data: bytes


class CloseProducerPushed(TypedDict):
    """Pushed (no ``rid``): the topic was unloaded or moved; look it up again and re-create."""

    t: Literal["close_producer"]
    producer_id: int


class CloseConsumerPushed(TypedDict):
    """Pushed (no ``rid``): the topic was unloaded or moved; look it up again and re-subscribe."""

    t: Literal["close_consumer"]
    consumer_id: int


# ====================================================================== broker -> bookie


class BkAdd(TypedDict):
    t: Literal["bk_add"]
    rid: int
    ledger: int
    entry: int
    data: bytes
    crc: int
    lac: NotRequired[int]
    recovery: NotRequired[bool]


class BkRead(TypedDict):
    t: Literal["bk_read"]
    rid: int
    ledger: int
    entry: int
    fence: NotRequired[bool]


class BkReadLac(TypedDict):
    t: Literal["bk_read_lac"]
    rid: int
    ledger: int


class BkFence(TypedDict):
    t: Literal["bk_fence"]
    rid: int
    ledger: int


class BkDelete(TypedDict):
    t: Literal["bk_delete"]
    rid: int
    ledger: int


class BkAuth(TypedDict):
    """A bookie client's credentials (WIRE.md R80); answered by ``bk_response`` ``OK`` or an error frame."""

    t: Literal["bk_auth"]
    rid: int
    auth_method: str
    auth_data: bytes


class BkResponse(TypedDict):
    """Every bookie answer: ``code`` is ``"OK"`` or an error code (then with ``message``)."""

    t: Literal["bk_response"]
    rid: int
    code: str
    message: NotRequired[str]
    data: NotRequired[bytes]
    crc: NotRequired[int]
    lac: NotRequired[int]


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
BookieRequest = BkAdd | BkRead | BkReadLac | BkFence | BkDelete | BkAuth

# What a server runs, by name; REQUIRED_FIELDS below is read from these.
SERVED: Final[dict[str, Any]] = {
    CONNECT: Connect,
    PING: Ping,
    PONG: Pong,
    LOOKUP: Lookup,
    PARTITIONED_METADATA: PartitionedMetadata,
    PRODUCER: Producer,
    SEND: Send,
    CLOSE_PRODUCER: CloseProducer,
    SUBSCRIBE: Subscribe,
    FLOW: Flow,
    ACK: Ack,
    REDELIVER: Redeliver,
    CLOSE_CONSUMER: CloseConsumer,
    UNSUBSCRIBE: Unsubscribe,
    SEEK: Seek,
    SEEK_PUBLISH_TIME: SeekPublishTime,
    GET_LAST_MESSAGE_ID: GetLastMessageId,
    GET_TOPICS_OF_NAMESPACE: GetTopicsOfNamespace,
    GET_SCHEMA: GetSchema,
    AUTH_RESPONSE: AuthResponse,
    BK_ADD: BkAdd,
    BK_READ: BkRead,
    BK_READ_LAC: BkReadLac,
    BK_FENCE: BkFence,
    BK_DELETE: BkDelete,
    BK_AUTH: BkAuth,
}


def _required(command: Any) -> tuple[str, ...]:
    return tuple(k for k in command.__annotations__ if k != "t" and k in command.__required_keys__)


# Required fields of every command a server runs (client→broker and broker→bookie), in
# declaration order (which is the order ``missing_fields`` names absent ones in).
REQUIRED_FIELDS: Final[dict[str, tuple[str, ...]]] = {name: _required(cls) for name, cls in SERVED.items()}


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


# ====================================================================== constructors
# Plain functions returning the map, keys in wire order. Request ``rid``: see the module docstring.

# --- client -> broker


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


# --- broker -> client


def connected(rid: int, server_version: str, protocol_version: int, max_message_size: int) -> Connected:
    return {
        "t": CONNECTED,
        "rid": rid,
        "server_version": server_version,
        "protocol_version": protocol_version,
        "max_message_size": max_message_size,
    }


def success(rid: int) -> Success:
    return {"t": SUCCESS, "rid": rid}


def error_frame(rid: int | None, code: str, message: str) -> Error:
    return {"t": ERROR, "rid": rid, "code": code, "message": message}


def lookup_response(rid: int, broker_url: str, redirect: bool, broker_url_tls: str | None = None) -> LookupResponse:
    answer: LookupResponse = {"t": LOOKUP_RESPONSE, "rid": rid, "broker_url": broker_url, "redirect": redirect}
    if broker_url_tls is not None:
        answer["broker_url_tls"] = broker_url_tls
    return answer


def partitioned_metadata_response(rid: int, partitions: int) -> PartitionedMetadataResponse:
    return {"t": PARTITIONED_METADATA_RESPONSE, "rid": rid, "partitions": partitions}


def producer_success(
    rid: int,
    producer_name: str,
    last_sequence_id: int,
    *,
    topic_epoch: int | None = None,
    schema_version: int | None = None,
) -> ProducerSuccess:
    """``topic_epoch`` (R103) is sent only when the topic has one, ``schema_version`` (R119) only
    when the producer has a schema."""
    out: ProducerSuccess = {
        "t": PRODUCER_SUCCESS,
        "rid": rid,
        "producer_name": producer_name,
        "last_sequence_id": last_sequence_id,
    }
    if topic_epoch is not None:
        out["topic_epoch"] = topic_epoch
    if schema_version is not None:
        out["schema_version"] = schema_version
    return out


def send_receipt(producer_id: int, seq: int, ledger: int, entry: int) -> SendReceipt:
    return {"t": SEND_RECEIPT, "producer_id": producer_id, "seq": seq, "ledger": ledger, "entry": entry}


def send_error(producer_id: int, seq: int, code: str, message: str) -> SendError:
    return {"t": SEND_ERROR, "producer_id": producer_id, "seq": seq, "code": code, "message": message}


def message(
    consumer_id: int,
    ledger: int,
    entry: int,
    meta: EntryMeta,
    payload: bytes,
    redelivery_count: int,
    acked: Sequence[int] | None = None,
) -> Message:
    if acked:
        return {
            "t": MESSAGE,
            "consumer_id": consumer_id,
            "ledger": ledger,
            "entry": entry,
            "meta": meta,
            "payload": payload,
            "redelivery_count": redelivery_count,
            "acked": acked,
        }
    return {
        "t": MESSAGE,
        "consumer_id": consumer_id,
        "ledger": ledger,
        "entry": entry,
        "meta": meta,
        "payload": payload,
        "redelivery_count": redelivery_count,
    }


def ack_response(rid: int) -> AckResponse:
    return {"t": ACK_RESPONSE, "rid": rid}


def last_message_id_response(
    rid: int, ledger: int, entry: int, batch: int, mark_delete: WirePosition
) -> LastMessageIdResponse:
    return {
        "t": LAST_MESSAGE_ID_RESPONSE,
        "rid": rid,
        "ledger": ledger,
        "entry": entry,
        "batch": batch,
        "mark_delete": mark_delete,
    }


def get_schema_response(rid: int, version: int, schema: dict[str, Any]) -> GetSchemaResponse:
    return {"t": GET_SCHEMA_RESPONSE, "rid": rid, "version": version, "schema": schema}


def topics_of_namespace_response(rid: int, topics: Sequence[str]) -> TopicsOfNamespaceResponse:
    return {"t": TOPICS_OF_NAMESPACE_RESPONSE, "rid": rid, "topics": topics}


def active_consumer_change(consumer_id: int, is_active: bool) -> ActiveConsumerChange:
    return {"t": ACTIVE_CONSUMER_CHANGE, "consumer_id": consumer_id, "is_active": is_active}


def auth_challenge(auth_method: str = AUTH_METHOD_TOKEN, auth_data: bytes = b"refresh") -> AuthChallenge:
    """Pulsar's AuthChallenge for a refresh carries ``b"refresh"``: the client sends new credentials."""
    return {"t": AUTH_CHALLENGE, "auth_method": auth_method, "auth_data": auth_data}


def close_producer_pushed(producer_id: int) -> CloseProducerPushed:
    return {"t": CLOSE_PRODUCER, "producer_id": producer_id}


def close_consumer_pushed(consumer_id: int) -> CloseConsumerPushed:
    return {"t": CLOSE_CONSUMER, "consumer_id": consumer_id}


# --- broker -> bookie


def bk_add(ledger: int, entry: int, data: bytes, crc: int, lac: int, recovery: bool = False, rid: int = 0) -> BkAdd:
    if recovery:
        return {
            "t": BK_ADD,
            "ledger": ledger,
            "entry": entry,
            "data": data,
            "crc": crc,
            "lac": lac,
            "recovery": True,
            "rid": rid,
        }
    return {"t": BK_ADD, "ledger": ledger, "entry": entry, "data": data, "crc": crc, "lac": lac, "rid": rid}


def bk_read(ledger: int, entry: int, fence: bool = False, rid: int = 0) -> BkRead:
    if fence:
        return {"t": BK_READ, "ledger": ledger, "entry": entry, "fence": True, "rid": rid}
    return {"t": BK_READ, "ledger": ledger, "entry": entry, "rid": rid}


def bk_read_lac(ledger: int, rid: int = 0) -> BkReadLac:
    return {"t": BK_READ_LAC, "ledger": ledger, "rid": rid}


def bk_fence(ledger: int, rid: int = 0) -> BkFence:
    return {"t": BK_FENCE, "ledger": ledger, "rid": rid}


def bk_delete(ledger: int, rid: int = 0) -> BkDelete:
    return {"t": BK_DELETE, "ledger": ledger, "rid": rid}


def bk_auth(auth_method: str, auth_data: bytes, rid: int = 0) -> BkAuth:
    return {"t": BK_AUTH, "auth_method": auth_method, "auth_data": auth_data, "rid": rid}


def bk_response(rid: int) -> BkResponse:
    """Success with nothing to return (add, delete)."""
    return {"t": BK_RESPONSE, "rid": rid, "code": BK_OK}


def bk_lac_response(rid: int, lac: int) -> BkResponse:
    """Success of ``bk_read_lac`` / ``bk_fence``."""
    return {"t": BK_RESPONSE, "rid": rid, "code": BK_OK, "lac": lac}


def bk_read_response(rid: int, data: bytes, crc: int, lac: int) -> BkResponse:
    return {"t": BK_RESPONSE, "rid": rid, "code": BK_OK, "data": data, "crc": crc, "lac": lac}


def bk_error(rid: int, code: str, message: str) -> BkResponse:
    return {"t": BK_RESPONSE, "rid": rid, "code": code, "message": message}
