"""REST routes of namespace isolation policies, on Pulsar's admin v2 paths (``pulsar-admin ns-isolation-policy``).

- ``GET /admin/v2/clusters`` (admin/clusters.py) names the ``{cluster}`` of the paths below;
- ``GET .../clusters/{cluster}/namespaceIsolationPolicies``: every policy, by name;
- ``GET .../namespaceIsolationPolicies/brokers``: each live broker and the policies naming it;
- ``GET .../namespaceIsolationPolicies/brokers/{broker}``: one broker's (404 when not live);
- ``GET|POST|DELETE .../namespaceIsolationPolicies/{policyName}``: one policy; the POST body is
  Pulsar's ``NamespaceIsolationData`` JSON and a bad one is refused with 400 and the reason,
  storing nothing; POST and DELETE answer 204.

``{cluster}`` must be the broker's own cluster (``clusterName``): another answers 404, as Pulsar's
for a cluster that does not exist. These are cluster administration, a superuser's business: the
authorization layer classifies every path under ``CLUSTERS_PREFIX``. The data lives in the
metadata store (``isolation.py``), so each broker reads the same policies.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.cluster import isolation
from magnetar.broker.policies.model import PolicyError
from magnetar.protocol.errors import NotFound

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

CLUSTERS_PREFIX = "/admin/v2/clusters"
BASE = CLUSTERS_PREFIX + "/{cluster}/namespaceIsolationPolicies"


def _cluster(service: BrokerService, request: web.Request) -> str:
    cluster = request.match_info["cluster"]
    if cluster != service.cluster:
        raise NotFound(f"Cluster {cluster} does not exist (this broker's cluster is {service.cluster})")
    return cluster


def _policy_name(request: web.Request) -> str:
    name = request.match_info["policy"]
    if not name.strip() or "/" in name:
        raise PolicyError(f"invalid namespace isolation policy name {name!r}")
    return name


def _shared_entry(broker_id: str) -> dict[str, Any]:
    return {"brokerName": broker_id, "policyName": None, "isPrimary": False, "namespaceRegex": []}


def add_isolation_routes(app: web.Application, service: BrokerService) -> None:
    """Register the routes; ``.../brokers`` before ``.../{policy}``, which would otherwise take it."""
    r = app.router

    async def list_policies(request: web.Request) -> web.StreamResponse:
        current = await isolation.load(service.store, _cluster(service, request))
        return web.json_response({name: p.to_json() for name, p in sorted(current.policies.items())})

    async def live_ids() -> list[str]:
        if service.ownership is None:  # standalone: the one broker
            return [service.broker_id]
        return sorted(b.broker_id for b in await service.ownership.live_brokers())

    async def brokers(request: web.Request) -> web.StreamResponse:
        current = await isolation.load(service.store, _cluster(service, request))
        out: list[dict[str, Any]] = []
        for broker_id in await live_ids():
            out += current.broker_roles(broker_id) or [_shared_entry(broker_id)]
        return web.json_response(out)

    async def broker(request: web.Request) -> web.StreamResponse:
        current = await isolation.load(service.store, _cluster(service, request))
        broker_id = request.match_info["broker"]
        if broker_id not in await live_ids():
            raise NotFound(f"Broker {broker_id} is not an available broker of cluster {service.cluster}")
        roles = current.broker_roles(broker_id)
        return web.json_response(roles[0] if roles else _shared_entry(broker_id))

    async def get_policy(request: web.Request) -> web.StreamResponse:
        current = await isolation.load(service.store, _cluster(service, request))
        name = _policy_name(request)
        if name not in current.policies:
            raise NotFound(f"Namespace isolation policy {name} does not exist")
        return web.json_response(current.policies[name].to_json())

    async def set_policy(request: web.Request) -> web.StreamResponse:
        cluster, name = _cluster(service, request), _policy_name(request)
        text = await request.text()
        try:
            policy = isolation.IsolationPolicy.from_json(json.loads(text) if text.strip() else None)
        except (isolation.InvalidIsolationPolicy, json.JSONDecodeError) as exc:
            raise PolicyError(f"Invalid format of input policy data. policy: {name}; data: {text}: {exc}") from None

        def put(policies: dict[str, isolation.IsolationPolicy]) -> None:
            policies[name] = policy

        await isolation.update(service.store, cluster, put)
        return web.Response(status=204)

    async def delete_policy(request: web.Request) -> web.StreamResponse:
        cluster, name = _cluster(service, request), _policy_name(request)

        def drop(policies: dict[str, isolation.IsolationPolicy]) -> None:
            policies.pop(name, None)

        await isolation.update(service.store, cluster, drop)
        return web.Response(status=204)

    r.add_get(BASE, list_policies)
    r.add_get(BASE + "/brokers", brokers)
    r.add_get(BASE + "/brokers/{broker}", broker)
    r.add_get(BASE + "/{policy}", get_policy)
    r.add_post(BASE + "/{policy}", set_policy)
    r.add_delete(BASE + "/{policy}", delete_policy)
