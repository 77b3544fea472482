"""What both peers of a Magnetar server share: the protocol version, the error frame, the wire
shapes of positions and message ids, and the name of token authentication.

A broker and a bookie both refuse a connection's input with the same ``error`` frame (``rid`` nil),
and both read ``auth_method`` ``"token"`` (``connect``, ``auth_response``, ``bk_auth``); so these live
here rather than with either peer's commands.
"""

from collections.abc import Sequence
from typing import Any, Final, Literal, TypedDict

PROTOCOL_VERSION: Final = 1

ERROR: Final = "error"
# ``auth_method`` of token authentication (Pulsar's "token"); ``auth_data`` is then the JWT.
AUTH_METHOD_TOKEN: Final = "token"

# A position on the wire: [ledger, entry] (a tuple when the client builds it, a list decoded).
WirePosition = Sequence[int]
# A message id on the wire: [ledger, entry, batch_index] (batch_index -1: the whole entry).
WireMessageId = Sequence[int]
# A partial acknowledgement of a batched entry: [ledger, entry, count, [acked batch indexes]].
WireBatchAck = Sequence[Any]


class Error(TypedDict):
    """An error answer; ``rid`` is nil when it refuses the connection's input (and it closes)."""

    t: Literal["error"]
    rid: int | None
    code: str
    message: str


def error_frame(rid: int | None, code: str, message: str) -> Error:
    return {"t": ERROR, "rid": rid, "code": code, "message": message}
