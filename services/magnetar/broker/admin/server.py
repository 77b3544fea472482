"""The admin REST API (aiohttp), on Pulsar's ``/admin/v2/...`` paths, plus health and metrics.

``AdminServer`` is the app and its listeners; each REST resource is a module of this package with
its ``add_<resource>_routes(app, service)``, registered here in one order: aiohttp matches routes in
the order they were added, so every specific ``.../{topic}/...`` route comes before the topic
policies' ``.../{topic}/{policy}`` (and the namespace ones before ``.../{ns}/{policy}``). A request
passes authentication, the name checks and authorization before any handler runs.

Errors follow Pulsar: a JSON body ``{"reason": "..."}`` with 400 for invalid input, 404 for a
missing tenant/namespace/topic/subscription, 405 for an operation Pulsar does not allow on a
partitioned topic, 409 for "already exists" or "still in use", 412 for a precondition
(partitions decreased, backlog quota above retention), 503 for "retry later".
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.bookies import add_bookie_routes
from magnetar.broker.admin.broker_stats import add_broker_stats_routes
from magnetar.broker.admin.brokers import add_broker_routes
from magnetar.broker.admin.bundles import add_bundle_routes
from magnetar.broker.admin.clusters import add_cluster_routes
from magnetar.broker.admin.compaction import add_compaction_routes
from magnetar.broker.admin.health import add_health_routes
from magnetar.broker.admin.internal_stats import add_internal_stats_route
from magnetar.broker.admin.isolation import add_isolation_routes
from magnetar.broker.admin.names import names_middleware
from magnetar.broker.admin.namespaces import add_namespace_routes
from magnetar.broker.admin.non_persistent import add_non_persistent_routes
from magnetar.broker.admin.permissions import add_permission_routes
from magnetar.broker.admin.requests import NotAllowed
from magnetar.broker.admin.schemas import add_schema_routes
from magnetar.broker.admin.subscriptions import add_subscription_routes
from magnetar.broker.admin.tenants import add_tenant_routes
from magnetar.broker.admin.topics import add_topic_policy_routes, add_topic_routes
from magnetar.broker.admin.trim import add_trim_route
from magnetar.broker.auth.http import auth_middleware
from magnetar.broker.auth.providers import authentication_for
from magnetar.broker.authz.checks import authorizer_for
from magnetar.broker.authz.http import authz_middleware
from magnetar.broker.cluster.resources import Conflict
from magnetar.broker.policies.model import PolicyError
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

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
        """Every resource's routes, in the order aiohttp must try them (module docstring)."""
        app, service = self.app, self.service
        add_health_routes(app, service)  # health, ready, the HTTP lookup, /metrics: health.py
        add_bundle_routes(app, service)  # bundles, unload, split, ownedNamespaces, shutdown: bundles.py
        add_broker_routes(app, service)  # /admin/v2/brokers..., after .../brokers/health: brokers.py
        add_broker_stats_routes(app, service)  # /admin/v2/broker-stats/...: broker_stats.py
        add_bookie_routes(app, service)  # /admin/v2/bookies...: bookies.py
        add_non_persistent_routes(app, service)  # /admin/v2/non-persistent/...: non_persistent.py
        add_compaction_routes(app, service)  # .../{topic}/compaction: compaction.py
        add_internal_stats_route(app, service)  # .../{topic}/internalStats: internal_stats.py
        add_trim_route(app, service)  # POST .../{topic}/trim: trim.py
        add_permission_routes(app, service)  # .../permissions, subscriptionAuthMode: permissions.py
        add_isolation_routes(app, service)  # /admin/v2/clusters/.../namespaceIsolationPolicies: isolation.py
        add_cluster_routes(app, service)  # /admin/v2/clusters/{cluster}: clusters.py
        add_schema_routes(app, service)  # /admin/v2/schemas/..., schema policies' PUT: schemas.py
        add_tenant_routes(app, service)  # /admin/v2/tenants/...: tenants.py
        add_namespace_routes(app, service)  # /admin/v2/namespaces/...: namespaces.py
        add_topic_routes(app, service)  # /admin/v2/persistent/...: topics.py
        add_subscription_routes(app, service)  # .../{topic}/subscription/{sub}/...: subscriptions.py
        add_topic_policy_routes(app, service)  # partitioned-stats, then .../{topic}/{policy}: last
