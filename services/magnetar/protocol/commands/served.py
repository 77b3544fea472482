"""The commands a server runs, and the one check every server makes before dispatching one.

``missing_fields`` gives a well-formed frame carrying a command with missing fields an
``InvalidCommand`` error instead of a ``KeyError``; after it passed, a handler takes the frame as
that command's ``TypedDict`` (and reads typed values out of it with ``protocol.fields``). Its table,
``REQUIRED_FIELDS``, is derived from the request ``TypedDict``s' required keys, so that adding a
field to a command adds its check.
"""

from typing import Any, Final

from magnetar.protocol.commands.broker_bookie import (
    BK_ADD,
    BK_AUTH,
    BK_DELETE,
    BK_FENCE,
    BK_READ,
    BK_READ_LAC,
    BkAdd,
    BkAuth,
    BkDelete,
    BkFence,
    BkRead,
    BkReadLac,
)
from magnetar.protocol.commands.client_to_broker import (
    ACK,
    AUTH_RESPONSE,
    CLOSE_CONSUMER,
    CLOSE_PRODUCER,
    CONNECT,
    FLOW,
    GET_LAST_MESSAGE_ID,
    GET_SCHEMA,
    GET_TOPICS_OF_NAMESPACE,
    LOOKUP,
    PARTITIONED_METADATA,
    PING,
    PONG,
    PRODUCER,
    REDELIVER,
    SEEK,
    SEEK_PUBLISH_TIME,
    SEND,
    SUBSCRIBE,
    UNSUBSCRIBE,
    Ack,
    AuthResponse,
    CloseConsumer,
    CloseProducer,
    Connect,
    Flow,
    GetLastMessageId,
    GetSchema,
    GetTopicsOfNamespace,
    Lookup,
    PartitionedMetadata,
    Ping,
    Pong,
    Producer,
    Redeliver,
    Seek,
    SeekPublishTime,
    Send,
    Subscribe,
    Unsubscribe,
)

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
