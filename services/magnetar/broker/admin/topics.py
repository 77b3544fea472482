"""Persistent topics, on Pulsar's ``/admin/v2/persistent/{tenant}/{ns}`` paths.

Listing a namespace's topics (partitions listed one by one) and its partitioned topics; creating a
topic, deleting it (on its owner; its schema goes with it, R123); the partitions of a partitioned
topic (``.../{topic}/partitions``: read, create, add to, delete, refused with 412 when decreased);
stats, the subscriptions' names and unloading, each asked of the topic's owner (of every
partition's, for a partitioned topic); partitioned stats; and the topic policies'
``.../{topic}/{policy}`` endpoints, registered last (``add_topic_policy_routes``) since they would
take the path of any other route of that shape.

Errors follow Pulsar: a JSON body ``{"reason": "..."}`` with 400 for invalid input, 404 for a
missing topic, 409 for "already exists" or "still in use", 412 for a precondition (partitions
decreased).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.forwarding import call_owner, forward, raise_for
from magnetar.broker.admin.requests import is_forced, json_body, policy_field, topic_name
from magnetar.broker.cluster.resources import Conflict
from magnetar.broker.policies.model import PolicyError
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.metadata import paths
from magnetar.protocol.errors import NotFound, TopicNotFound
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

# The most partitions one topic may have: each is a topic of its own, created and loaded one by
# one, so an unbounded count (2**63 in a fuzzed body) kept the broker busy forever.
MAX_PARTITIONS = 10_000
BASE = "/admin/v2/persistent/{tenant}/{ns}"


def add_topic_routes(app: web.Application, service: BrokerService) -> None:
    """Register the topic routes on the admin ``app``, before the subscription verbs."""
    routes = TopicRoutes(service)
    r = app.router
    r.add_get(BASE, routes.list_topics)
    r.add_get(BASE + "/partitioned", routes.list_partitioned)
    r.add_put(BASE + "/{topic}", routes.create_topic)
    r.add_delete(BASE + "/{topic}", routes.delete_topic)
    r.add_get(BASE + "/{topic}/partitions", routes.get_partitions)
    r.add_put(BASE + "/{topic}/partitions", routes.create_partitioned)
    r.add_post(BASE + "/{topic}/partitions", routes.update_partitions)
    r.add_delete(BASE + "/{topic}/partitions", routes.delete_partitioned)
    r.add_get(BASE + "/{topic}/stats", routes.topic_stats)
    r.add_get(BASE + "/{topic}/subscriptions", routes.list_subscriptions)
    r.add_put(BASE + "/{topic}/unload", routes.unload_topic)


def add_topic_policy_routes(app: web.Application, service: BrokerService) -> None:
    """Register partitioned stats and the topic policies' ``.../{topic}/{policy}`` endpoints: after
    every other ``.../{topic}/...`` route of every module, since ``{policy}`` matches any name."""
    routes = TopicRoutes(service)
    r = app.router
    r.add_get(BASE + "/{topic}/partitioned-stats", routes.partitioned_stats)
    r.add_get(BASE + "/{topic}/{policy}", routes.get_topic_policy)
    r.add_post(BASE + "/{topic}/{policy}", routes.set_topic_policy)
    r.add_delete(BASE + "/{topic}/{policy}", routes.remove_topic_policy)


class TopicRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def list_topics(self, request: web.Request) -> web.StreamResponse:
        tenant, ns = request.match_info["tenant"], request.match_info["ns"]
        res = self.service.resources
        await res.get_namespace(tenant, ns)
        out: list[str] = []
        for local in await res.namespace_topics(tenant, ns):
            name = TopicName("persistent", tenant, ns, local)
            n = await res.partitions(name)
            out.extend(str(name.partition(i)) for i in range(n)) if n else out.append(str(name))
        return web.json_response(sorted(out))

    async def list_partitioned(self, request: web.Request) -> web.StreamResponse:
        tenant, ns = request.match_info["tenant"], request.match_info["ns"]
        res = self.service.resources
        await res.get_namespace(tenant, ns)
        out = []
        for local in await res.namespace_topics(tenant, ns):
            name = TopicName("persistent", tenant, ns, local)
            if await res.partitions(name) > 0:
                out.append(str(name))
        return web.json_response(sorted(out))

    async def create_topic(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.create_topic(topic_name(request), 0)
        return web.Response(status=204)

    async def create_partitioned(self, request: web.Request) -> web.StreamResponse:
        n = await json_body(request)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARTITIONS:
            raise PolicyError(f"the number of partitions must be an integer in 1..{MAX_PARTITIONS}, got {n!r:.40}")
        await self.service.resources.create_topic(topic_name(request), n)
        return web.Response(status=204)

    async def update_partitions(self, request: web.Request) -> web.StreamResponse:
        n = await json_body(request)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARTITIONS:
            raise PolicyError(f"the number of partitions must be an integer in 1..{MAX_PARTITIONS}, got {n!r:.40}")
        await self.service.resources.update_partitions(topic_name(request), n)
        return web.Response(status=204)

    async def get_partitions(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"partitions": await self.service.resources.partitions(topic_name(request))})

    async def delete_topic(self, request: web.Request) -> web.StreamResponse:
        name = topic_name(request)
        if await self.service.resources.partitions(name) > 0:
            raise Conflict(f"{name} is a partitioned topic: delete it with DELETE .../partitions")
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        await self.service.delete_topic(name, force=is_forced(request))
        if name.partition_index < 0:  # R123: the topic's schema goes with it (a partition's is shared)
            await SchemaRegistry(self.service.store).remove(name)
        return web.Response(status=204)

    async def delete_partitioned(self, request: web.Request) -> web.StreamResponse:
        name = topic_name(request)
        if await self.service.resources.partitions(name) == 0:
            raise NotFound(f"partitioned topic {name} does not exist")
        await delete_any_topic(self.service, name, force=is_forced(request))
        return web.Response(status=204)

    async def topic_stats(self, request: web.Request) -> web.StreamResponse:
        name = topic_name(request)
        if not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist")
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        topic = await self.service.get_topic(name, create=False)
        return web.json_response(topic.stats())

    async def list_subscriptions(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's ``topics subscriptions``: the names of the topic's subscriptions (durable ones
        and readers'), sorted; for a partitioned topic those of every partition, each asked of its
        owner."""
        name = topic_name(request)
        partitions = await self.service.resources.partitions(name)
        targets = [name.partition(i) for i in range(partitions)] if partitions else [name]
        if not partitions and not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist")
        names: set[str] = set()
        for target in targets:
            remote = await call_owner(self.service, target, "GET", f"/admin/v2/persistent/{target.path}/subscriptions")
            if remote is not None:
                raise_for(remote)
                assert isinstance(remote.body, bytes)
                names.update(json.loads(remote.body))
                continue
            topic = await self.service.get_topic(target, create=False)
            names.update(topic.subscriptions)
        return web.json_response(sorted(names))

    async def unload_topic(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's ``topics unload``: close the topic on its owner (every partition of a
        partitioned topic). Its managed ledger is closed cleanly, per-topic state is written
        (deduplication snapshot), and clients reconnect and load it again."""
        name = topic_name(request)
        partitions = await self.service.resources.partitions(name)
        targets = [name.partition(i) for i in range(partitions)] if partitions else [name]
        if not partitions and not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist")
        for target in targets:
            remote = await call_owner(self.service, target, "PUT", f"/admin/v2/persistent/{target.path}/unload")
            if remote is not None:
                raise_for(remote)
                continue
            await self.service.unload_topic(str(target))
        return web.Response(status=204)

    async def partitioned_stats(self, request: web.Request) -> web.StreamResponse:
        name = topic_name(request)
        n = await self.service.resources.partitions(name)
        if n == 0:
            raise NotFound(f"partitioned topic {name} does not exist")
        parts = {}
        totals = {
            "msgRateIn": 0.0,
            "msgRateOut": 0.0,
            "msgThroughputIn": 0.0,
            "msgThroughputOut": 0.0,
            "msgInCounter": 0,
            "storageSize": 0,
        }
        for i in range(n):
            part = name.partition(i)
            remote = await call_owner(self.service, part, "GET", f"/admin/v2/persistent/{part.path}/stats")
            if remote is not None:
                raise_for(remote)
                assert isinstance(remote.body, bytes)
                stats = json.loads(remote.body)
            else:
                stats = (await self.service.get_topic(part, create=False)).stats()
            parts[str(name.partition(i))] = stats
            for k in totals:
                totals[k] += stats[k]
        return web.json_response({**totals, "metadata": {"partitions": n}, "partitions": parts})

    async def get_topic_policy(self, request: web.Request) -> web.StreamResponse:
        field = policy_field(request)
        record = await self.service.resources.get_topic(topic_name(request))
        if record is None:
            raise NotFound(f"topic {topic_name(request)} does not exist")
        return web.json_response((record[0].get("policies") or {}).get(field))

    async def set_topic_policy(self, request: web.Request) -> web.StreamResponse:
        field = policy_field(request)
        await self.service.resources.set_topic_policy(
            topic_name(request), field, await json_body(request), request.query
        )
        return web.Response(status=204)

    async def remove_topic_policy(self, request: web.Request) -> web.StreamResponse:
        field = policy_field(request)
        await self.service.resources.set_topic_policy(topic_name(request), field, None, request.query)
        return web.Response(status=204)


async def delete_any_topic(service: BrokerService, name: TopicName, *, force: bool) -> None:
    """Delete ``name`` on its owner, or every partition of it on theirs, then its record and its
    schema (R123): what deleting a topic's namespace does to each of its topics."""
    res = service.resources
    n = await res.partitions(name)
    for i in range(n):
        part = name.partition(i)
        if str(part) in service.topics or await service.store.exists(paths.managed_ledger(part)):
            remote = await call_owner(
                service, part, "DELETE", f"/admin/v2/persistent/{part.path}{'?force=true' if force else ''}"
            )
            if remote is not None:
                raise_for(remote)
            else:
                await service.delete_topic(part, force=force)
    if n:
        await res.delete_topic_record(name)
        await SchemaRegistry(service.store).remove(name)  # R123
        return
    remote = await call_owner(
        service, name, "DELETE", f"/admin/v2/persistent/{name.path}{'?force=true' if force else ''}"
    )
    if remote is not None:
        raise_for(remote)
    else:
        await service.delete_topic(name, force=force)
    await SchemaRegistry(service.store).remove(name)  # R123 (the owner did it too when forwarded)
