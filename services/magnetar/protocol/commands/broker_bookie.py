"""What a broker (or any bookie client) and a bookie say to each other: the ``bk_*`` requests and the
one answer, ``bk_response``, whose ``code`` is ``"OK"`` or an error code. A request's ``rid`` comes
last and is assigned by ``bookie.tcp_client.TcpBookieClient``.
"""

# No ``from __future__ import annotations`` here: TypedDict reads NotRequired[...] at runtime,
# and REQUIRED_FIELDS (served.py) is derived from that.

from typing import Final, Literal, NotRequired, TypedDict

BK_ADD: Final = "bk_add"
BK_READ: Final = "bk_read"
BK_READ_LAC: Final = "bk_read_lac"
BK_FENCE: Final = "bk_fence"
BK_DELETE: Final = "bk_delete"
BK_AUTH: Final = "bk_auth"  # a client's credentials, first frame to a bookie with auth on (WIRE.md R80)
BK_RESPONSE: Final = "bk_response"
BK_OK: Final = "OK"  # the ``code`` of a successful ``bk_response``


# Required fields are declared first, in the order of REQUIRED_FIELDS (it is derived from them).


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


BookieRequest = BkAdd | BkRead | BkReadLac | BkFence | BkDelete | BkAuth


# Constructors: plain functions returning the map, keys in wire order.


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
