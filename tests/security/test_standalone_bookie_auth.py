"""The standalone's bookie port asks for the broker's tokens when authentication is on.

The standalone's broker writes to its bookie in-process, but the bookie also listens (for the
Spark data source's direct reads). Without this, anyone on the host could write ledgers there past
every check the broker makes. A real standalone process; the writes go over its bookie port.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess, run_standalone

from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import AuthenticationError, NoSuchLedger
from magnetar.security.tokens import create_token

# Far above any id the standalone hands out; one ledger for the refused writes, one for the admitted.
REFUSED, ADMITTED = 987_654_321, 987_654_322


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneProcess, bytes]]:
    base: Path = tmp_path_factory.mktemp("standalone-bookie-auth")
    key = secrets.token_bytes(32)
    (base / "secret.key").write_bytes(key)
    args = ["--authentication-enabled", "--token-secret-key", f"file://{base / 'secret.key'}"]
    with run_standalone(base, *args, "--authorization-enabled", "--super-user-roles", "admin") as sa:
        yield sa, key


def _client(sa: StandaloneProcess, token: str | None) -> TcpBookieClient:
    host, port = sa.bookie_address.rsplit(":", 1)
    supplier = None if token is None else (lambda: token)
    return TcpBookieClient("standalone-bookie", host, int(port), security=BookieClientSecurity(credentials=supplier))


async def _add_then_read(client: TcpBookieClient, ledger: int) -> bytes:
    data = b"written past the broker"
    async with client:
        await client.add_entry(ledger, 0, data, crc32c(data), NO_ENTRY)
        return (await client.read_entry(ledger, 0)).data


@pytest.mark.parametrize(
    ("role", "message"),
    [
        (None, "Authentication required: the first frame to this bookie must be bk_auth"),
        ("app", "may not use this bookie"),  # a valid token, but not a superuser's
    ],
)
def test_the_bookie_port_refuses_what_the_broker_would(
    secured: tuple[StandaloneProcess, bytes], role: str | None, message: str
) -> None:
    sa, key = secured
    token = None if role is None else create_token("HS256", key, role, None)
    with pytest.raises(AuthenticationError, match=message):
        asyncio.run(_add_then_read(_client(sa, token), REFUSED))
    # Nothing was stored: a superuser's client finds no such ledger.
    with pytest.raises(NoSuchLedger):
        asyncio.run(_read_lac(_client(sa, create_token("HS256", key, "admin", None))))


async def _read_lac(client: TcpBookieClient) -> int:
    async with client:
        return await client.read_lac(REFUSED)


def test_a_superuser_token_is_admitted(secured: tuple[StandaloneProcess, bytes]) -> None:
    sa, key = secured
    client = _client(sa, create_token("HS256", key, "admin", None))
    assert asyncio.run(_add_then_read(client, ADMITTED)) == b"written past the broker"
