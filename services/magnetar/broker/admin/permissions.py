"""The permission routes of the admin REST API, on Pulsar's admin v2 paths (R74).

Namespace level (``/admin/v2/namespaces/{tenant}/{ns}/...``):

- ``GET permissions``: ``{role: [actions]}`` of the namespace;
- ``POST permissions/{role}`` (body: a JSON list of actions) grants, replacing the role's
  actions; ``DELETE permissions/{role}`` revokes all of them;
- ``GET permissions/subscription``: ``{subscription: [roles]}``;
- ``POST permissions/subscription/{subscription}`` (body: a JSON list of roles) sets the roles
  that alone may consume that subscription; ``DELETE permissions/{subscription}/{role}`` takes
  one role off (412 "couldn't find subscription" when the subscription has no list: Pulsar's
  provider raises the same message but its REST layer turns it into a 500);
- ``GET|POST subscriptionAuthMode`` (body: ``"None"`` or ``"Prefix"``).

Topic level (``/admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}/...``):
``GET permissions`` answers the namespace's grants merged with the topic's own (as Pulsar's
getPermissionsOnTopic), ``POST|DELETE permissions/{role}`` grant and revoke on the topic alone
(revoking a role the topic itself does not grant is 412 "Permissions are not set at the topic
level"). A grant on a topic that does not exist yet is kept for when it does; a grant on a
partitioned topic covers its partitions.

Grants are stored whether or not authorization is on, so they can be prepared before it is
turned on; who may call these routes is in ``authz/rules.py`` (tenant admins and superusers).
Registered before the generic ``.../{policy}`` routes of ``namespaces.py`` and ``topics.py``,
which would otherwise take ``permissions`` and ``subscriptionAuthMode`` as policy names.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.authz.checks import authorizer_for
from magnetar.broker.authz.store import MODES, AuthPolicies, PermissionStore, actions_of, roles_of
from magnetar.broker.policies.model import PolicyError
from magnetar.protocol.errors import InvalidCommand
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

NS = "/admin/v2/namespaces/{tenant}/{ns}"


async def _body(request: web.Request) -> Any:
    text = await request.text()
    try:
        return json.loads(text) if text.strip() else None
    except ValueError as exc:
        raise InvalidCommand(f"invalid JSON body: {exc}") from None


class PermissionRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._own_store: PermissionStore | None = None

    @property
    def grants(self) -> PermissionStore:
        """The authorizer's store (so a change drops its cache at once), or one of our own when
        authorization is off."""
        authz = authorizer_for(self.service, self.service.config, self.service.store)
        if authz is not None:
            return authz.grants
        if self._own_store is None:
            self._own_store = PermissionStore(self.service.store)
        return self._own_store

    async def _read(self, request: web.Request) -> AuthPolicies:
        doc, _ = await self.service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
        return AuthPolicies.of(doc)

    async def _update(self, request: web.Request, change: Any) -> web.Response:
        await self.grants.update(request.match_info["tenant"], request.match_info["ns"], change)
        return web.Response(status=204)

    # ------------------------------------------------------------------ namespace
    async def get_permissions(self, request: web.Request) -> web.StreamResponse:
        return web.json_response((await self._read(request)).namespace_auth)

    async def grant(self, request: web.Request) -> web.StreamResponse:
        role, actions = request.match_info["role"], actions_of(await _body(request))
        return await self._update(request, lambda p: replace(p, namespace_auth={**p.namespace_auth, role: actions}))

    async def revoke(self, request: web.Request) -> web.StreamResponse:
        role = request.match_info["role"]
        return await self._update(
            request, lambda p: replace(p, namespace_auth={k: v for k, v in p.namespace_auth.items() if k != role})
        )

    async def get_subscription_permissions(self, request: web.Request) -> web.StreamResponse:
        return web.json_response((await self._read(request)).subscription_auth_roles)

    async def grant_subscription(self, request: web.Request) -> web.StreamResponse:
        sub, roles = request.match_info["subscription"], roles_of(await _body(request))
        return await self._update(
            request,
            lambda p: replace(p, subscription_auth_roles={**p.subscription_auth_roles, sub: roles}),
        )

    async def revoke_subscription(self, request: web.Request) -> web.StreamResponse:
        sub, role = request.match_info["subscription"], request.match_info["role"]

        def change(p: AuthPolicies) -> AuthPolicies:
            if sub not in p.subscription_auth_roles:
                raise PolicyError(f"couldn't find subscription {sub}", 412)
            roles = [r for r in p.subscription_auth_roles[sub] if r != role]
            rest = {k: v for k, v in p.subscription_auth_roles.items() if k != sub}
            return replace(p, subscription_auth_roles={**rest, sub: roles} if roles else rest)

        return await self._update(request, change)

    async def get_mode(self, request: web.Request) -> web.StreamResponse:
        return web.json_response((await self._read(request)).subscription_auth_mode)

    async def set_mode(self, request: web.Request) -> web.StreamResponse:
        mode = await _body(request)
        if mode not in MODES:
            raise InvalidCommand(f"subscription auth mode must be one of {', '.join(MODES)}, got {mode!r}")
        return await self._update(request, lambda p: replace(p, subscription_auth_mode=mode))

    # ------------------------------------------------------------------ topic
    @staticmethod
    def _topic(request: web.Request) -> str:
        m = request.match_info
        domain = "non-persistent" if request.path.startswith("/admin/v2/non-persistent/") else "persistent"
        return str(TopicName.parse(f"{domain}://{m['tenant']}/{m['ns']}/{m['topic']}"))

    async def get_topic_permissions(self, request: web.Request) -> web.StreamResponse:
        topic = self._topic(request)
        policies = await self._read(request)
        merged = {role: list(actions) for role, actions in policies.namespace_auth.items()}
        for role, actions in (policies.destination_auth.get(topic) or {}).items():
            merged[role] = sorted(set(merged.get(role, [])) | set(actions))
        return web.json_response(merged)

    async def grant_topic(self, request: web.Request) -> web.StreamResponse:
        topic, role = self._topic(request), request.match_info["role"]
        actions = actions_of(await _body(request))

        def change(p: AuthPolicies) -> AuthPolicies:
            roles = {**(p.destination_auth.get(topic) or {}), role: actions}
            return replace(p, destination_auth={**p.destination_auth, topic: roles})

        return await self._update(request, change)

    async def revoke_topic(self, request: web.Request) -> web.StreamResponse:
        topic, role = self._topic(request), request.match_info["role"]

        def change(p: AuthPolicies) -> AuthPolicies:
            roles = dict(p.destination_auth.get(topic) or {})
            if role not in roles:
                raise PolicyError("Permissions are not set at the topic level", 412)
            del roles[role]
            rest = {k: v for k, v in p.destination_auth.items() if k != topic}
            return replace(p, destination_auth={**rest, topic: roles} if roles else rest)

        return await self._update(request, change)


def add_permission_routes(app: web.Application, service: BrokerService) -> None:
    """Register the permission routes; call before the generic ``.../{policy}`` routes."""
    routes = PermissionRoutes(service)
    r = app.router
    r.add_get(NS + "/permissions", routes.get_permissions)
    r.add_get(NS + "/permissions/subscription", routes.get_subscription_permissions)
    r.add_post(NS + "/permissions/subscription/{subscription}", routes.grant_subscription)
    r.add_delete(NS + "/permissions/{subscription}/{role}", routes.revoke_subscription)
    r.add_post(NS + "/permissions/{role}", routes.grant)
    r.add_delete(NS + "/permissions/{role}", routes.revoke)
    r.add_get(NS + "/subscriptionAuthMode", routes.get_mode)
    r.add_post(NS + "/subscriptionAuthMode", routes.set_mode)
    for domain in ("persistent", "non-persistent"):
        base = f"/admin/v2/{domain}/{{tenant}}/{{ns}}/{{topic}}/permissions"
        r.add_get(base, routes.get_topic_permissions)
        r.add_post(base + "/{role}", routes.grant_topic)
        r.add_delete(base + "/{role}", routes.revoke_topic)
