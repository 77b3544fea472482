"""What a broker sends a client: answers to requests and pushed commands (``message``, closes,
active-consumer changes, auth challenges). The error answer, shared with bookies, is in
``common.py``; what a client sends is in ``client_to_broker.py``.
"""

# No ``from __future__ import annotations`` here: TypedDict reads NotRequired[...] at runtime,
# and REQUIRED_FIELDS (served.py) is derived from that.

from collections.abc import Sequence
from typing import Any, Final, Literal, NotRequired, TypedDict

from magnetar.protocol.commands.client_to_broker import CLOSE_CONSUMER, CLOSE_PRODUCER
from magnetar.protocol.commands.common import AUTH_METHOD_TOKEN, WirePosition
from magnetar.protocol.entry import EntryMeta

CONNECTED: Final = "connected"
SUCCESS: Final = "success"
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


class Connected(TypedDict):
    t: Literal["connected"]
    rid: int
    server_version: str
    protocol_version: int
    max_message_size: int


class Success(TypedDict):
    t: Literal["success"]
    rid: int


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


# Constructors: plain functions returning the map, keys in wire order.


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
