"""The subscription verbs, on Pulsar's paths under ``.../{topic}/subscription/{sub}/``.

Creating and deleting a subscription (412 while consumers are connected, unless ``?force=true``),
reset cursor (to a time or a message id), skip, clear backlog, expire (one subscription, or all of
the topic's) and peek; what they do to the cursor is in ``subscriptions/cursor_ops.py``. Each runs
on the topic's owner (the request is forwarded there). On a partitioned topic, reset by time,
clear backlog and expire apply to every partition (each on its owner), a reset by message id to the
partition its ``partitionIndex`` names; skip and peek are refused (405) as in Pulsar.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.admin.forwarding import call_owner, forward, raise_for
from magnetar.broker.admin.requests import NotAllowed, int_param, is_forced, topic_name
from magnetar.broker.policies.model import PolicyError
from magnetar.broker.subscriptions import cursor_ops as sa
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AlreadyExists, InvalidCommand, TopicNotFound
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

BASE = "/admin/v2/persistent/{tenant}/{ns}"


def add_subscription_routes(app: web.Application, service: BrokerService) -> None:
    """Register the subscription verbs on the admin ``app``, before the topic policies'
    ``.../{topic}/{policy}``."""
    routes = SubscriptionRoutes(service)
    r = app.router
    sub = BASE + "/{topic}/subscription/{sub}"
    r.add_put(sub, routes.create_subscription)
    r.add_delete(sub, routes.delete_subscription)
    r.add_post(sub + "/resetcursor/{timestamp}", routes.reset_cursor_to_time)
    r.add_post(sub + "/resetcursor", routes.reset_cursor_to_message_id)
    r.add_post(sub + "/skip/{count}", routes.skip_messages)
    r.add_post(sub + "/skip_all", routes.skip_all_messages)
    r.add_post(sub + "/expireMessages/{seconds}", routes.expire_messages)
    r.add_post(BASE + "/{topic}/all_subscription/expireMessages/{seconds}", routes.expire_all_subscriptions)
    r.add_get(sub + "/position/{position}", routes.peek_message)


def _http_date(ms: int) -> str:
    """Pulsar's DateFormatter (ISO-8601 with milliseconds), in UTC."""
    stamp = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _header_value(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ")


# A property key that can be part of a header name (RFC 9110 token characters).
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def peek_headers(msg: sa.PeekedMessage) -> dict[str, str]:
    """Pulsar's peek headers for one message, plus ``X-Pulsar-batch-index`` (ours: Pulsar sends
    the whole batch entry, this API sends the one message)."""
    meta = msg.meta
    headers = {"X-Pulsar-Message-ID": f"{msg.position.ledger_id}:{msg.position.entry_id}"}
    if msg.batch_index >= 0:
        headers["X-Pulsar-batch-index"] = str(msg.batch_index)
    if "pt" in meta:
        headers["X-Pulsar-publish-time"] = _http_date(int(meta["pt"]))
    if msg.event_time > 0:
        headers["X-Pulsar-event-time"] = _http_date(msg.event_time)
    if "dt" in meta:
        headers["X-Pulsar-deliver-at-time"] = _http_date(int(meta["dt"]))
    if "pn" in meta:
        headers["X-Pulsar-producer-name"] = _header_value(str(meta["pn"]))
    headers["X-Pulsar-sequence-id"] = str(msg.sequence_id)
    if msg.null_value:
        headers["X-Pulsar-null-value"] = "true"  # as Pulsar's peek of a null-value message
    if msg.partition_key is not None:
        headers["X-Pulsar-partition-key"] = _header_value(msg.partition_key)
    if msg.properties:
        headers["X-Pulsar-PROPERTY"] = json.dumps(msg.properties)
        for key, value in msg.properties.items():
            if _TOKEN.match(key):  # the others are in the JSON of X-Pulsar-PROPERTY only
                headers[f"X-Pulsar-PROPERTY-{key}"] = _header_value(value)
    return headers


class SubscriptionRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def _each_topic(
        self, request: web.Request, *, partitioned: str = "all", partition: int = -1, what: str = ""
    ) -> tuple[TopicName, list[TopicName]]:
        """The topic named in ``request`` and the (non-partitioned) topics the verb runs on:
        itself, every partition (``partitioned="all"``), the ``partition``-th one
        (``"one"``), or a 405 (``"refuse"``)."""
        name = topic_name(request)
        if not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"Topic {name} not found")
        n = await self.service.resources.partitions(name)
        if n == 0:
            return name, [name]
        if partitioned == "refuse":
            raise NotAllowed(f"{what} on a partitioned topic is not allowed")
        if partitioned == "one":
            if not 0 <= partition < n:
                raise NotAllowed(f"{name} is partitioned: give the partitionIndex (0..{n - 1}) of the message id")
            return name, [name.partition(partition)]
        return name, [name.partition(i) for i in range(n)]

    async def _on_subscriptions(
        self,
        request: web.Request,
        targets: tuple[TopicName, list[TopicName]],
        run: Callable[[Any], Awaitable[None]],
        body: bytes = b"",
    ) -> web.StreamResponse:
        """Run ``run(topic)`` on each target topic at its owner; 204 when all succeeded."""
        name, parts = targets
        if parts == [name]:
            forwarded = await forward(self.service, request, name)
            if forwarded is not None:
                return forwarded
            await run(await self.service.get_topic(name, create=False))
            return web.Response(status=204)
        suffix = request.raw_path[len(f"/admin/v2/persistent/{name.path}") :]
        for part in parts:
            remote = await call_owner(
                self.service, part, request.method, f"/admin/v2/persistent/{part.path}{suffix}", body
            )
            if remote is not None:
                raise_for(remote)
            else:
                await run(await self.service.get_topic(part, create=False))
        return web.Response(status=204)

    async def reset_cursor_to_time(self, request: web.Request) -> web.StreamResponse:
        timestamp = int_param(request, "timestamp")
        sub_name = request.match_info["sub"]

        async def run(topic: Any) -> None:
            await sa.reset_to_timestamp(sa.subscription_of(topic, sub_name), timestamp)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def reset_cursor_to_message_id(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw.strip() else None
        if not isinstance(body, dict):
            raise InvalidCommand('the body must be a message id: {"ledgerId": ..., "entryId": ...}')
        try:
            ledger, entry = int(body["ledgerId"]), int(body["entryId"])
            partition = int(body.get("partitionIndex", -1))
        except (KeyError, TypeError, ValueError):
            raise InvalidCommand(f"invalid message id {body!r}: ledgerId and entryId are integers") from None
        excluded = bool(body.get("excluded", body.get("isExcluded", False))) or (
            request.query.get("isExcluded", "false").lower() == "true"
        )
        sub_name = request.match_info["sub"]

        async def run(topic: Any) -> None:
            await sa.reset_to_message_id(sa.subscription_of(topic, sub_name), ledger, entry, excluded=excluded)

        targets = await self._each_topic(request, partitioned="one", partition=partition)
        return await self._on_subscriptions(request, targets, run, raw)

    async def create_subscription(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's createSubscription: a durable subscription with no consumer, its first message
        the body's message id (``{"ledgerId": -1, "entryId": -1}`` the earliest; no body: the
        latest). On a partitioned topic, one per partition; 409 where it already exists."""
        raw = await request.read()
        body = json.loads(raw) if raw.strip() else {"ledgerId": sa.LATEST_ID, "entryId": sa.LATEST_ID}
        try:
            ledger, entry = int(body["ledgerId"]), int(body["entryId"])
        except (KeyError, TypeError, ValueError):
            raise InvalidCommand(f"invalid message id {body!r}: ledgerId and entryId are integers") from None
        sub_name = request.match_info["sub"]

        async def run(topic: Any) -> None:
            if sub_name in topic.subscriptions:
                raise AlreadyExists(f"Subscription {sub_name} already exists for topic {topic.name}")
            cursor = await topic.ml.open_cursor(sub_name, start_at_earliest=True)
            sub = Subscription(topic.name, topic.ml, cursor, c.SUB_EXCLUSIVE)  # as a restart restores it
            topic.subscriptions[sub_name] = sub
            topic.rate_limits.attach(sub)
            if ledger >= 0:
                await sa.reset_to_message_id(sub, ledger, entry)

        return await self._on_subscriptions(request, await self._each_topic(request), run, raw)

    async def delete_subscription(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's deleteSubscription: 412 while consumers are connected, unless ``?force=true``."""
        sub_name = request.match_info["sub"]
        force = is_forced(request)

        async def run(topic: Any) -> None:
            sub = sa.subscription_of(topic, sub_name)
            if sub.dispatcher.consumers and not force:
                raise PolicyError("Subscription has active connected consumers", 412)
            await topic.unsubscribe(sub_name)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def skip_messages(self, request: web.Request) -> web.StreamResponse:
        count = int_param(request, "count")
        sub_name = request.match_info["sub"]

        async def run(topic: Any) -> None:
            await sa.skip(sa.subscription_of(topic, sub_name), count)

        return await self._on_subscriptions(
            request, await self._each_topic(request, partitioned="refuse", what="Skip messages"), run
        )

    async def skip_all_messages(self, request: web.Request) -> web.StreamResponse:
        sub_name = request.match_info["sub"]

        async def run(topic: Any) -> None:
            await sa.skip_all(sa.subscription_of(topic, sub_name))

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def expire_messages(self, request: web.Request) -> web.StreamResponse:
        seconds = int_param(request, "seconds")
        sub_name = request.match_info["sub"]
        now_ms = int(time.time() * 1000)

        async def run(topic: Any) -> None:
            await sa.expire(sa.subscription_of(topic, sub_name), seconds, now_ms)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def expire_all_subscriptions(self, request: web.Request) -> web.StreamResponse:
        seconds = int_param(request, "seconds")
        now_ms = int(time.time() * 1000)

        async def run(topic: Any) -> None:
            for sub in list(topic.subscriptions.values()):
                await sa.expire(sub, seconds, now_ms)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def peek_message(self, request: web.Request) -> web.StreamResponse:
        position = int_param(request, "position")
        name, _ = await self._each_topic(request, partitioned="refuse", what="Peek messages")
        forwarded = await forward(self.service, request, name)
        if forwarded is not None:
            return forwarded
        topic = await self.service.get_topic(name, create=False)
        msg = await sa.peek(sa.subscription_of(topic, request.match_info["sub"]), position)
        return web.Response(body=msg.payload, headers=peek_headers(msg), content_type="application/octet-stream")
