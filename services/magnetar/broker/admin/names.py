"""The admin API's name check: every route's tenant, namespace, topic, cluster and subscription (WIRE.md R92).

aiohttp decodes a path before it matches routes, so ``/admin/v2/tenants/a%2Fb`` reaches a handler
with the tenant ``a/b``, ``%2e%2e`` arrives as ``..`` and ``%00`` as a NUL character; each of them
would become a metadata key of another shape (``/tenants/a/b``) or walk up a key path. One
middleware checks the matched parts of every route against the rules of
``protocol/topic_name.py`` before any handler runs, so no route can forget to, and answers 412
as Pulsar does for an invalid tenant, namespace or topic name (``{"reason": ...}``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from magnetar.protocol.topic_name import valid_segment, valid_subscription

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Route variables that name things, and what each is called in the refusal.
# A cluster's name is a metadata key segment too: 1000 characters made the LMDB store fail with a
# 500 (MDB_BAD_VALSIZE; found by tests/fuzz/test_admin.py).
_NAMES = {"tenant": "Tenant", "ns": "Namespace", "topic": "Topic", "cluster": "Cluster"}


def _shown(value: str) -> str:
    return repr(value if len(value) <= 100 else value[:100] + "...")


@web.middleware
async def names_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    info = request.match_info
    for key, kind in _NAMES.items():
        value = info.get(key)
        if value is not None and not valid_segment(value):
            return web.json_response({"reason": f"{kind} name is not valid: {_shown(value)}"}, status=412)
    sub = info.get("sub")
    if sub is not None and not valid_subscription(sub):
        return web.json_response({"reason": f"Subscription name is not valid: {_shown(sub)}"}, status=412)
    return await handler(request)
