"""The admin REST API (aiohttp), on Pulsar's ``/admin/v2/...`` paths, plus health and metrics.

In a cluster, operations on one topic run on the broker that owns it: any other broker forwards
the request there (``_forward``), so the admin API can be reached through any broker. The bookie
routes (``/admin/v2/bookies...``) are registered from ``admin_bookies``.

Errors follow Pulsar: a JSON body ``{"reason": "..."}`` with 400 for invalid input, 404 for a
missing tenant/namespace/topic/subscription, 405 for an operation Pulsar does not allow on a
partitioned topic, 409 for "already exists" or "still in use", 412 for a precondition
(partitions decreased, backlog quota above retention).

The subscription verbs (reset cursor, skip, clear backlog, expire, peek) are Pulsar's paths under
``.../{topic}/subscription/{sub}/``; what they do is in ``subscription_admin``. On a partitioned
topic, reset by time, clear backlog and expire apply to every partition (each on its owner), a
reset by message id to the partition its ``partitionIndex`` names; skip and peek are refused
(405) as in Pulsar.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from magnetar.broker.admin.bookies import add_bookie_routes
from magnetar.broker.admin.clusters import add_cluster_routes
from magnetar.broker.admin.compaction import add_compaction_routes
from magnetar.broker.admin.internal_stats import add_internal_stats_route
from magnetar.broker.admin.isolation import add_isolation_routes
from magnetar.broker.admin.names import names_middleware
from magnetar.broker.admin.non_persistent import add_non_persistent_routes
from magnetar.broker.admin.permissions import add_permission_routes
from magnetar.broker.admin.schemas import add_schema_routes
from magnetar.broker.admin.trim import add_trim_route
from magnetar.broker.auth.http import auth_middleware, outgoing_headers
from magnetar.broker.auth.providers import authentication_for
from magnetar.broker.authz.checks import authorizer_for
from magnetar.broker.authz.http import authz_middleware
from magnetar.broker.cluster.resources import Conflict
from magnetar.broker.metrics import topics as topic_metrics
from magnetar.broker.policies.model import POLICY_ENDPOINTS, PolicyError, unenforced
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.subscriptions import cursor_ops as sa
from magnetar.broker.subscriptions.subscription import Subscription
from magnetar.metadata import paths
from magnetar.protocol import commands as c
from magnetar.protocol.errors import (
    AlreadyExists,
    BadVersion,
    InvalidCommand,
    InvalidTopicName,
    MagnetarError,
    NamespaceNotFound,
    NotFound,
    ServiceNotReady,
    TenantNotFound,
    TopicNotFound,
)
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)
# The most partitions one topic may have: each is a topic of its own, created and loaded one by
# one, so an unbounded count (2**63 in a fuzzed body) kept the broker busy forever.
MAX_PARTITIONS = 10_000
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class NotAllowed(MagnetarError):
    """HTTP 405: an operation Pulsar refuses on this kind of topic."""


def _status_for(exc: MagnetarError) -> int:
    if isinstance(exc, PolicyError):
        return exc.status
    if isinstance(exc, NotAllowed):
        return 405
    if isinstance(exc, (TenantNotFound, NamespaceNotFound, TopicNotFound, NotFound)):
        return 404
    if isinstance(exc, (AlreadyExists, Conflict, BadVersion)):  # BadVersion: a concurrent change won
        return 409
    if isinstance(exc, (InvalidCommand, InvalidTopicName)):
        return 400
    if isinstance(exc, ServiceNotReady):  # retryable: e.g. no broker of the namespace's isolation group
        return 503
    return 500


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except MagnetarError as exc:
        return web.json_response({"reason": str(exc)}, status=_status_for(exc))
    except json.JSONDecodeError as exc:
        return web.json_response({"reason": f"invalid JSON body: {exc}"}, status=400)
    except web.HTTPException as exc:  # aiohttp's own refusals (no such route, wrong method): JSON too
        if exc.status < 400:
            raise
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None  # a 405 says what is allowed
        return web.json_response({"reason": exc.reason}, status=exc.status, headers=allow)
    except (UnicodeDecodeError, RecursionError) as exc:  # not UTF-8 JSON, or nested past the parser's depth
        return web.json_response({"reason": f"invalid JSON body: {exc!s:.200}"}, status=400)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        # A JSON body of the wrong shape (a string where a map belongs, a huge number) reached a
        # handler: the caller's mistake, so a 400, not a 500 (found by tests/fuzz/test_admin.py).
        log.info("refused %s %s: %r", request.method, request.path, exc)
        return web.json_response({"reason": f"invalid request: {type(exc).__name__}: {exc!s:.200}"}, status=400)


async def _body(request: web.Request) -> Any:
    text = await request.text()
    return json.loads(text) if text.strip() else None


def _force(request: web.Request) -> bool:
    return request.query.get("force", "false").lower() == "true"


def _int_param(request: web.Request, key: str) -> int:
    raw = request.match_info[key]
    try:
        return int(raw)
    except ValueError:
        raise InvalidCommand(f"{key} must be an integer, got {raw!r}") from None


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


class AdminServer:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        # Authentication first (broker/auth/http.py): nothing runs for a refused request.
        config = service.config
        authn = auth_middleware(authentication_for(service, config), config.authenticate_metrics_endpoint)
        # Then the names in the path (broker/admin/names.py, R92): 412 before any handler runs.
        # Then authorization (broker/authz/http.py, R73): one table of rules, before any handler.
        authz = authz_middleware(authorizer_for(service, config, service.store))
        self.app = web.Application(middlewares=[authn, names_middleware, authz, errors_middleware])
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.port_tls: int | None = None
        self._routes()

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def start_tls(self, host: str, port: int, ssl_context: ssl.SSLContext) -> None:
        """Serve the same app with HTTPS on ``port`` too (webServicePortTls; ``node/tls.py``)."""
        if self._runner is None:
            self._runner = web.AppRunner(self.app, access_log=None)
            await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True, ssl_context=ssl_context)
        await site.start()
        server = site._server
        assert server is not None
        self.port_tls = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _routes(self) -> None:
        r = self.app.router
        r.add_get("/admin/v2/brokers/health", self.health)
        r.add_get("/ready", self.ready)
        r.add_get("/lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", self.lookup_topic)
        r.add_get("/metrics", self.metrics)
        add_bookie_routes(self.app, self.service)  # /admin/v2/bookies...: broker/admin/bookies.py
        add_non_persistent_routes(self.app, self)  # /admin/v2/non-persistent/...: non_persistent_admin.py
        add_compaction_routes(self.app, self)  # .../{topic}/compaction: compaction/admin.py
        add_internal_stats_route(self.app, self)  # .../{topic}/internalStats: internal_stats.py
        add_trim_route(self.app, self)  # POST .../{topic}/trim: trim_admin.py
        add_permission_routes(self.app, self.service)  # .../permissions, subscriptionAuthMode: permissions_admin.py
        add_isolation_routes(self.app, self.service)  # /admin/v2/clusters/...: isolation_admin.py
        add_cluster_routes(self.app, self.service)  # /admin/v2/clusters/{cluster}: clusters_admin.py
        add_schema_routes(self.app, self)  # /admin/v2/schemas/..., schema policies' PUT: schema_admin.py
        r.add_get("/admin/v2/tenants", self.list_tenants)
        r.add_get("/admin/v2/tenants/{tenant}", self.get_tenant)
        r.add_put("/admin/v2/tenants/{tenant}", self.create_tenant)
        r.add_post("/admin/v2/tenants/{tenant}", self.update_tenant)
        r.add_delete("/admin/v2/tenants/{tenant}", self.delete_tenant)
        r.add_get("/admin/v2/namespaces/{tenant}", self.list_namespaces)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}", self.get_namespace)
        r.add_put("/admin/v2/namespaces/{tenant}/{ns}", self.create_namespace)
        r.add_delete("/admin/v2/namespaces/{tenant}/{ns}", self.delete_namespace)
        r.add_get("/admin/v2/namespaces/{tenant}/{ns}/{policy}", self.get_ns_policy)
        r.add_post("/admin/v2/namespaces/{tenant}/{ns}/{policy}", self.set_ns_policy)
        r.add_delete("/admin/v2/namespaces/{tenant}/{ns}/{policy}", self.remove_ns_policy)
        base = "/admin/v2/persistent/{tenant}/{ns}"
        r.add_get(base, self.list_topics)
        r.add_get(base + "/partitioned", self.list_partitioned)
        r.add_put(base + "/{topic}", self.create_topic)
        r.add_delete(base + "/{topic}", self.delete_topic)
        r.add_get(base + "/{topic}/partitions", self.get_partitions)
        r.add_put(base + "/{topic}/partitions", self.create_partitioned)
        r.add_post(base + "/{topic}/partitions", self.update_partitions)
        r.add_delete(base + "/{topic}/partitions", self.delete_partitioned)
        r.add_get(base + "/{topic}/stats", self.topic_stats)
        r.add_get(base + "/{topic}/subscriptions", self.list_subscriptions)
        r.add_put(base + "/{topic}/unload", self.unload_topic)
        sub = base + "/{topic}/subscription/{sub}"
        r.add_put(sub, self.create_subscription)
        r.add_delete(sub, self.delete_subscription)
        r.add_post(sub + "/resetcursor/{timestamp}", self.reset_cursor_to_time)
        r.add_post(sub + "/resetcursor", self.reset_cursor_to_message_id)
        r.add_post(sub + "/skip/{count}", self.skip_messages)
        r.add_post(sub + "/skip_all", self.skip_all_messages)
        r.add_post(sub + "/expireMessages/{seconds}", self.expire_messages)
        r.add_post(base + "/{topic}/all_subscription/expireMessages/{seconds}", self.expire_all_subscriptions)
        r.add_get(sub + "/position/{position}", self.peek_message)
        r.add_get(base + "/{topic}/partitioned-stats", self.partitioned_stats)
        r.add_get(base + "/{topic}/{policy}", self.get_topic_policy)
        r.add_post(base + "/{topic}/{policy}", self.set_topic_policy)
        r.add_delete(base + "/{topic}/{policy}", self.remove_topic_policy)

    # ------------------------------------------------------------------ health
    async def health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def ready(self, request: web.Request) -> web.StreamResponse:
        if not self.service.ready:
            return web.Response(text="not ready", status=503)
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        body = generate_latest(self.service.metrics.registry)
        for reg in self.service.extra_registries:
            body += generate_latest(reg)
        # Per-topic families: read from the loaded topics and rendered in slices, with the loop
        # idle between them (topic_metrics.py).
        svc = self.service
        families = await topic_metrics.collect(list(svc.topics.items()), list(svc.non_persistent.topics.items()))
        body += await topic_metrics.render(families)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    # ------------------------------------------------------------------ tenants
    async def list_tenants(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.service.resources.list_tenants())

    async def get_tenant(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.service.resources.get_tenant(request.match_info["tenant"]))

    async def create_tenant(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.create_tenant(request.match_info["tenant"], await _body(request) or {})
        return web.Response(status=204)

    async def update_tenant(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.update_tenant(request.match_info["tenant"], await _body(request) or {})
        return web.Response(status=204)

    async def delete_tenant(self, request: web.Request) -> web.StreamResponse:
        tenant = request.match_info["tenant"]
        res = self.service.resources
        for full in await res.delete_tenant(tenant, force=_force(request)):
            await self._delete_namespace(tenant, full.split("/", 1)[1], force=True)
        await res.remove_tenant_record(tenant)
        return web.Response(status=204)

    # ------------------------------------------------------------------ namespaces
    async def list_namespaces(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(await self.service.resources.list_namespaces(request.match_info["tenant"]))

    async def get_namespace(self, request: web.Request) -> web.StreamResponse:
        doc, _ = await self.service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
        return web.json_response({**doc, "unenforced": unenforced(doc)})

    async def create_namespace(self, request: web.Request) -> web.StreamResponse:
        await self.service.resources.create_namespace(
            request.match_info["tenant"], request.match_info["ns"], await _body(request)
        )
        return web.Response(status=204)

    async def delete_namespace(self, request: web.Request) -> web.StreamResponse:
        await self._delete_namespace(request.match_info["tenant"], request.match_info["ns"], force=_force(request))
        return web.Response(status=204)

    async def _delete_namespace(self, tenant: str, ns: str, *, force: bool) -> None:
        res = self.service.resources
        await res.get_namespace(tenant, ns)
        topics = await res.namespace_topics(tenant, ns)
        if topics and not force:
            raise Conflict(f"namespace {tenant}/{ns} still has topics: {', '.join(topics)}")
        for local in topics:
            await self._delete_any_topic(TopicName("persistent", tenant, ns, local), force=True)
        await res.delete_namespace_record(tenant, ns)

    def _policy_field(self, request: web.Request) -> str:
        policy = request.match_info["policy"]
        field = POLICY_ENDPOINTS.get(policy)
        if field is None:
            raise NotFound(f"unknown policy endpoint {policy!r}")
        return field

    async def get_ns_policy(self, request: web.Request) -> web.StreamResponse:
        field = self._policy_field(request)
        doc, _ = await self.service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
        return web.json_response(doc.get(field))

    async def set_ns_policy(self, request: web.Request) -> web.StreamResponse:
        field = self._policy_field(request)
        await self.service.resources.set_namespace_policy(
            request.match_info["tenant"], request.match_info["ns"], field, await _body(request), request.query
        )
        return web.Response(status=204)

    async def remove_ns_policy(self, request: web.Request) -> web.StreamResponse:
        field = self._policy_field(request)
        await self.service.resources.set_namespace_policy(
            request.match_info["tenant"], request.match_info["ns"], field, None, request.query
        )
        return web.Response(status=204)

    # ------------------------------------------------------------------ forwarding
    async def _call_owner(self, name: TopicName, method: str, path: str, body: bytes = b"") -> web.Response | None:
        """Run ``method path`` on the owner of ``name`` if that is another broker, else None."""
        url = await self.service.owner_web_url(name)
        if url is None:
            return None
        return await self._proxy(method, url + path, body)

    async def _proxy(self, method: str, url: str, body: bytes = b"") -> web.Response:
        """Ask another broker's admin API and hand its answer back as is (body, content type
        and Pulsar's ``X-Pulsar-*`` headers), with the caller's credentials (auth/http.py)."""
        headers = {"Content-Type": "application/json", **outgoing_headers(self.service.config)}
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

    async def _forward(self, request: web.Request, name: TopicName) -> web.Response | None:
        return await self._call_owner(name, request.method, request.path_qs, await request.read())

    async def _topic_on_owner(self, request: web.Request) -> tuple[Any, web.Response | None]:
        """(the loaded topic, None) when this broker owns the existing topic of ``request``, else
        (None, the owner's answer to the forwarded request); ``TopicNotFound`` when it does not
        exist. The topic is a ``PersistentTopic`` (``Any`` here: the route modules that call this
        take it as their own protocol, e.g. ``CompactedTopic``)."""
        name = self._topic(request)
        if not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"Topic {name} not found")
        forwarded = await self._forward(request, name)
        if forwarded is not None:
            return None, forwarded
        return await self.service.get_topic(name, create=False), None

    @staticmethod
    def _raise_for(resp: web.Response) -> None:
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

    # ------------------------------------------------------------------ lookup
    async def lookup_topic(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's HTTP lookup (``pulsar-admin topics lookup``): the broker that owns the topic.

        Like the binary lookup it assigns an unowned bundle; a broker that is not the one to own it
        asks the chosen broker over HTTP, so the answer is always the owner itself."""
        name = self._topic(request)
        # R111: Pulsar's listenerName query parameter or X-Pulsar-ListenerName header
        listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName") or None
        own = self.service.ownership
        if own is None:  # standalone: this broker serves everything
            web_url = self.service.web_url
            url, url_tls = self.service.own_lookup_urls(listener)
        else:
            info, redirect = await own.lookup(name)
            if redirect:
                return await self._proxy("GET", info.web_url + request.path_qs)
            web_url = info.web_url
            url, url_tls = info.lookup_urls(listener)
        answer = {"brokerUrl": url, "nativeUrl": url, "httpUrl": web_url}
        if url_tls:
            answer["brokerUrlTls"] = url_tls
        return web.json_response(answer)

    # ------------------------------------------------------------------ topics
    def _topic(self, request: web.Request) -> TopicName:
        m = request.match_info
        return TopicName.parse(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")

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
        await self.service.resources.create_topic(self._topic(request), 0)
        return web.Response(status=204)

    async def create_partitioned(self, request: web.Request) -> web.StreamResponse:
        n = await _body(request)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARTITIONS:
            raise PolicyError(f"the number of partitions must be an integer in 1..{MAX_PARTITIONS}, got {n!r:.40}")
        await self.service.resources.create_topic(self._topic(request), n)
        return web.Response(status=204)

    async def update_partitions(self, request: web.Request) -> web.StreamResponse:
        n = await _body(request)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARTITIONS:
            raise PolicyError(f"the number of partitions must be an integer in 1..{MAX_PARTITIONS}, got {n!r:.40}")
        await self.service.resources.update_partitions(self._topic(request), n)
        return web.Response(status=204)

    async def get_partitions(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"partitions": await self.service.resources.partitions(self._topic(request))})

    async def delete_topic(self, request: web.Request) -> web.StreamResponse:
        name = self._topic(request)
        if await self.service.resources.partitions(name) > 0:
            raise Conflict(f"{name} is a partitioned topic: delete it with DELETE .../partitions")
        forwarded = await self._forward(request, name)
        if forwarded is not None:
            return forwarded
        await self.service.delete_topic(name, force=_force(request))
        if name.partition_index < 0:  # R123: the topic's schema goes with it (a partition's is shared)
            await SchemaRegistry(self.service.store).remove(name)
        return web.Response(status=204)

    async def delete_partitioned(self, request: web.Request) -> web.StreamResponse:
        name = self._topic(request)
        if await self.service.resources.partitions(name) == 0:
            raise NotFound(f"partitioned topic {name} does not exist")
        await self._delete_any_topic(name, force=_force(request))
        return web.Response(status=204)

    async def _delete_any_topic(self, name: TopicName, *, force: bool) -> None:
        res = self.service.resources
        n = await res.partitions(name)
        for i in range(n):
            part = name.partition(i)
            if str(part) in self.service.topics or await self.service.store.exists(paths.managed_ledger(part)):
                remote = await self._call_owner(
                    part, "DELETE", f"/admin/v2/persistent/{part.path}{'?force=true' if force else ''}"
                )
                if remote is not None:
                    self._raise_for(remote)
                else:
                    await self.service.delete_topic(part, force=force)
        if n:
            await res.delete_topic_record(name)
            await SchemaRegistry(self.service.store).remove(name)  # R123
            return
        remote = await self._call_owner(
            name, "DELETE", f"/admin/v2/persistent/{name.path}{'?force=true' if force else ''}"
        )
        if remote is not None:
            self._raise_for(remote)
        else:
            await self.service.delete_topic(name, force=force)
        await SchemaRegistry(self.service.store).remove(name)  # R123 (the owner did it too when forwarded)

    async def topic_stats(self, request: web.Request) -> web.StreamResponse:
        name = self._topic(request)
        if not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist")
        forwarded = await self._forward(request, name)
        if forwarded is not None:
            return forwarded
        topic = await self.service.get_topic(name, create=False)
        return web.json_response(topic.stats())

    async def list_subscriptions(self, request: web.Request) -> web.StreamResponse:
        """Pulsar's ``topics subscriptions``: the names of the topic's subscriptions (durable ones
        and readers'), sorted; for a partitioned topic those of every partition, each asked of its
        owner."""
        name = self._topic(request)
        partitions = await self.service.resources.partitions(name)
        targets = [name.partition(i) for i in range(partitions)] if partitions else [name]
        if not partitions and not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist")
        names: set[str] = set()
        for target in targets:
            remote = await self._call_owner(target, "GET", f"/admin/v2/persistent/{target.path}/subscriptions")
            if remote is not None:
                self._raise_for(remote)
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
        name = self._topic(request)
        partitions = await self.service.resources.partitions(name)
        targets = [name.partition(i) for i in range(partitions)] if partitions else [name]
        if not partitions and not await self.service.resources.topic_exists(name):
            raise TopicNotFound(f"topic {name} does not exist")
        for target in targets:
            remote = await self._call_owner(target, "PUT", f"/admin/v2/persistent/{target.path}/unload")
            if remote is not None:
                self._raise_for(remote)
                continue
            await self.service.unload_topic(str(target))
        return web.Response(status=204)

    async def partitioned_stats(self, request: web.Request) -> web.StreamResponse:
        name = self._topic(request)
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
            remote = await self._call_owner(part, "GET", f"/admin/v2/persistent/{part.path}/stats")
            if remote is not None:
                self._raise_for(remote)
                assert isinstance(remote.body, bytes)
                stats = json.loads(remote.body)
            else:
                stats = (await self.service.get_topic(part, create=False)).stats()
            parts[str(name.partition(i))] = stats
            for k in totals:
                totals[k] += stats[k]
        return web.json_response({**totals, "metadata": {"partitions": n}, "partitions": parts})

    async def get_topic_policy(self, request: web.Request) -> web.StreamResponse:
        field = self._policy_field(request)
        record = await self.service.resources.get_topic(self._topic(request))
        if record is None:
            raise NotFound(f"topic {self._topic(request)} does not exist")
        return web.json_response((record[0].get("policies") or {}).get(field))

    async def set_topic_policy(self, request: web.Request) -> web.StreamResponse:
        field = self._policy_field(request)
        await self.service.resources.set_topic_policy(self._topic(request), field, await _body(request), request.query)
        return web.Response(status=204)

    async def remove_topic_policy(self, request: web.Request) -> web.StreamResponse:
        field = self._policy_field(request)
        await self.service.resources.set_topic_policy(self._topic(request), field, None, request.query)
        return web.Response(status=204)

    # ------------------------------------------------------------------ subscriptions
    async def _each_topic(
        self, request: web.Request, *, partitioned: str = "all", partition: int = -1, what: str = ""
    ) -> tuple[TopicName, list[TopicName]]:
        """The topic named in ``request`` and the (non-partitioned) topics the verb runs on:
        itself, every partition (``partitioned="all"``), the ``partition``-th one
        (``"one"``), or a 405 (``"refuse"``)."""
        name = self._topic(request)
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
            forwarded = await self._forward(request, name)
            if forwarded is not None:
                return forwarded
            await run(await self.service.get_topic(name, create=False))
            return web.Response(status=204)
        suffix = request.raw_path[len(f"/admin/v2/persistent/{name.path}") :]
        for part in parts:
            remote = await self._call_owner(part, request.method, f"/admin/v2/persistent/{part.path}{suffix}", body)
            if remote is not None:
                self._raise_for(remote)
            else:
                await run(await self.service.get_topic(part, create=False))
        return web.Response(status=204)

    async def reset_cursor_to_time(self, request: web.Request) -> web.StreamResponse:
        timestamp = _int_param(request, "timestamp")
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
        force = _force(request)

        async def run(topic: Any) -> None:
            sub = sa.subscription_of(topic, sub_name)
            if sub.dispatcher.consumers and not force:
                raise PolicyError("Subscription has active connected consumers", 412)
            await topic.unsubscribe(sub_name)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def skip_messages(self, request: web.Request) -> web.StreamResponse:
        count = _int_param(request, "count")
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
        seconds = _int_param(request, "seconds")
        sub_name = request.match_info["sub"]
        now_ms = int(time.time() * 1000)

        async def run(topic: Any) -> None:
            await sa.expire(sa.subscription_of(topic, sub_name), seconds, now_ms)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def expire_all_subscriptions(self, request: web.Request) -> web.StreamResponse:
        seconds = _int_param(request, "seconds")
        now_ms = int(time.time() * 1000)

        async def run(topic: Any) -> None:
            for sub in list(topic.subscriptions.values()):
                await sa.expire(sub, seconds, now_ms)

        return await self._on_subscriptions(request, await self._each_topic(request), run)

    async def peek_message(self, request: web.Request) -> web.StreamResponse:
        position = _int_param(request, "position")
        name, _ = await self._each_topic(request, partitioned="refuse", what="Peek messages")
        forwarded = await self._forward(request, name)
        if forwarded is not None:
            return forwarded
        topic = await self.service.get_topic(name, create=False)
        msg = await sa.peek(sa.subscription_of(topic, request.match_info["sub"]), position)
        return web.Response(body=msg.payload, headers=peek_headers(msg), content_type="application/octet-stream")
