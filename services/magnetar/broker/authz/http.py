"""The admin REST API's authorization middleware: the table of ``rules`` applied to each request.

It runs after authentication (which put the caller's role in ``request[AUTH_ROLE]``) and
before the route's handler, so a refused call changes nothing. The tenant, namespace, topic
and subscription come from the same ``match_info`` the handlers read (aiohttp has already
decoded them, ``%2F`` included), and the topic is parsed with the same ``TopicName.parse``, so
the check and the handler cannot disagree about what is named. A request that matched no
route goes on to the router's 404/405, which reveal nothing.

Refusals use Pulsar's statuses and messages: 401 for topic operations, superuser-only and
tenant operations ("Unauthorized to validateTopicOperation for operation [...] on topic
[...]", "This operation requires super-user access", "Don't have permission to administrate
resources on this tenant"), 403 for namespace operations ("Unauthorized to
validateNamespaceOperation for operation [...] on namespace [...]"); pulsar-admin reports
both as not authorized.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from magnetar.broker.auth.http import AUTH_ROLE
from magnetar.broker.authz.checks import CONSUME, PRODUCE, Authorizer, Refused
from magnetar.broker.authz.rules import Kind, Rule, rule_for
from magnetar.protocol.errors import InvalidTopicName
from magnetar.protocol.topic_name import TopicName

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _refused(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


def _domain(pattern: str) -> str:
    return "non-persistent" if "/non-persistent/" in pattern else "persistent"


async def refusal(authz: Authorizer, rule: Rule, pattern: str, request: web.Request) -> web.Response | None:
    """None when the caller may run the route, else the response that refuses it."""
    role: str | None = request.get(AUTH_ROLE)
    if rule.kind is Kind.OPEN or authz.is_superuser(role):
        return None
    if rule.kind is Kind.SUPERUSER:
        return _refused(401, "This operation requires super-user access")
    m = request.match_info
    tenant = m.get("tenant", "")
    if await authz.is_tenant_admin(tenant, role):
        return None
    ns = m.get("ns")
    if ns is None:
        return _refused(401, "Don't have permission to administrate resources on this tenant")
    if "topic" not in m:
        if rule.kind is Kind.NAMESPACE_READ and role is not None:
            if await authz.namespace_granted(tenant, ns, (PRODUCE, CONSUME), role):
                return None
        return _refused(
            403,
            f"Unauthorized to validateNamespaceOperation for operation [{rule.operation}] on namespace [{tenant}/{ns}]",
        )
    try:
        topic = TopicName.parse(f"{_domain(pattern)}://{tenant}/{ns}/{m['topic']}")
    except (InvalidTopicName, ValueError) as exc:
        return _refused(400, str(exc))
    allowed = False
    try:
        if rule.kind is Kind.LOOKUP:
            allowed = await authz.can_lookup(topic, role)
        elif rule.kind is Kind.CONSUME:
            allowed = await authz.can_consume(topic, role, m.get("sub"))
    except Refused as exc:
        return _refused(401, str(exc))
    if allowed:
        return None
    return _refused(401, f"Unauthorized to validateTopicOperation for operation [{rule.operation}] on topic [{topic}]")


def authz_middleware(authz: Authorizer | None) -> Middleware:
    """The middleware for one broker; with ``authz`` None (authorization off) it does nothing."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if authz is None or request.match_info.http_exception is not None:
            return await handler(request)
        resource = request.match_info.route.resource
        pattern = resource.canonical if resource is not None else None
        refused = await refusal(authz, rule_for(request.method, pattern), pattern or "", request)
        if refused is not None:
            return refused
        return await handler(request)

    return middleware
