"""Namespace bundles and broker drains on Pulsar's admin paths (``pulsar-admin namespaces bundles |
unload | split-bundle``, ``brokers shutdown``).

- ``GET /admin/v2/namespaces/{t}/{ns}/bundles``: the namespace's ranges as Pulsar's BundlesData;
- ``PUT .../{t}/{ns}/unload``: every bundle, each on its owner;
- ``PUT .../{t}/{ns}/{bundle}/unload?destinationBroker=``: one bundle, on its owner, its next owner
  the named broker when given;
- ``PUT .../{t}/{ns}/{bundle}/split?unload=&splitAlgorithmName=``: on the owner; without ``unload``
  the owner keeps both halves and their topics stay loaded;
- ``GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``: the bundles a broker owns, as
  Pulsar's map of bundle to NamespaceOwnershipStatus (asked of that broker);
- ``POST /admin/v2/brokers/shutdown?maxConcurrentUnloadPerSec=&forcedTerminateTopic=``: drain this
  broker (answered once its bundles are unloaded), then end its process as SIGTERM does.

A bundle that is not one of the namespace's answers 412 (Pulsar's "Invalid bundle range"), as does
an unknown split algorithm; a bundle nobody owns is handled here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.forwarding import proxy
from magnetar.broker.cluster import bundle_moves
from magnetar.broker.cluster.ownership import BrokerInfo, bundle_of
from magnetar.broker.policies.model import PolicyError
from magnetar.metadata import paths
from magnetar.protocol.errors import NotFound
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

_NS = "/admin/v2/namespaces/{tenant}/{ns}"


def add_bundle_routes(app: web.Application, service: BrokerService) -> None:
    """Register the bundle and drain routes (before the namespace ``{policy}`` routes)."""
    routes = BundleRoutes(service)
    r = app.router
    r.add_get(_NS + "/bundles", routes.bundles)
    r.add_put(_NS + "/unload", routes.unload_namespace)
    r.add_put(_NS + "/{bundle}/unload", routes.unload_bundle)
    r.add_put(_NS + "/{bundle}/split", routes.split_bundle)
    r.add_get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", routes.owned_namespaces)
    r.add_post("/admin/v2/brokers/shutdown", routes.shutdown)


def _flag(request: web.Request, name: str, default: bool = False) -> bool:
    return request.query.get(name, "true" if default else "false").lower() == "true"


class BundleRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def _owner_url(self, tenant: str, ns: str, bundle: str) -> str | None:
        """The admin URL of the bundle's owner when that is another broker, else None."""
        own = self.service.ownership
        if own is None:
            return None
        found = await self.service.store.get(paths.ownership(tenant, ns, bundle))
        if found is None:
            return None
        owner = BrokerInfo.from_json(found.value)
        return None if owner.broker_id == own.me.broker_id else owner.web_url

    async def bundles(self, request: web.Request) -> web.StreamResponse:
        t, ns = request.match_info["tenant"], request.match_info["ns"]
        ranges, _ = await bundle_moves.namespace_ranges(self.service, t, ns)
        return web.json_response(ranges.to_json())

    async def unload_namespace(self, request: web.Request) -> web.StreamResponse:
        t, ns = request.match_info["tenant"], request.match_info["ns"]
        ranges, _ = await bundle_moves.namespace_ranges(self.service, t, ns)
        for bundle in ranges.names():
            url = await self._owner_url(t, ns, bundle)
            if url is not None:
                resp = await proxy(self.service, "PUT", f"{url}/admin/v2/namespaces/{t}/{ns}/{bundle}/unload")
                if resp.status >= 400:
                    return resp
            else:
                await bundle_moves.unload_bundle(self.service, t, ns, bundle)
        return web.Response(status=204)

    async def unload_bundle(self, request: web.Request) -> web.StreamResponse:
        t, ns, bundle = request.match_info["tenant"], request.match_info["ns"], request.match_info["bundle"]
        url = await self._owner_url(t, ns, bundle)
        if url is not None:
            return await proxy(self.service, "PUT", url + request.path_qs)
        destination = request.query.get("destinationBroker") or None
        await bundle_moves.unload_bundle(self.service, t, ns, bundle, destination)
        return web.Response(status=204)

    async def split_bundle(self, request: web.Request) -> web.StreamResponse:
        t, ns, bundle = request.match_info["tenant"], request.match_info["ns"], request.match_info["bundle"]
        url = await self._owner_url(t, ns, bundle)
        if url is not None:
            return await proxy(self.service, "PUT", url + request.path_qs)
        await bundle_moves.split_bundle(
            self.service,
            t,
            ns,
            bundle,
            algorithm=request.query.get("splitAlgorithmName") or None,
            unload=_flag(request, "unload"),
        )
        return web.Response(status=204)

    async def owned_namespaces(self, request: web.Request) -> web.StreamResponse:
        service = self.service
        cluster, broker = request.match_info["cluster"], request.match_info["broker"]
        if cluster != service.cluster:
            raise NotFound(f"Cluster {cluster} does not exist (this broker's cluster is {service.cluster})")
        own = service.ownership
        if own is None:
            web_address = (service.web_url or service.web_url_tls or "").split("://", 1)[-1].rstrip("/")
            if broker not in (service.broker_id, web_address):
                raise NotFound(f"Broker {broker} is not an available broker")
            names = await _loaded_bundles(service)
        else:
            try:
                target = await bundle_moves.resolve_broker(service, broker)
            except PolicyError as exc:  # a broker that is not live owns nothing: not found, as standalone
                raise NotFound(str(exc)) from None
            if target.broker_id != own.me.broker_id:
                return await proxy(service, "GET", target.web_url + request.path_qs)
            names = {p.removeprefix(paths.OWNERSHIP + "/") for p in own.owned}
        status = {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
        return web.json_response({name: status for name in sorted(names)})

    async def shutdown(self, request: web.Request) -> web.StreamResponse:
        """Drain, answer 204, then end the process (``on_shutdown``, set by the command line)."""
        per_second = float(request.query.get("maxConcurrentUnloadPerSec") or 0)
        service = self.service
        await bundle_moves.drain(service, per_second)
        resp = web.Response(status=204)
        await resp.prepare(request)
        await resp.write_eof()
        if service.on_shutdown is not None:
            service.on_shutdown()
        return resp


async def _loaded_bundles(service: BrokerService) -> set[str]:
    """``tenant/ns/bundle`` of every loaded topic: what a standalone broker owns."""
    out: set[str] = set()
    for key in bundle_moves.loaded_keys(service):
        name = TopicName.parse(key)
        ranges, _ = await bundle_moves.namespace_ranges(service, name.tenant, name.namespace)
        out.add(f"{name.tenant}/{name.namespace}/{bundle_of(name, ranges)}")
    return out
