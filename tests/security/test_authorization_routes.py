"""Every admin REST route of a running broker has a deliberate rule in broker/authz/rules.py.

A route missing from the table is superuser-only (never open), but silently so: a route a later
change adds for tenant admins or for granted roles would refuse them without anybody deciding
it. This test starts a real standalone in this process (authentication and authorization on,
ports chosen by the kernel), walks the aiohttp router its admin listener serves, and fails for
any route (method, pattern) not listed in ``RULES``, and for any rule that no route uses any
more (a renamed route would leave a stale rule behind and its new pattern unlisted).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from pathlib import Path

from magnetar.broker.authz.rules import RULES, SUPERUSER_ONLY, Kind, rule_for
from magnetar.broker.config import BrokerConfig
from magnetar.node.standalone import Standalone, StandaloneConfig


def _routes_of_a_running_broker(base: Path) -> set[tuple[str, str]]:
    async def run() -> set[tuple[str, str]]:
        config = BrokerConfig(
            port=0,
            web_port=0,
            authentication_enabled=True,
            token_secret_key="data:;base64," + base64.b64encode(secrets.token_bytes(32)).decode(),
            authorization_enabled=True,
            super_user_roles=["admin"],
        )
        node = Standalone(StandaloneConfig(base, config, bookie_port=0))
        await node.start()
        try:
            assert node.listeners is not None and node.broker is not None and node.broker.ready
            admin = node.listeners._admin
            assert admin is not None and admin.port  # listening
            return {
                (route.method, route.resource.canonical)
                for route in admin.app.router.routes()
                if route.resource is not None and route.method != "HEAD"  # HEAD follows GET's rule
            }
        finally:
            await node.stop()

    return asyncio.run(run())


def test_every_route_has_a_rule_and_every_rule_a_route(tmp_path: Path) -> None:
    routes = _routes_of_a_running_broker(tmp_path)
    assert len(routes) > 50  # the whole admin API, not an empty app
    assert sorted(routes - RULES.keys()) == []  # unclassified routes
    assert sorted(RULES.keys() - routes) == []  # rules of routes that no longer exist


def test_unlisted_routes_are_superuser_only() -> None:
    assert rule_for("GET", "/admin/v2/not-a-route") is SUPERUSER_ONLY
    assert rule_for("GET", None) is SUPERUSER_ONLY
    assert rule_for("HEAD", "/admin/v2/tenants/{tenant}") == rule_for("GET", "/admin/v2/tenants/{tenant}")


def test_cluster_wide_routes_are_superuser_only() -> None:
    """Tenant admins administer their tenant, never the cluster (Pulsar's validateSuperUserAccess)."""
    cluster_wide = [
        key
        for key in RULES
        if key[1].startswith(
            ("/admin/v2/bookies", "/admin/v2/clusters/", "/admin/v2/brokers", "/admin/v2/broker-stats")
        )
        and key[1] != "/admin/v2/brokers/health"  # a probe, open as Pulsar's
    ]
    # ownedNamespaces, shutdown and the two broker-stats routes of the load manager among them
    assert len(cluster_wide) == 22
    assert all(RULES[key].kind is Kind.SUPERUSER for key in cluster_wide)
    assert RULES[("PUT", "/admin/v2/tenants/{tenant}")].kind is Kind.SUPERUSER
    assert RULES[("GET", "/admin/v2/tenants")].kind is Kind.SUPERUSER
