"""Namespaces and their policies, on Pulsar's ``/admin/v2/namespaces`` paths.

``GET .../{tenant}`` lists a tenant's namespaces; ``GET``, ``PUT`` and ``DELETE`` of
``.../{tenant}/{ns}`` read (with the policies set but not enforced, ``unenforced``), create and
delete one (409 while it has topics, unless ``?force=true``). Each policy has its endpoint
``.../{tenant}/{ns}/{policy}`` (``policies.model.POLICY_ENDPOINTS``): ``GET`` reads it, ``POST`` sets
it, ``DELETE`` removes it. The routes of particular policies registered elsewhere (permissions,
schema policies) come first: ``{policy}`` would take their paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.requests import is_forced, json_body, policy_field
from magnetar.broker.admin.topics import delete_any_topic
from magnetar.broker.cluster.resources import Conflict
from magnetar.broker.policies.model import unenforced
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def add_namespace_routes(app: web.Application, service: BrokerService) -> None:
    """Register the namespace routes on the admin ``app``, the ``{policy}`` ones last."""
    routes = NamespaceRoutes(service)
    r = app.router
    r.add_get("/admin/v2/namespaces/{tenant}", routes.list_namespaces)
    r.add_get("/admin/v2/namespaces/{tenant}/{ns}", routes.get_namespace)
    r.add_put("/admin/v2/namespaces/{tenant}/{ns}", routes.create_namespace)
    r.add_delete("/admin/v2/namespaces/{tenant}/{ns}", routes.delete_namespace)
    r.add_get("/admin/v2/namespaces/{tenant}/{ns}/{policy}", routes.get_ns_policy)
    r.add_post("/admin/v2/namespaces/{tenant}/{ns}/{policy}", routes.set_ns_policy)
    r.add_delete("/admin/v2/namespaces/{tenant}/{ns}/{policy}", routes.remove_ns_policy)


class NamespaceRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def list_namespaces(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.service.resources.list_namespaces(request.match_info["tenant"]))

    async def get_namespace(self, request: web.Request) -> web.StreamResponse:
        doc, _ = await self.service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
        return web.json_response({**doc, "unenforced": unenforced(doc)})

    async def create_namespace(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.create_namespace(
            request.match_info["tenant"], request.match_info["ns"], await json_body(request), self.service.bundles
        )
        return web.Response(status=204)

    async def delete_namespace(self, request: web.Request) -> web.StreamResponse:
        await delete_namespace_with_topics(
            self.service, request.match_info["tenant"], request.match_info["ns"], force=is_forced(request)
        )
        return web.Response(status=204)

    async def get_ns_policy(self, request: web.Request) -> web.StreamResponse:
        field = policy_field(request)
        doc, _ = await self.service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
        return web.json_response(doc.get(field))

    async def set_ns_policy(self, request: web.Request) -> web.StreamResponse:
        field = policy_field(request)
        await self.service.resources.set_namespace_policy(
            request.match_info["tenant"], request.match_info["ns"], field, await json_body(request), request.query
        )
        return web.Response(status=204)

    async def remove_ns_policy(self, request: web.Request) -> web.StreamResponse:
        field = policy_field(request)
        await self.service.resources.set_namespace_policy(
            request.match_info["tenant"], request.match_info["ns"], field, None, request.query
        )
        return web.Response(status=204)


async def delete_namespace_with_topics(service: BrokerService, tenant: str, ns: str, *, force: bool) -> None:
    """Delete the namespace ``tenant/ns``: 409 while it has topics unless ``force``, which deletes
    them first (each on its owner)."""
    res = service.resources
    await res.get_namespace(tenant, ns)
    topics = await res.namespace_topics(tenant, ns)
    if topics and not force:
        raise Conflict(f"namespace {tenant}/{ns} still has topics: {', '.join(topics)}")
    for local in topics:
        await delete_any_topic(service, TopicName("persistent", tenant, ns, local), force=True)
    await res.delete_namespace_record(tenant, ns)
