"""``/admin/v2/clusters[/{cluster}]``: Pulsar's cluster records (``pulsar-admin clusters``).

Pulsar keeps a ``ClusterData`` per cluster (``serviceUrl``, ``serviceUrlTls``, ``brokerServiceUrl``,
``brokerServiceUrlTls``, ...) that tools and geo-replication read. Magnetar keeps them in the
metadata store under ``/clusters/{cluster}/data``, so every broker serves the same records:

- ``GET /admin/v2/clusters`` lists the clusters: the broker's own and every one with a record;
- ``GET`` answers the stored record; the broker's own cluster has one even before anyone stored it,
  made of this broker's addresses; any other unknown cluster answers 404;
- ``PUT`` creates a record (204), 409 if one is stored already, as Pulsar's;
- ``POST`` replaces a record (204), 404 if there is none (the own cluster always has one);
- ``DELETE`` removes a record (204), 404 if there is none; the broker's own cluster is refused with
  412, as Pulsar refuses a cluster that is still in use.

The body is Pulsar's ``ClusterData`` JSON; the fields Magnetar does not use are stored as given.
Only URL fields are checked (a string naming a scheme), and a bad body is refused with 400.
Clusters are a superuser's business: the authorization layer already classifies ``/admin/v2/clusters``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.admin.isolation import CLUSTERS_PREFIX
from magnetar.broker.policies.model import PolicyError
from magnetar.metadata import paths
from magnetar.metadata.store import ANY_VERSION, MUST_NOT_EXIST
from magnetar.protocol.errors import AlreadyExists, BadVersion, NotFound

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

__all__ = ["add_cluster_routes", "cluster_path"]

_URL_FIELDS = ("serviceUrl", "serviceUrlTls", "brokerServiceUrl", "brokerServiceUrlTls")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def cluster_path(cluster: str) -> str:
    return paths.join("clusters", cluster, "data")


def _name(request: web.Request) -> str:
    cluster = request.match_info["cluster"]
    if not _NAME.match(cluster):
        raise PolicyError(f"invalid cluster name {cluster!r}")
    return cluster


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    doc = json.loads(raw) if raw.strip() else {}
    if not isinstance(doc, dict):
        raise PolicyError("the body must be a ClusterData JSON object")
    for field in _URL_FIELDS:
        value = doc.get(field)
        if value is not None and (not isinstance(value, str) or (value and "://" not in value)):
            raise PolicyError(f"{field} must be a URL such as pulsar://host:6650 or http://host:8080")
    return doc


def _own_record(service: BrokerService) -> dict[str, Any]:
    """The own cluster's record before one is stored: this broker's addresses."""
    return {
        "serviceUrl": service.web_url,
        "serviceUrlTls": service.web_url_tls,
        "brokerServiceUrl": service.broker_url,
        "brokerServiceUrlTls": service.broker_url_tls,
    }


def add_cluster_routes(app: web.Application, service: BrokerService) -> None:
    r = app.router
    base = CLUSTERS_PREFIX + "/{cluster}"

    async def get_cluster(request: web.Request) -> web.StreamResponse:
        cluster = _name(request)
        found = await service.store.get(cluster_path(cluster))
        if found is not None:
            return web.json_response(json.loads(found.value))
        if cluster == service.cluster:
            return web.json_response(_own_record(service))
        raise NotFound(f"Cluster {cluster} does not exist")

    async def create_cluster(request: web.Request) -> web.StreamResponse:
        cluster = _name(request)
        doc = await _body(request)
        try:
            await service.store.put(cluster_path(cluster), json.dumps(doc).encode(), MUST_NOT_EXIST)
        except BadVersion as exc:
            raise AlreadyExists(f"Cluster {cluster} already exists") from exc
        return web.Response(status=204)

    async def update_cluster(request: web.Request) -> web.StreamResponse:
        cluster = _name(request)
        doc = await _body(request)
        found = await service.store.get(cluster_path(cluster))
        if found is None and cluster != service.cluster:
            raise NotFound(f"Cluster {cluster} does not exist")
        await service.store.put(cluster_path(cluster), json.dumps(doc).encode(), ANY_VERSION)
        return web.Response(status=204)

    async def list_clusters(_request: web.Request) -> web.StreamResponse:
        names = {service.cluster}
        for name in await service.store.children(paths.join("clusters")):
            if await service.store.get(cluster_path(name)) is not None:
                names.add(name)
        return web.json_response(sorted(names))

    async def delete_cluster(request: web.Request) -> web.StreamResponse:
        cluster = _name(request)
        if cluster == service.cluster:
            raise PolicyError(f"Cluster {cluster} is in use: it is the cluster this broker serves", status=412)
        if await service.store.get(cluster_path(cluster)) is None:
            raise NotFound(f"Cluster {cluster} does not exist")
        await service.store.delete(cluster_path(cluster))
        return web.Response(status=204)

    r.add_get(CLUSTERS_PREFIX, list_clusters)
    r.add_get(base, get_cluster)
    r.add_put(base, create_cluster)
    r.add_post(base, update_cluster)
    r.add_delete(base, delete_cluster)
