"""The admin API's bookie routes (``/admin/v2/bookies...``): HTTP in and out, nothing more.

What they do is bookie business and lives with auto-recovery (``magnetar.bookie.autorecovery``:
listing and forgetting bookies in ``admin_ops``, the under-replication markers, the decommission
drain); this module turns requests into those calls and their results into JSON answers. It is
apart from ``admin`` so that the broker's own resources (tenants, namespaces, topics) read on
their own there. Errors it does not answer itself (``BookieInUse`` → 409) go through the admin
app's error middleware like those of every other route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.bookie.autorecovery.admin_ops import forget_bookie, list_bookies
from magnetar.bookie.autorecovery.decommission import DecommissionTimeout, decommission
from magnetar.bookie.autorecovery.underreplication import underreplicated_ledgers
from magnetar.protocol.errors import NotEnoughBookies

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

DEFAULT_DECOMMISSION_TIMEOUT = "600"  # seconds, when the request names no ``timeout``


def add_bookie_routes(app: web.Application, service: BrokerService) -> None:
    """Register the four bookie routes on the admin ``app``."""
    routes = BookieRoutes(service)
    r = app.router
    r.add_get("/admin/v2/bookies", routes.list_bookies)
    r.add_get("/admin/v2/bookies/underreplicated", routes.underreplicated)
    r.add_post("/admin/v2/bookies/{bookie}/decommission", routes.decommission_bookie)
    r.add_delete("/admin/v2/bookies/{bookie}", routes.forget_bookie)


class BookieRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def list_bookies(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await list_bookies(self.service.store))

    async def underreplicated(self, request: web.Request) -> web.StreamResponse:
        ledgers = await underreplicated_ledgers(self.service.store)
        return web.json_response({"count": len(ledgers), "ledgers": ledgers})

    async def decommission_bookie(self, request: web.Request) -> web.StreamResponse:
        """Drain a bookie (its ledgers re-replicated elsewhere); answers when it may be removed."""
        timeout = float(request.query.get("timeout", DEFAULT_DECOMMISSION_TIMEOUT))
        bookie_id = request.match_info["bookie"]
        try:
            report = await decommission(self.service.store, self.service.ledgers.bookies, bookie_id, timeout=timeout)
        except DecommissionTimeout as exc:
            return web.json_response({"reason": str(exc), "remaining": list(exc.report.remaining)}, status=504)
        except NotEnoughBookies as exc:
            return web.json_response({"reason": str(exc)}, status=412)
        return web.json_response(
            {
                "bookie": report.bookie_id,
                "ledgersMoved": report.ledgers_marked,
                "seconds": round(report.elapsed_seconds, 3),
                "complete": report.complete,
            }
        )

    async def forget_bookie(self, request: web.Request) -> web.StreamResponse:
        """Forget a removed bookie (its cookie and decommission flag); 409 while it is registered
        or holds data."""
        await forget_bookie(self.service.store, request.match_info["bookie"])
        return web.Response(status=204)
