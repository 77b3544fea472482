"""``BookieResolver`` implementations: which bookies exist and how to reach each one.

``StaticBookieResolver`` is a fixed map (standalone: one in-process bookie; tests: a handful of
servers on loopback); an in-process bookie whose disk is full is left out of its writable ones.
``MetadataBookieResolver`` follows the cluster: the writable bookies are the registered, not
read-only ones under ``/bookies/available``, and a client looks its bookie's address up again on
every (re)connect, so a bookie that restarts on another address is found. Its clients share one
``BookieClientSecurity`` (credentials, TLS); a bookie that registered ``tls: true`` is refused at
once by a client without TLS (WIRE.md R84), rather than sent plaintext.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.local_client import LocalBookieClient
from magnetar.bookie.registration import BookieRegistration, lookup
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.ledger.bookie_api import BookieClient
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import NotConnected


class StaticBookieResolver:
    def __init__(self, clients: Mapping[str, BookieClient], *, writable: Iterable[str] | None = None) -> None:
        self._clients = dict(clients)
        self._writable = sorted(writable) if writable is not None else sorted(self._clients)

    def client(self, bookie_id: str) -> BookieClient:
        try:
            return self._clients[bookie_id]
        except KeyError:
            raise NotConnected(f"unknown bookie {bookie_id!r}") from None

    async def writable_bookies(self) -> list[str]:
        """The fixed writable set, less the in-process bookies that are read-only now. Why: as a
        cluster's resolver skips bookies registered read-only, a ledger is then refused at
        creation (``NotEnoughBookies``, retried by the managed ledger with back-off) instead of
        being created on a full bookie, failing at its first add and being replaced at once by
        another such ledger, whose metadata writes fill the disk further."""
        return [b for b in self._writable if not self._read_only(b)]

    def _read_only(self, bookie_id: str) -> bool:
        client = self._clients.get(bookie_id)
        return isinstance(client, LocalBookieClient) and client.read_only


class MetadataBookieResolver:
    def __init__(
        self,
        store: MetadataStore,
        *,
        request_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        security: BookieClientSecurity | None = None,
    ) -> None:
        self._store = store
        self._security = security or BookieClientSecurity()
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._clients: dict[str, TcpBookieClient] = {}

    def client(self, bookie_id: str) -> BookieClient:
        found = self._clients.get(bookie_id)
        if found is None:

            async def address() -> tuple[str, int]:
                reg = await lookup(self._store, bookie_id)
                if reg is None:
                    raise NotConnected(f"bookie {bookie_id!r} is not registered (down?)")
                if reg.tls and self._security.ssl_context is None:
                    raise NotConnected(
                        f"bookie {bookie_id!r} accepts only TLS; set bookkeeperTLSTrustCertsFilePath to reach it"
                    )
                return reg.host, reg.port

            found = self._clients[bookie_id] = TcpBookieClient(
                bookie_id,
                "",
                0,
                request_timeout=self._request_timeout,
                connect_timeout=self._connect_timeout,
                address_resolver=address,
                security=self._security,
            )
        return found

    async def registrations(self) -> dict[str, BookieRegistration]:
        out: dict[str, BookieRegistration] = {}
        for bookie_id in await self._store.children(paths.BOOKIES_AVAILABLE):
            reg = await lookup(self._store, bookie_id)
            if reg is not None:  # gone between children() and get()
                out[bookie_id] = reg
        return out

    async def writable_bookies(self) -> list[str]:
        return sorted(b for b, reg in (await self.registrations()).items() if not reg.read_only)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()


def _conformance() -> None:
    """Never called: makes mypy prove the classes here implement the ``ledger`` protocols."""
    from magnetar.ledger.bookie_api import BookieResolver

    _clients: list[type[BookieClient]] = [LocalBookieClient, TcpBookieClient]
    _resolvers: list[type[BookieResolver]] = [StaticBookieResolver, MetadataBookieResolver]
