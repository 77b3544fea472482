"""``magnetar-admin`` permission verbs (cli/admin_permissions.py) against a secured standalone,
run as the real command (``python -m magnetar.cli.admin``) with ``--auth-plugin/--auth-params``.

The round trips go through the CLI and are checked through the REST API; the refused call
(a tenant admin granting on another tenant) is checked for its message, its exit status and
for leaving the grants unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tests.security.test_authorization_rest import SUPERUSER, Secured, start_secured

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from start_secured(tmp_path_factory.mktemp("authz-cli"))


def admin(secured: Secured, role: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", secured.sa.admin_url]
    argv += ["--auth-plugin", TOKEN_PLUGIN, "--auth-params", f"token:{secured.token(role)}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def ok(secured: Secured, role: str, *args: str) -> str:
    run = admin(secured, role, *args)
    assert run.returncode == 0, (args, run.stdout, run.stderr)
    return run.stdout


def test_namespace_grant_round_trip(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    ok(secured, "alice", "namespaces", "grant-permission", ns, "--role", "app", "--actions", "produce,consume")
    assert json.loads(ok(secured, "alice", "namespaces", "permissions", ns)) == {"app": ["consume", "produce"]}
    assert secured.ok("GET", f"/admin/v2/namespaces/{ns}/permissions") == {"app": ["consume", "produce"]}

    refused = admin(secured, "bob", "namespaces", "grant-permission", ns, "--role", "bob", "--actions", "produce")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"error: Unauthorized to validateNamespaceOperation for operation [GRANT_PERMISSION] on namespace [{ns}] "
        "(HTTP 403)"
    )
    assert secured.ok("GET", f"/admin/v2/namespaces/{ns}/permissions") == {"app": ["consume", "produce"]}

    ok(secured, "alice", "namespaces", "revoke-permission", ns, "--role", "app")
    assert json.loads(ok(secured, "alice", "namespaces", "permissions", ns)) == {}


def test_subscription_verbs(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    ok(secured, "alice", "namespaces", "set-subscription-auth-mode", ns, "-m", "Prefix")
    assert json.loads(ok(secured, "alice", "namespaces", "get-subscription-auth-mode", ns)) == "Prefix"
    ok(secured, SUPERUSER, "namespaces", "grant-subscription-permission", ns, "--subscription", "s1", "--roles", "a,b")
    assert json.loads(ok(secured, "alice", "namespaces", "subscription-permission", ns)) == {"s1": ["a", "b"]}
    ok(secured, "alice", "namespaces", "revoke-subscription-permission", ns, "--subscription", "s1", "--role", "a")
    assert secured.ok("GET", f"/admin/v2/namespaces/{ns}/permissions/subscription") == {"s1": ["b"]}


def test_topic_grant_round_trip(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    ok(secured, "alice", "topics", "grant-permission", topic, "--role", "writer", "--actions", "produce")
    assert json.loads(ok(secured, "alice", "topics", "permissions", topic)) == {"writer": ["produce"]}
    ok(secured, "alice", "topics", "revoke-permission", topic, "--role", "writer")
    assert json.loads(ok(secured, "alice", "topics", "permissions", topic)) == {}
    run = admin(secured, "alice", "topics", "revoke-permission", topic, "--role", "writer")
    assert (run.returncode, run.stderr.strip()) == (1, "error: Permissions are not set at the topic level (HTTP 412)")
