"""Authentication on the admin REST API, and the credentials brokers send to one another.

With authentication on, every request needs ``Authorization: Bearer <jwt>`` except the probes:
``/admin/v2/brokers/health`` (the liveness probe) and ``/ready`` (the readiness probe) answer
without credentials because Kubernetes' probes carry none and they reveal nothing, and
``/metrics`` stays open unless ``authenticateMetricsEndpoint`` is true (Pulsar's default is
false, for Prometheus scrapers). A refusal is 401 with Pulsar's JSON body ``{"reason": ...}`` and
``WWW-Authenticate: Bearer``. The role goes into ``request[AUTH_ROLE]`` (None with
authentication off) for the authorization checks (broker/authz/http.py).

A broker that forwards a request to another broker (the topic's owner) sends the caller's own
``Authorization`` header on, so the owner authenticates (and, later, authorizes) the caller and
not the forwarding broker: forwarding cannot raise anyone's privileges. A call a broker makes on
its own, outside any request, carries the broker's own token
(``brokerClientAuthenticationParameters``: ``token:<jwt>``, ``file:///path`` read on every call so
that a rotated file is picked up, or Pulsar's JSON ``{"token": "..."}``).
"""

from __future__ import annotations

import contextvars
import json
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from magnetar.broker.auth import tls_provider
from magnetar.broker.auth.providers import Authentication
from magnetar.broker.config import BrokerConfig
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The caller's role on the request, a typed key (aiohttp warns of plain string keys).
AUTH_ROLE: web.RequestKey[str | None] = web.RequestKey("auth_role")
PROBE_PATHS = frozenset({"/admin/v2/brokers/health", "/ready"})
METRICS_PATH = "/metrics"
# Names ``brokerClientAuthenticationPlugin`` may hold for token credentials.
TOKEN_PLUGIN_NAMES = ("token", "org.apache.pulsar.client.impl.auth.AuthenticationToken")

# The ``Authorization`` header of the request being served, for forwarding it (module docstring).
_caller_authorization: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "magnetar_caller_authorization", default=None
)


def _unauthorized(reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=401, headers={"WWW-Authenticate": "Bearer"})


def auth_middleware(authentication: Authentication | None, authenticate_metrics: bool = False) -> Middleware:
    """The aiohttp middleware for one broker; with ``authentication`` None it only sets the role."""
    open_paths = PROBE_PATHS if authenticate_metrics else PROBE_PATHS | {METRICS_PATH}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if authentication is None or request.path in open_paths:
            request[AUTH_ROLE] = None
            return await handler(request)
        header = request.headers.get("Authorization", "")
        if not header and tls_provider.METHOD in authentication.providers:  # R93: certificate's CN
            certificate = tls_provider.peer_certificate(request.transport)
            if certificate.cert:  # else: refused below as any request without credentials
                return await _certificate_request(authentication, certificate, request, handler)
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _unauthorized("Authentication required: send Authorization: Bearer <token>")
        try:
            got = authentication.authenticate(c.AUTH_METHOD_TOKEN, token.strip())
        except AuthenticationError as exc:
            return _unauthorized(str(exc))
        request[AUTH_ROLE] = got.role
        reset = _caller_authorization.set(header)
        try:
            return await handler(request)
        finally:
            _caller_authorization.reset(reset)

    return middleware


async def _certificate_request(
    authentication: Authentication, certificate: tls_provider.PeerCertificate, request: web.Request, handler: Handler
) -> web.StreamResponse:
    """A request without ``Authorization`` on HTTPS: the role of its verified client certificate.
    Forwarded on to another broker it carries no credentials (a certificate cannot be passed on,
    and the broker's own token must not stand in for the caller's)."""
    try:
        got = authentication.authenticate(tls_provider.METHOD, certificate)
    except AuthenticationError as exc:
        return _unauthorized(str(exc))
    request[AUTH_ROLE] = got.role
    reset = _caller_authorization.set("")
    try:
        return await handler(request)
    finally:
        _caller_authorization.reset(reset)


def broker_token(config: BrokerConfig) -> str | None:
    """The broker's own token from ``brokerClientAuthentication*``, or None when it has none."""
    params = config.broker_client_authentication_parameters
    if not params:
        return None
    plugin = config.broker_client_authentication_plugin
    if plugin and plugin not in TOKEN_PLUGIN_NAMES:
        raise ValueError(f"brokerClientAuthenticationPlugin {plugin!r} is not supported (supported: token)")
    params = params.strip()
    if params.startswith("{"):
        doc = json.loads(params)
        return str(doc["token"]).strip() if isinstance(doc, dict) and "token" in doc else None
    if params.startswith("token:"):
        return params[len("token:") :].strip()
    if params.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(params).path)).read_text().strip()
    return params


def outgoing_headers(config: BrokerConfig) -> dict[str, str]:
    """``Authorization`` for a call to another broker: the caller's, else the broker's own."""
    caller = _caller_authorization.get()
    if caller is not None:
        return {"Authorization": caller} if caller else {}
    token = broker_token(config)
    return {"Authorization": f"Bearer {token}"} if token else {}
