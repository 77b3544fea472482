"""Running a topic's admin operation on the broker that owns it.

In a cluster, operations on one topic run on the broker that owns it: any other broker forwards
the request there (``forward``) and hands the answer back as is, so the admin API can be reached
through any broker. Operations over several topics (the partitions of a partitioned topic) ask each
owner in turn (``call_owner``) and turn an error answer into the error it means (``raise_for``).
Forwarded requests carry the caller's credentials, else the broker's own
(``auth/broker_credentials.py``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from magnetar.broker.admin.requests import topic_name
from magnetar.broker.auth.broker_credentials import outgoing_headers
from magnetar.broker.cluster.resources import Conflict
from magnetar.protocol.errors import MagnetarError, NotFound, TopicNotFound
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


async def call_owner(
    service: BrokerService, name: TopicName, method: str, path: str, body: bytes = b""
) -> web.Response | None:
    """Run ``method path`` on the owner of ``name`` if that is another broker, else None."""
    url = await service.owner_web_url(name)
    if url is None:
        return None
    return await proxy(service, method, url + path, body)


async def proxy(service: BrokerService, method: str, url: str, body: bytes = b"") -> web.Response:
    """Ask another broker's admin API and hand its answer back as is (body, content type
    and Pulsar's ``X-Pulsar-*`` headers), with the caller's credentials (auth/broker_credentials.py)."""
    headers = {"Content-Type": "application/json", **outgoing_headers(service.config)}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=body or None, headers=headers) as resp,
    ):
        payload = await resp.read()
        headers = {k: v for k, v in resp.headers.items() if k.lower().startswith("x-pulsar-")}
        return web.Response(
            status=resp.status,
            body=payload,
            content_type=resp.content_type or "application/json",
            headers=headers,
        )


async def forward(service: BrokerService, request: web.Request, name: TopicName) -> web.Response | None:
    """The owner's answer to ``request`` (same method, path, query and body) when another broker
    owns ``name``, else None: then this broker runs it."""
    return await call_owner(service, name, request.method, request.path_qs, await request.read())


async def topic_on_owner(service: BrokerService, request: web.Request) -> tuple[Any, web.Response | None]:
    """(the loaded topic, None) when this broker owns the existing topic of ``request``, else
    (None, the owner's answer to the forwarded request); ``TopicNotFound`` when it does not
    exist. The topic is a ``PersistentTopic`` (``Any`` here: the route modules that call this
    take it as their own protocol, e.g. ``CompactedTopic``)."""
    name = topic_name(request)
    if not await service.resources.topic_exists(name):
        raise TopicNotFound(f"Topic {name} not found")
    forwarded = await forward(service, request, name)
    if forwarded is not None:
        return None, forwarded
    return await service.get_topic(name, create=False), None


def raise_for(resp: web.Response) -> None:
    """Raise what an owner's error answer means here (404, 409, else 500), for the calls whose
    answer is not handed back as is."""
    if resp.status >= 400:
        text = resp.body.decode() if isinstance(resp.body, bytes) else ""
        try:
            reason = json.loads(text).get("reason", text)
        except ValueError:
            reason = text
        exc = MagnetarError(reason)
        if resp.status == 404:
            exc = NotFound(reason)
        elif resp.status == 409:
            exc = Conflict(reason)
        raise exc
