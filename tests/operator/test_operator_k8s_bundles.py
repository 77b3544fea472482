"""Where bundles live, in the Namespace and Tenant status, on a real API server against a real
standalone broker: the operator's resync reads the brokers' answers (Pulsar's ``bundles`` and
``ownedNamespaces`` paths) and follows a bundle that is unloaded."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from tests.operator.harness import ControlPlane, OperatorProcess, admin_call, wait_for
from tests.operator.test_operator_k8s_resources import apply, manifest, wait_condition
from tests.support.standalone import StandaloneProcess

from magnetar.client.aio import Client

pytestmark = pytest.mark.k8s

BOUNDARIES = ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]
RANGES = [f"{lo}_{hi}" for lo, hi in itertools.pairwise(BOUNDARIES)]


def ok(broker: StandaloneProcess, method: str, path: str, body: Any = None) -> Any:
    code, answer = admin_call(broker, method, path, body)
    assert code < 300, f"{method} {path} -> {code}: {answer}"
    return answer


def owned_by_broker(broker: StandaloneProcess, prefix: str) -> dict[str, str]:
    """What the brokers themselves say: range -> broker id, for bundles under `prefix`."""
    cluster = ok(broker, "GET", "brokers/configuration/runtime")["clusterName"]
    out: dict[str, str] = {}
    for broker_id in ok(broker, "GET", "brokers"):
        for name in ok(broker, "GET", f"brokers/{cluster}/{broker_id}/ownedNamespaces") or {}:
            if name.startswith(prefix):
                out[name[len(prefix) :]] = broker_id
    return out


async def produce(broker: StandaloneProcess, topics: list[str]) -> None:
    client = Client(broker.service_url)
    try:
        for topic in topics:
            producer = await client.create_producer(topic)
            await producer.send(b"loads the topic's bundle")
            await producer.close()
    finally:
        await client.close()


def status_bundles(cp: ControlPlane, ns: str, name: str) -> list[dict[str, str]] | None:
    obj = cp.get("namespace.magnetar.dev", name, ns) or {}
    return (obj.get("status") or {}).get("bundles")


def test_namespace_and_tenant_status_show_where_bundles_live(
    operator: OperatorProcess, crds: ControlPlane, broker: StandaloneProcess, ns: str, uid: str
) -> None:
    tenant, namespace = f"lb-{uid}", "spread"
    apply(crds, ns, manifest("Tenant", tenant, {}))
    wait_condition(crds, "tenant", tenant, ns, "True")
    # Four bundles, as Pulsar's create body gives them.
    ok(broker, "PUT", f"namespaces/{tenant}/{namespace}", {"bundles": {"boundaries": BOUNDARIES, "numBundles": 4}})
    assert ok(broker, "GET", f"namespaces/{tenant}/{namespace}/bundles")["boundaries"] == BOUNDARIES
    asyncio.run(produce(broker, [f"persistent://{tenant}/{namespace}/t{i}" for i in range(12)]))
    prefix = f"{tenant}/{namespace}/"
    owned = owned_by_broker(broker, prefix)
    assert owned, "producing loaded some bundles"

    apply(crds, ns, manifest("Namespace", f"{tenant}-{namespace}", {"tenant": tenant, "name": namespace}))
    want = [{"range": r, **({"broker": owned[r]} if r in owned else {})} for r in RANGES]
    got = wait_for(
        "status.bundles as the brokers say",
        lambda: status_bundles(crds, ns, f"{tenant}-{namespace}") == want or None,
        timeout=30,
    )
    assert got

    per_broker: dict[str, int] = {}
    for b in owned.values():
        per_broker[b] = per_broker.get(b, 0) + 1
    want_counts = [{"broker": b, "bundles": n} for b, n in sorted(per_broker.items())]

    def tenant_counts() -> list[dict[str, Any]] | None:
        obj = crds.get("tenant.magnetar.dev", tenant, ns) or {}
        counts = (obj.get("status") or {}).get("bundlesPerBroker")
        return counts if counts == want_counts else None

    wait_for("the tenant's bundles per broker", tenant_counts, timeout=30)

    # An unloaded bundle has no broker until a lookup places it again; the next resync says so.
    moved = sorted(owned)[0]
    ok(broker, "PUT", f"namespaces/{tenant}/{namespace}/{moved}/unload")
    assert moved not in owned_by_broker(broker, prefix)
    after = [{"range": r, **({"broker": owned[r]} if r in owned and r != moved else {})} for r in RANGES]
    wait_for(
        "the unloaded bundle without a broker",
        lambda: status_bundles(crds, ns, f"{tenant}-{namespace}") == after or None,
        timeout=30,
    )
