"""Bookie operations behind the admin API: list the bookies, forget a removed one.

They are bookie-domain rules (what a registration holds, when a bookie's identity may be dropped)
on the metadata store alone, so they live with the rest of auto-recovery; the broker's admin
module (``magnetar.broker.admin_bookies``) only turns them into HTTP. Under-replication counts and
the decommission drain are in ``underreplication`` and ``decommission``.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from magnetar.bookie.autorecovery.underreplication import (
    decommissioning_bookies,
    decommissioning_path,
    ledgers_referencing,
)
from magnetar.metadata import paths
from magnetar.metadata.store import MetadataStore
from magnetar.protocol.errors import AlreadyExists, NotFound


class BookieInUse(AlreadyExists):
    """A bookie cannot be forgotten while it runs or holds data (HTTP 409, like any conflict)."""


async def list_bookies(store: MetadataStore) -> list[dict[str, Any]]:
    """Every registered bookie: ``{"id": ..., <its registration>, "decommissioning": bool}``."""
    draining = await decommissioning_bookies(store)
    out = []
    for bookie_id in await store.children(paths.BOOKIES_AVAILABLE):
        found = await store.get(paths.bookie_available(bookie_id))
        info = json.loads(found.value) if found else {}
        out.append({"id": bookie_id, **info, "decommissioning": bookie_id in draining})
    return out


async def forget_bookie(store: MetadataStore, bookie_id: str) -> None:
    """Forget a removed bookie: its identity cookie and decommission flag, so that a new bookie
    may later take the same name on a fresh disk. Raises ``BookieInUse`` while it is registered
    or any ledger references it; forgetting an unknown bookie does nothing."""
    if await store.exists(paths.bookie_available(bookie_id)):
        raise BookieInUse(f"bookie {bookie_id} is still running (registered); stop it first")
    holding = await ledgers_referencing(store, {bookie_id})
    if holding:
        raise BookieInUse(f"bookie {bookie_id} still holds ledgers {sorted(holding)[:20]}; decommission it first")
    for path in (paths.bookie_cookie(bookie_id), decommissioning_path(bookie_id)):
        with contextlib.suppress(NotFound):
            await store.delete(path)
