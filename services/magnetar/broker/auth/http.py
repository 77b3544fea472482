"""Authentication on the admin REST API: the aiohttp middleware.

With authentication on, every request needs credentials: ``Authorization: Bearer <jwt>`` for the
token provider, ``Authorization: Basic base64(user:password)`` for the Basic provider, or a client
certificate on HTTPS for the TLS provider. A request without any gets ``anonymousUserRole`` when
that is set, as Pulsar's AuthenticationService does. Exempt are the probes:
``/admin/v2/brokers/health`` (the liveness probe) and ``/ready`` (the readiness probe) answer
without credentials because Kubernetes' probes carry none and they reveal nothing, and
``/metrics`` stays open unless ``authenticateMetricsEndpoint`` is true (Pulsar's default is
false, for Prometheus scrapers). A refusal is 401 with Pulsar's JSON body ``{"reason": ...}`` and
``WWW-Authenticate: Bearer``. The role goes into ``request[AUTH_ROLE]`` (None with
authentication off) for the authorization checks (broker/authz/http.py).

A request forwarded to another broker carries the caller's own ``Authorization`` header on
(``broker_credentials``): the middleware records it for the length of the request.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from magnetar.broker.auth import basic_provider, tls_provider
from magnetar.broker.auth.broker_credentials import CALLER_AUTHORIZATION
from magnetar.broker.auth.providers import Authentication
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The caller's role on the request, a typed key (aiohttp warns of plain string keys).
AUTH_ROLE: web.RequestKey[str | None] = web.RequestKey("auth_role")
PROBE_PATHS = frozenset({"/admin/v2/brokers/health", "/ready"})
METRICS_PATH = "/metrics"


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
        anonymous = authentication.anonymous() if not header else None
        if anonymous is not None:
            return await _serve_as(anonymous.role, "", request, handler)
        try:
            got = authentication.authenticate(*_credentials(header, authentication))
        except AuthenticationError as exc:
            return _unauthorized(str(exc))
        return await _serve_as(got.role, header, request, handler)

    return middleware


def _credentials(header: str, authentication: Authentication) -> tuple[str, str]:
    """(method, credentials) of an ``Authorization`` header; ``AuthenticationError`` naming the
    schemes this broker takes if it has none."""
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return c.AUTH_METHOD_TOKEN, value
    if scheme.lower() == "basic" and value:
        try:
            return basic_provider.METHOD, base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationError(
                "Failed to authenticate: the Basic credentials are not base64 of user:password"
            ) from None
    schemes = [
        f"Authorization: {scheme}"
        for method, scheme in ((c.AUTH_METHOD_TOKEN, "Bearer <token>"), (basic_provider.METHOD, "Basic <credentials>"))
        if method in authentication.providers
    ]
    raise AuthenticationError(f"Authentication required: send {' or '.join(schemes) or 'a client certificate'}")


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
    return await _serve_as(got.role, "", request, handler)


async def _serve_as(role: str, forwarded: str, request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run ``handler`` as ``role``, with ``forwarded`` as the ``Authorization`` a forwarded call
    carries on to another broker ("" for none: the anonymous role and a certificate have nothing
    to pass on)."""
    request[AUTH_ROLE] = role
    reset = CALLER_AUTHORIZATION.set(forwarded)
    try:
        return await handler(request)
    finally:
        CALLER_AUTHORIZATION.reset(reset)
