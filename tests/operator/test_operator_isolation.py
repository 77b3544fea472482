"""A Tenant's isolation becomes a namespace isolation policy on the brokers (isolation_policy.py).

The operator runs against the real API server and the session's real standalone broker (cluster
``standalone``); there is no kubelet, so the isolated set's pods never run: what is checked is the
policy the operator writes (read back from the broker's admin API), the regexes in it against the
names the set's brokers would register with, the PoliciesApplied condition, and the removal of the
policy when isolation is turned off and when the Tenant is deleted. The enforcement of a policy by
brokers is tested on a real cluster in tests/security/test_isolation*.py.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from tests.operator.harness import POOL_NAMESPACE, ControlPlane, OperatorProcess, condition, wait_for
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

POLICIES = "/admin/v2/clusters/standalone/namespaceIsolationPolicies"


def get_policy(broker: StandaloneProcess, name: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{broker.admin_url}{POLICIES}/{name}", timeout=10) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def apply(crds: ControlPlane, ns: str, body: dict[str, Any]) -> None:
    crds.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(body))


def policies_condition(crds: ControlPlane, ns: str, name: str, words: str) -> dict[str, Any] | None:
    cond = condition(crds.get("tenants.magnetar.dev", name, ns), "PoliciesApplied")
    return cond if cond.get("status") == "True" and words in cond.get("message", "") else None


def test_isolated_tenant_writes_its_policy_and_removes_it(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str
) -> None:
    name = f"iso{uuid.uuid4().hex[:6]}"
    policy = f"tenant-{name}"
    tenant = {
        "apiVersion": "magnetar.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"isolation": {"enabled": True, "brokers": {"replicas": 2}}},
    }
    apply(crds, ns, tenant)
    cond = wait_for(
        "PoliciesApplied naming the policy",
        lambda: policies_condition(crds, ns, name, f"namespace isolation policy {policy}"),
    )
    assert f"broker set magnetar-broker-{name} (2 brokers)" in cond["message"]
    data = wait_for("the policy on the broker", lambda: get_policy(broker, policy))
    assert data["namespaces"] == [f"^{name}/.*$"]
    assert data["secondary"] == []
    assert data["auto_failover_policy"] == {
        "policy_type": "min_available",
        "parameters": {"min_limit": "1", "usage_threshold": "100"},
    }
    [primary] = data["primary"]
    own = f"magnetar-broker-{name}-1.magnetar-broker-{name}-headless.{ns}.svc"
    assert re.fullmatch(primary, own) and re.fullmatch(primary, f"{own}:6650")
    for other in (
        f"magnetar-broker-0.magnetar-broker-headless.{POOL_NAMESPACE}.svc:6650",  # the shared pool
        f"magnetar-broker-{name}x-0.magnetar-broker-{name}x-headless.{ns}.svc:6650",  # another tenant's set
        f"magnetar-broker-{name}-0.magnetar-broker-{name}-headless.other.svc:6650",  # another namespace
    ):
        assert not re.fullmatch(primary, other), other
    assert re.fullmatch(data["namespaces"][0], f"{name}/ns1")
    assert not re.fullmatch(data["namespaces"][0], f"{name}x/ns1")

    # Isolation off: the policy goes, PoliciesApplied stays true without it.
    tenant["spec"] = {"isolation": {"enabled": False}}
    apply(crds, ns, tenant)
    wait_for("the policy removed", lambda: get_policy(broker, policy) is None or None)

    def without_isolation() -> dict[str, Any] | None:
        cond = policies_condition(crds, ns, name, "allowed clusters applied")
        return cond if cond is not None and "isolation" not in cond["message"] else None

    wait_for("PoliciesApplied without isolation", without_isolation)

    # On again, then the Tenant deleted: the policy goes with it.
    tenant["spec"] = {"isolation": {"enabled": True}}
    apply(crds, ns, tenant)
    wait_for("the policy written again", lambda: get_policy(broker, policy))
    crds.kubectl("delete", "-n", ns, "tenant.magnetar.dev", name, "--wait=true", "--timeout=60s")
    wait_for("the policy removed with the Tenant", lambda: get_policy(broker, policy) is None or None)
