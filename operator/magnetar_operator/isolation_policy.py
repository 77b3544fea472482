"""A Tenant's namespace isolation policy: what makes its isolated broker set the only one serving it.

The brokers enforce isolation from the cluster's namespace isolation policies (the broker's
``broker/cluster/isolation.py``), not from pod labels, so it also holds for brokers the operator does not
run. For a Tenant with ``spec.isolation.enabled`` the operator writes the policy
``tenant-<tenant>``:

- ``namespaces``: ``^<tenant>/.*$``: every namespace of the tenant;
- ``primary``: the names the isolated StatefulSet's brokers register with. A pod's broker advertises
  ``<pod>.<set>-headless.<namespace>.svc`` (``advertisedAddressTemplate`` in its ConfigMap, see
  ``brokers.render_broker_config``) and its name is that host with the binary port; the regex matches
  pods ``<set>-0``, ``<set>-1``... of this set only, with or without the port;
- no secondary, ``min_available`` with ``min_limit`` 1: when every isolated broker is down the tenant
  waits for them instead of spilling onto the shared pool.

The cluster (``{cluster}`` of the REST path) is the one the brokers report (``GET
/admin/v2/clusters``). The policy is written only when it differs from what the brokers hold, and
deleted when isolation is turned off or the Tenant goes (even with KeepAfterDeletion: the isolated
set goes with the Tenant, and a policy left behind would leave the tenant with no broker at all).
"""

from __future__ import annotations

import re
from typing import Any

from .admin import AdminClient, NotFound
from .brokers import BrokerSet, headless_name


def policy_name(tenant: str) -> str:
    return f"tenant-{tenant}"


def primary_regex(bs: BrokerSet) -> str:
    host = rf"{re.escape(bs.name)}-[0-9]+\.{re.escape(headless_name(bs.name))}\.{re.escape(bs.namespace)}\.svc"
    return rf"^{host}(:[0-9]+)?$"


def policy_data(tenant: str, bs: BrokerSet) -> dict[str, Any]:
    """Pulsar's NamespaceIsolationData for ``tenant`` bound to broker set ``bs``."""
    return {
        "namespaces": [rf"^{re.escape(tenant)}/.*$"],
        "primary": [primary_regex(bs)],
        "secondary": [],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "1", "usage_threshold": "100"},
        },
    }


async def cluster_of(admin: AdminClient) -> str:
    clusters = await admin.list_clusters()
    if not clusters:
        raise NotFound(404, "the brokers report no cluster", method="GET", path="clusters")
    return clusters[0]


async def apply_policy(admin: AdminClient, tenant: str, bs: BrokerSet) -> list[str]:
    """Write the tenant's policy if the brokers do not already hold exactly it; the changes made."""
    cluster, name, want = await cluster_of(admin), policy_name(tenant), policy_data(tenant, bs)
    try:
        have: dict[str, Any] | None = await admin.get_isolation_policy(cluster, name)
    except NotFound:
        have = None
    if have == want:
        return []
    await admin.set_isolation_policy(cluster, name, want)
    return [f"{'updated' if have else 'wrote'} namespace isolation policy {name}"]


async def remove_policy(admin: AdminClient, tenant: str) -> list[str]:
    """Delete the tenant's policy when the brokers hold one; the changes made."""
    cluster, name = await cluster_of(admin), policy_name(tenant)
    try:
        await admin.get_isolation_policy(cluster, name)
    except NotFound:
        return []
    await admin.delete_isolation_policy(cluster, name)
    return [f"removed namespace isolation policy {name}"]
