"""The admin API's non-persistent topic routes, on Pulsar's ``/admin/v2/non-persistent/...`` paths.

A non-persistent topic exists while a broker has it loaded (``non_persistent_registry``), so these
routes ask the broker that owns the topic's bundle (the admin server forwards there, as for
persistent topics), and the namespace listing asks every live broker for the topics it has loaded,
as Pulsar's ``NonPersistentTopics.getList`` asks the owner of each bundle.

Everything that moves or reads a cursor is refused with 405 and Pulsar's reason, because there is
no cursor and no backlog: skip, clear-backlog, reset-cursor, expire, peek and get-last-message-id.
Partitioned non-persistent topics are not supported: creating one is refused with 405 (topic
records are keyed without the domain, so a partitioned non-persistent topic would share its record
with the persistent topic of the same name).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from magnetar.broker.admin.forwarding import forward, proxy
from magnetar.broker.auth.broker_credentials import outgoing_headers
from magnetar.protocol.errors import NotFound, TopicNotFound
from magnetar.protocol.topic_name import NON_PERSISTENT, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


BASE = "/admin/v2/non-persistent/{tenant}/{ns}"

# Pulsar's 405 reasons for the cursor verbs on a non-persistent topic (PersistentTopicsBase);
# clear-backlog, reset-cursor and peek fail in Pulsar on a cast, so their wording is ours.
REFUSED = {
    "skip": "Skip messages on a non-persistent topic is not allowed",
    "skip_all": "Clear backlog on a non-persistent topic is not allowed",
    "resetcursor": "Reset cursor on a non-persistent topic is not allowed",
    "expireMessages": "Expiry messages on a non-persistent topic is not allowed",
    "position": "Peek messages on a non-persistent topic is not allowed",
    "lastMessageId": "GetLastMessageId on a non-persistent topic is not allowed",
}


def add_non_persistent_routes(app: web.Application, service: BrokerService) -> None:
    """Register the non-persistent topic routes on the admin ``app``."""
    routes = NonPersistentRoutes(service)
    r = app.router
    r.add_get("/lookup/v2/topic/non-persistent/{tenant}/{ns}/{topic}", routes.lookup)
    r.add_get(BASE, routes.list_topics)
    r.add_get(BASE + "/partitioned", routes.list_partitioned)
    r.add_put(BASE + "/{topic}", routes.create_topic)
    r.add_delete(BASE + "/{topic}", routes.delete_topic)
    r.add_get(BASE + "/{topic}/stats", routes.stats)
    r.add_get(BASE + "/{topic}/internalStats", routes.internal_stats)
    r.add_get(BASE + "/{topic}/subscriptions", routes.subscriptions)
    r.add_get(BASE + "/{topic}/partitions", routes.get_partitions)
    r.add_put(BASE + "/{topic}/partitions", routes.refuse_partitioned)
    r.add_post(BASE + "/{topic}/partitions", routes.refuse_partitioned)
    r.add_delete(BASE + "/{topic}/partitions", routes.no_partitioned)
    r.add_get(BASE + "/{topic}/partitioned-stats", routes.no_partitioned)
    r.add_get(BASE + "/{topic}/lastMessageId", routes.refuse("lastMessageId"))
    sub = BASE + "/{topic}/subscription/{sub}"
    r.add_post(sub + "/skip/{count}", routes.refuse("skip"))
    r.add_post(sub + "/skip_all", routes.refuse("skip_all"))
    r.add_post(sub + "/resetcursor/{timestamp}", routes.refuse("resetcursor"))
    r.add_post(sub + "/resetcursor", routes.refuse("resetcursor"))
    r.add_post(sub + "/expireMessages/{seconds}", routes.refuse("expireMessages"))
    r.add_post(BASE + "/{topic}/all_subscription/expireMessages/{seconds}", routes.refuse("expireMessages"))
    r.add_get(sub + "/position/{position}", routes.refuse("position"))


class NonPersistentRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    @staticmethod
    def _name(request: web.Request) -> TopicName:
        m = request.match_info
        return TopicName.parse(f"{NON_PERSISTENT}://{m['tenant']}/{m['ns']}/{m['topic']}")

    # ------------------------------------------------------------------ lookup and listing
    async def lookup(self, request: web.Request) -> web.StreamResponse:
        """As the persistent lookup: the owner of the topic's bundle, assigned if unowned."""
        name = self._name(request)
        own = self.service.ownership
        if own is None:
            broker_url, web_url = self.service.broker_url, self.service.web_url
        else:
            info, redirect = await own.lookup(name)
            if redirect:
                return await proxy(self.service, "GET", info.web_url + request.path)
            broker_url, web_url = info.broker_url, info.web_url
        return web.json_response({"brokerUrl": broker_url, "nativeUrl": broker_url, "httpUrl": web_url})

    async def list_topics(self, request: web.Request) -> web.StreamResponse:
        """The namespace's loaded non-persistent topics, from every live broker (``?local=true``:
        this broker's only, which is what one broker asks another)."""
        tenant, ns = request.match_info["tenant"], request.match_info["ns"]
        await self.service.resources.get_namespace(tenant, ns)
        names = set(self.service.non_persistent.in_namespace(tenant, ns))
        own = self.service.ownership
        if own is not None and request.query.get("local", "false").lower() != "true":
            for broker in await own.live_brokers():
                if broker.broker_id != own.me.broker_id:
                    names.update(await self._remote_list(broker.web_url + request.path + "?local=true"))
        return web.json_response(sorted(names))

    async def _remote_list(self, url: str) -> list[str]:
        """Another broker's loaded topics; a broker that does not answer has none to add (it
        may be stopping, and its topics go with it). The call carries the caller's credentials
        (``auth/broker_credentials.py``), or with authentication on every other broker would answer 401."""
        headers = outgoing_headers(self.service.config)
        try:
            async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
                if resp.status != 200:
                    return []
                body: Any = json.loads(await resp.read())
                return [str(x) for x in body] if isinstance(body, list) else []
        except (aiohttp.ClientError, OSError, ValueError):
            return []

    async def list_partitioned(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
        return web.json_response([])

    # ------------------------------------------------------------------ one topic
    async def create_topic(self, request: web.Request) -> web.StreamResponse:
        """Load the topic on its owner (Pulsar's createNonPartitionedTopic on this domain): it
        exists from now until it is deleted or its broker stops."""
        name = self._name(request)
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        if str(name) in self.service.non_persistent.topics:
            return web.json_response({"reason": "This topic already exists"}, status=409)
        await self.service.non_persistent.get(name, explicit=True)
        return web.Response(status=204)

    async def delete_topic(self, request: web.Request) -> web.StreamResponse:
        name = self._name(request)
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        force = request.query.get("force", "false").lower() == "true"
        await self.service.delete_topic(name, force=force)
        return web.Response(status=204)

    async def stats(self, request: web.Request) -> web.StreamResponse:
        name = self._name(request)
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        return web.json_response(self.service.non_persistent.loaded(name).stats())

    async def internal_stats(self, request: web.Request) -> web.StreamResponse:
        name = self._name(request)
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        return web.json_response(self.service.non_persistent.loaded(name).internal_stats())

    async def subscriptions(self, request: web.Request) -> web.StreamResponse:
        name = self._name(request)
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        return web.json_response(sorted(self.service.non_persistent.loaded(name).subscriptions))

    async def get_partitions(self, request: web.Request) -> web.StreamResponse:
        """Always 0: a non-persistent topic here is never partitioned."""
        name = self._name(request)
        await self.service.resources.get_namespace(name.tenant, name.namespace)
        return web.json_response({"partitions": 0})

    async def refuse_partitioned(self, request: web.Request) -> web.StreamResponse:
        name = self._name(request)
        reason = (
            f"Partitioned non-persistent topics are not supported by Magnetar: create {name} "
            "as a non-partitioned topic, or use a partitioned persistent topic"
        )
        return web.json_response({"reason": reason}, status=405)

    async def no_partitioned(self, request: web.Request) -> web.StreamResponse:
        raise NotFound(f"Partitioned topic {self._name(request)} does not exist")

    def refuse(self, verb: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """A handler answering 405 with Pulsar's reason for ``verb``, once the topic is known to
        exist (404 first, as Pulsar checks the topic before the operation)."""
        reason = REFUSED[verb]

        async def handler(request: web.Request) -> web.StreamResponse:
            name = self._name(request)
            forwarded = await forward(self.service, request, name)
            if forwarded is not None:
                return forwarded
            if str(name) not in self.service.non_persistent.topics:
                raise TopicNotFound(f"Topic {name} not found")
            return web.json_response({"reason": reason}, status=405)

        return handler
