"""Tenants, on Pulsar's ``/admin/v2/tenants`` paths.

``GET`` lists them or reads one, ``PUT`` creates one, ``POST`` updates its record, ``DELETE``
removes it: refused with 409 while it has namespaces, unless ``?force=true``, which deletes its
namespaces with their topics first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.namespaces import delete_namespace_with_topics
from magnetar.broker.admin.requests import is_forced, json_body

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def add_tenant_routes(app: web.Application, service: BrokerService) -> None:
    """Register the tenant routes on the admin ``app``."""
    routes = TenantRoutes(service)
    r = app.router
    r.add_get("/admin/v2/tenants", routes.list_tenants)
    r.add_get("/admin/v2/tenants/{tenant}", routes.get_tenant)
    r.add_put("/admin/v2/tenants/{tenant}", routes.create_tenant)
    r.add_post("/admin/v2/tenants/{tenant}", routes.update_tenant)
    r.add_delete("/admin/v2/tenants/{tenant}", routes.delete_tenant)


class TenantRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def list_tenants(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.service.resources.list_tenants())

    async def get_tenant(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.service.resources.get_tenant(request.match_info["tenant"]))

    async def create_tenant(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.create_tenant(request.match_info["tenant"], await json_body(request) or {})
        return web.Response(status=204)

    async def update_tenant(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.update_tenant(request.match_info["tenant"], await json_body(request) or {})
        return web.Response(status=204)

    async def delete_tenant(self, request: web.Request) -> web.StreamResponse:
        tenant = request.match_info["tenant"]
        res = self.service.resources
        for full in await res.delete_tenant(tenant, force=is_forced(request)):
            await delete_namespace_with_topics(self.service, tenant, full.split("/", 1)[1], force=True)
        await res.remove_tenant_record(tenant)
        return web.Response(status=204)
