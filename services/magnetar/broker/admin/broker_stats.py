"""``/admin/v2/broker-stats/...``: the load manager's view (``pulsar-admin broker-stats``).

- ``GET /admin/v2/broker-stats/load-report``: this broker's load, sampled now, in Pulsar's
  ``LocalBrokerData`` JSON (broker/loadbalance/model.py): the same document the broker writes to
  ``/loadbalance/brokers/{id}``, fresher;
- ``GET /admin/v2/broker-stats/load-balancer`` (Magnetar's): which broker owns each bundle (by the
  load reports), the leader, and the leader's recent moves (unloads and splits) with why each was
  made and whether the owner accepted it. Asked of another broker, it is answered by the leader,
  which alone decides moves.

Both are a superuser's, as Pulsar's broker-stats (authz/rules.py: unknown routes are).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.forwarding import proxy
from magnetar.protocol.errors import NotFound, ServiceNotReady

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

__all__ = ["add_broker_stats_routes"]


def add_broker_stats_routes(app: web.Application, service: BrokerService) -> None:
    async def load_report(_request: web.Request) -> web.StreamResponse:
        manager = service.load_manager
        if manager is None or not manager.settings.load_balancer_enabled:
            raise ServiceNotReady("the load manager is off (loadBalancerEnabled=false)")
        return web.json_response(manager.reports.sampler.sample(advance=False).to_doc())

    async def load_balancer(request: web.Request) -> web.StreamResponse:
        manager = service.load_manager
        if manager is None or not manager.settings.load_balancer_enabled:
            raise ServiceNotReady("the load manager is off (loadBalancerEnabled=false)")
        if not manager.election.is_leader:
            leader = await manager.election.leader()
            if leader is None:
                raise NotFound("no load-manager leader is elected yet")
            if leader.broker_id != service.broker_id and leader.service_url:
                return await proxy(service, "GET", leader.service_url + request.path_qs)
        return web.json_response(manager.stats())

    app.router.add_get("/admin/v2/broker-stats/load-report", load_report)
    app.router.add_get("/admin/v2/broker-stats/load-balancer", load_balancer)
