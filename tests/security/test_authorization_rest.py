"""Authorization on the admin REST API (WIRE.md R73-R74), against a real standalone broker with
``authenticationEnabled``, ``authorizationEnabled``, an HS256 key and ``superUserRoles=admin``.

Two tenants: ``ta-*`` administered by role ``alice``, ``tb-*`` by role ``bob``. Every refusal is
checked for its exact status and reason, and for leaving what it aimed at unchanged (the
namespace or topic was not created, the policy still has its value, the tenant list is the
same). The helpers here (the secured broker, tokens, ``http``) serve the binary-protocol and
CLI tests too.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from tests.support.standalone import StandaloneProcess, run_standalone

SUPERUSER = "admin"


@dataclass
class Secured:
    """A standalone with authorization on, its key, and two tenants of their own."""

    sa: StandaloneProcess
    key: bytes
    tenant_a: str
    tenant_b: str

    def token(self, role: str) -> str:
        return jwt.encode({"sub": role}, self.key, algorithm="HS256")

    def call(self, role: str | None, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(self.sa, method, path, None if role is None else self.token(role), body)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        """A call as the superuser that must succeed; its JSON answer."""
        status, answer = self.call(SUPERUSER, method, path, body)
        assert status < 400, (method, path, status, answer)
        return answer

    def namespace(self, tenant: str) -> str:
        ns = f"{tenant}/ns-{uuid.uuid4().hex[:8]}"
        self.ok("PUT", f"/admin/v2/namespaces/{ns}")
        return ns

    def topic(self, ns: str, create: bool = True) -> str:
        name = f"persistent://{ns}/t-{uuid.uuid4().hex[:8]}"
        if create:
            self.ok("PUT", f"/admin/v2/persistent/{ns}/{name.rsplit('/', 1)[1]}")
        return name


def http(sa: StandaloneProcess, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(sa.admin_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode()


def start_secured(base: Path, *extra: str) -> Iterator[Secured]:
    key = secrets.token_bytes(32)
    key_file = base / "secret.key"
    key_file.write_bytes(key)
    args = [
        "--authentication-enabled",
        "--token-secret-key",
        f"file://{key_file}",
        "--authorization-enabled",
        "--super-user-roles",
        SUPERUSER,
        *extra,
    ]
    with run_standalone(base, *args) as sa:
        suffix = uuid.uuid4().hex[:6]
        secured = Secured(sa, key, f"ta-{suffix}", f"tb-{suffix}")
        secured.ok("PUT", f"/admin/v2/tenants/{secured.tenant_a}", {"adminRoles": ["alice"]})
        secured.ok("PUT", f"/admin/v2/tenants/{secured.tenant_b}", {"adminRoles": ["bob"]})
        yield secured


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from start_secured(tmp_path_factory.mktemp("authz-rest"))


def _local(topic: str) -> str:
    return topic.removeprefix("persistent://")


# ---------------------------------------------------------------------- superuser-only routes
def test_tenant_admin_cannot_create_or_list_tenants(secured: Secured) -> None:
    before = secured.ok("GET", "/admin/v2/tenants")
    new = f"tx-{uuid.uuid4().hex[:6]}"
    status, body = secured.call("alice", "PUT", f"/admin/v2/tenants/{new}", {"adminRoles": ["alice"]})
    assert (status, body) == (401, {"reason": "This operation requires super-user access"})
    assert secured.call("alice", "GET", "/admin/v2/tenants") == (
        401,
        {"reason": "This operation requires super-user access"},
    )
    status, body = secured.call("alice", "POST", f"/admin/v2/tenants/{secured.tenant_b}", {"adminRoles": ["alice"]})
    assert (status, body) == (401, {"reason": "This operation requires super-user access"})
    assert secured.ok("GET", "/admin/v2/tenants") == before  # nothing created
    assert secured.ok("GET", f"/admin/v2/tenants/{secured.tenant_b}")["adminRoles"] == ["bob"]  # unchanged
    assert secured.call("alice", "GET", "/admin/v2/bookies")[0] == 401


def test_superuser_can_do_everything(secured: Secured) -> None:
    tenant = f"tsu-{uuid.uuid4().hex[:6]}"
    secured.ok("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": []})
    assert tenant in secured.ok("GET", "/admin/v2/tenants")
    ns = secured.namespace(tenant)
    topic = secured.topic(ns)
    assert secured.ok("GET", f"/admin/v2/persistent/{_local(topic)}/stats")["msgInCounter"] == 0
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/messageTTL", 60)
    assert secured.ok("GET", f"/admin/v2/namespaces/{ns}/messageTTL") == 60
    assert secured.ok("GET", f"/lookup/v2/topic/persistent/{_local(topic)}")["brokerUrl"].startswith("magnetar://")
    secured.ok("DELETE", f"/admin/v2/namespaces/{ns}?force=true")
    secured.ok("DELETE", f"/admin/v2/tenants/{tenant}")
    assert tenant not in secured.ok("GET", "/admin/v2/tenants")


# ---------------------------------------------------------------------- tenant admins
def test_tenant_admin_creates_namespaces_in_its_tenant_only(secured: Secured) -> None:
    mine = f"{secured.tenant_a}/ns-{uuid.uuid4().hex[:6]}"
    assert secured.call("alice", "PUT", f"/admin/v2/namespaces/{mine}") == (204, None)
    assert secured.call("alice", "GET", f"/admin/v2/namespaces/{secured.tenant_a}")[1] == [mine]
    theirs = f"{secured.tenant_b}/ns-{uuid.uuid4().hex[:6]}"
    status, body = secured.call("alice", "PUT", f"/admin/v2/namespaces/{theirs}")
    reason = f"Unauthorized to validateNamespaceOperation for operation [CREATE_NAMESPACE] on namespace [{theirs}]"
    assert (status, body) == (403, {"reason": reason})
    assert theirs not in secured.ok("GET", f"/admin/v2/namespaces/{secured.tenant_b}")
    status, body = secured.call("alice", "GET", f"/admin/v2/namespaces/{secured.tenant_b}")
    assert (status, body) == (401, {"reason": "Don't have permission to administrate resources on this tenant"})


def test_tenant_a_token_on_tenant_b_admin_paths(secured: Secured) -> None:
    ns_b = secured.namespace(secured.tenant_b)
    topic_b = secured.topic(ns_b)
    secured.ok("POST", f"/admin/v2/namespaces/{ns_b}/messageTTL", 120)

    # namespace policies: read and write refused, the policy keeps its value
    status, body = secured.call("alice", "GET", f"/admin/v2/namespaces/{ns_b}")
    assert (status, body) == (
        403,
        {"reason": f"Unauthorized to validateNamespaceOperation for operation [GET_POLICIES] on namespace [{ns_b}]"},
    )
    status, body = secured.call("alice", "POST", f"/admin/v2/namespaces/{ns_b}/messageTTL", 1)
    assert (status, body) == (
        403,
        {"reason": f"Unauthorized to validateNamespaceOperation for operation [WRITE_POLICY] on namespace [{ns_b}]"},
    )
    assert secured.ok("GET", f"/admin/v2/namespaces/{ns_b}/messageTTL") == 120

    # topic stats and topic creation
    status, body = secured.call("alice", "GET", f"/admin/v2/persistent/{_local(topic_b)}/stats")
    assert (status, body) == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [GET_STATS] on topic [{topic_b}]"},
    )
    new_b = secured.topic(ns_b, create=False)
    status, body = secured.call("alice", "PUT", f"/admin/v2/persistent/{_local(new_b)}")
    assert (status, body) == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [CREATE_TOPIC] on topic [{new_b}]"},
    )
    assert secured.call(SUPERUSER, "GET", f"/admin/v2/persistent/{_local(new_b)}/stats")[0] == 404  # not created
    assert new_b not in secured.ok("GET", f"/admin/v2/persistent/{ns_b}")

    # namespace deletion refused: it is still there
    status, _ = secured.call("alice", "DELETE", f"/admin/v2/namespaces/{ns_b}?force=true")
    assert status == 403
    assert ns_b in secured.ok("GET", f"/admin/v2/namespaces/{secured.tenant_b}")

    # bob, tenant b's admin, may do all of that
    assert secured.call("bob", "GET", f"/admin/v2/persistent/{_local(topic_b)}/stats")[0] == 200
    assert secured.call("bob", "POST", f"/admin/v2/namespaces/{ns_b}/messageTTL", 30) == (204, None)


# ---------------------------------------------------------------------- grants and lookup
def test_http_lookup_needs_a_grant(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    status, body = secured.call("app", "GET", f"/lookup/v2/topic/persistent/{_local(topic)}")
    assert (status, body) == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [{topic}]"},
    )
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/app", ["consume"])
    status, body = secured.call("app", "GET", f"/lookup/v2/topic/persistent/{_local(topic)}")
    assert status == 200 and body["brokerUrl"].startswith("magnetar://"), body
    # a consume grant gives stats (lookup) but not admin operations
    assert secured.call("app", "GET", f"/admin/v2/persistent/{_local(topic)}/stats")[0] == 200
    status, body = secured.call("app", "PUT", f"/admin/v2/persistent/{_local(topic)}/unload")
    assert (status, body) == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [UNLOAD] on topic [{topic}]"},
    )


def test_namespace_permission_routes(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    base = f"/admin/v2/namespaces/{ns}"
    assert secured.call("alice", "GET", base + "/permissions") == (200, {})
    assert secured.call("alice", "POST", base + "/permissions/app", ["produce", "consume"]) == (204, None)
    assert secured.call("alice", "GET", base + "/permissions") == (200, {"app": ["consume", "produce"]})
    # Pulsar's other actions are stored; an unknown one is refused and changes nothing
    status, body = secured.call("alice", "POST", base + "/permissions/fn", ["functions", "fly"])
    assert status == 400 and "unknown action(s) fly" in body["reason"], body
    assert secured.ok("GET", base + "/permissions") == {"app": ["consume", "produce"]}
    # a generic policy route still answers next to the permission routes
    assert secured.call("alice", "POST", base + "/messageTTL", 30) == (204, None)
    assert secured.ok("GET", base + "/messageTTL") == 30
    # tenant b's admin may not grant here
    status, body = secured.call("bob", "POST", base + "/permissions/bob", ["produce"])
    assert (status, body) == (
        403,
        {"reason": f"Unauthorized to validateNamespaceOperation for operation [GRANT_PERMISSION] on namespace [{ns}]"},
    )
    assert secured.ok("GET", base + "/permissions") == {"app": ["consume", "produce"]}
    assert secured.call("alice", "DELETE", base + "/permissions/app") == (204, None)
    assert secured.ok("GET", base + "/permissions") == {}

    # subscription rules
    assert secured.ok("GET", base + "/subscriptionAuthMode") == "None"
    assert secured.call("alice", "POST", base + "/subscriptionAuthMode", "Prefix") == (204, None)
    assert secured.ok("GET", base + "/subscriptionAuthMode") == "Prefix"
    status, body = secured.call("alice", "POST", base + "/subscriptionAuthMode", "Suffix")
    assert (status, body) == (400, {"reason": "subscription auth mode must be one of None, Prefix, got 'Suffix'"})
    assert secured.ok("GET", base + "/subscriptionAuthMode") == "Prefix"
    assert secured.call("alice", "POST", base + "/permissions/subscription/s1", ["r1", "r2"]) == (204, None)
    assert secured.ok("GET", base + "/permissions/subscription") == {"s1": ["r1", "r2"]}
    assert secured.call("alice", "DELETE", base + "/permissions/s1/r1") == (204, None)
    assert secured.ok("GET", base + "/permissions/subscription") == {"s1": ["r2"]}
    status, body = secured.call("alice", "DELETE", base + "/permissions/nosub/r1")
    assert (status, body) == (412, {"reason": "couldn't find subscription nosub"})
    # the policies document carries Pulsar's field names
    doc = secured.ok("GET", base)
    assert doc["subscription_auth_mode"] == "Prefix"
    assert doc["auth_policies"]["subscription_auth_roles"] == {"s1": ["r2"]}


def test_topic_permission_routes(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    base = f"/admin/v2/persistent/{_local(topic)}/permissions"
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/reader", ["consume"])
    assert secured.call("alice", "POST", base + "/writer", ["produce"]) == (204, None)
    assert secured.call("alice", "GET", base) == (200, {"reader": ["consume"], "writer": ["produce"]})
    status, body = secured.call("alice", "DELETE", base + "/reader")  # granted on the namespace only
    assert (status, body) == (412, {"reason": "Permissions are not set at the topic level"})
    assert secured.call("alice", "DELETE", base + "/writer") == (204, None)
    assert secured.call("alice", "GET", base) == (200, {"reader": ["consume"]})
    status, _ = secured.call("bob", "POST", base + "/bob", ["produce"])
    assert status == 401
    assert secured.ok("GET", base) == {"reader": ["consume"]}


def test_consume_grant_covers_subscription_admin_but_subscription_rules_apply(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/app", ["consume"])
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/subscription/owned", ["other"])
    path = f"/admin/v2/persistent/{_local(topic)}/subscription"
    assert secured.call("app", "PUT", path + "/free") == (204, None)
    status, body = secured.call("app", "PUT", path + "/owned")
    assert (status, body) == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [SUBSCRIBE] on topic [{topic}]"},
    )
    subs = secured.ok("GET", f"/admin/v2/persistent/{_local(topic)}/stats")["subscriptions"]
    assert sorted(subs) == ["free"]


# ---------------------------------------------------------------------- clusters
def test_cluster_list_is_open_but_isolation_policies_are_superuser_only(secured: Secured) -> None:
    """Pulsar's ClustersBase: getClusters checks no role; the namespaceIsolationPolicies routes
    validateSuperUserAccess, so a tenant admin can neither read nor set one."""
    assert secured.call("nobody", "GET", "/admin/v2/clusters") == (200, ["standalone"])
    base = "/admin/v2/clusters/standalone/namespaceIsolationPolicies"
    policy = {
        "namespaces": [f"{secured.tenant_a}/.*"],
        "primary": [".*"],
        "secondary": [],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "1", "usage_threshold": "80"},
        },
    }
    superuser_only = (401, {"reason": "This operation requires super-user access"})
    assert secured.call("alice", "POST", f"{base}/mine", policy) == superuser_only
    assert secured.call("alice", "GET", base) == superuser_only
    assert secured.call("alice", "GET", f"{base}/brokers") == superuser_only
    assert secured.ok("GET", base) == {}  # nothing was stored
