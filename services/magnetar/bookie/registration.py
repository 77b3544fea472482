"""How a running bookie announces itself: an ephemeral ``/bookies/available/{id}`` key.

The value is JSON (operators read it with ``magnetar-admin``): the address clients connect to
and whether the bookie is read-only, and ``tls: true`` when its port speaks only TLS (WIRE.md R84),
so that a client without TLS settings refuses to connect instead of sending plaintext. Read-only
bookies stay registered, because their entries can still be read, but
``MetadataBookieResolver.writable_bookies`` leaves them out of new ensembles. The key is
ephemeral, so it disappears with the bookie's metadata session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from magnetar.metadata import paths
from magnetar.metadata.store import ANY_VERSION, MetadataStore
from magnetar.protocol.errors import NotFound


@dataclass(frozen=True, slots=True)
class BookieRegistration:
    host: str
    port: int
    read_only: bool = False
    tls: bool = False

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {"host": self.host, "port": self.port, "read_only": self.read_only}
        if self.tls:  # absent for plaintext bookies: their registrations read as before
            doc["tls"] = True
        return json.dumps(doc).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> BookieRegistration:
        doc = json.loads(raw)
        return cls(str(doc["host"]), int(doc["port"]), bool(doc.get("read_only", False)), bool(doc.get("tls", False)))


async def register(store: MetadataStore, bookie_id: str, registration: BookieRegistration) -> None:
    """(Re)write the registration. ``ANY_VERSION``: a stale key of this same bookie (an etcd
    lease not yet expired after a crash) is simply replaced."""
    await store.put(paths.bookie_available(bookie_id), registration.to_bytes(), ANY_VERSION, ephemeral=True)


async def deregister(store: MetadataStore, bookie_id: str) -> None:
    try:
        await store.delete(paths.bookie_available(bookie_id))
    except NotFound:
        pass


async def lookup(store: MetadataStore, bookie_id: str) -> BookieRegistration | None:
    got = await store.get(paths.bookie_available(bookie_id))
    return BookieRegistration.from_bytes(got.value) if got is not None else None
