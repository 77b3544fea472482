"""The load manager on the real node: the broker pool grows and shrinks under a streaming
in-cluster client, and bundles follow.

A release of its own (namespace ``magnetar-lb``; e2e/conftest.py runs this module after the main
suite's uninstall) with 2 brokers, 2 bookies, 16 bundles per namespace and the load balancer's
intervals in seconds (``brokers.loadBalancer``), its NIC speed set low so that a stream of a few
hundred messages a second is a load the shedder sees. Tenant, Namespaces and 16-partition Topics
are the operator's resources, whose status says where each bundle lives.

- 2 -> 3 (``helm upgrade``): the leader's shedding moves bundles of the streaming namespace onto
  the new pod; the stream sees no error and loses nothing.
- 3 -> 2: the leaving broker drains in its pre-stop hook (it leaves the live set while its pod
  still exists, and its bundles go to the others) before it stops; a stream whose bundles it
  owned sees no error and loses nothing, and no bundle stays on it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.operator.harness import condition

from e2e.cluster import FIGURES, Cluster, pod_ready, wait_for
from e2e.release import Images, Release
from e2e.stream_job import StreamJob

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

NAMESPACE = "magnetar-lb"
TENANT = "lb"
POOL = "magnetar-broker"
#: Seconds, as the load balancer's minutes: reports and shedding every 3 s, moves not repeated
#: within 30 s; any broker above the average sheds (no margin), whatever a bundle's throughput.
LOAD_BALANCER = {
    "loadBalancerHostUsageCheckIntervalMinutes": 0.05,
    "loadBalancerReportUpdateMinIntervalMillis": 1000,
    "loadBalancerReportUpdateMaxIntervalMinutes": 0.05,
    "loadBalancerSheddingIntervalMinutes": 0.05,
    "loadBalancerSheddingGracePeriodMinutes": 0.5,
    "loadBalancerBrokerThresholdShedderPercentage": 0,
    "loadBalancerBundleUnloadMinThroughputThreshold": 0,
    "loadBalancerOverrideBrokerNicSpeedGbps": 0.001,
    "loadBalancerAutoBundleSplitEnabled": False,
}
VALUES = [
    "brokers.replicas=2",
    "bookies.replicas=2",
    "cluster.ensembleSize=2",
    "cluster.writeQuorum=2",
    "cluster.ackQuorum=2",
    "brokers.config.defaultNumberOfNamespaceBundles=16",
    *(f"brokers.loadBalancer.{k}={str(v).lower()}" for k, v in LOAD_BALANCER.items()),
]


def resource(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": NAMESPACE}
    return {"apiVersion": "magnetar.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def ready(cluster: Cluster, kind: str, name: str) -> bool:
    return condition(cluster.get(kind, name, NAMESPACE)).get("status") == "True"


def bundles(cluster: Cluster, namespace: str) -> list[dict[str, str]]:
    """The Namespace resource's status.bundles: range and owning broker (the operator's resync)."""
    obj = cluster.get("namespace.magnetar.dev", f"{TENANT}-{namespace}", NAMESPACE) or {}
    return list((obj.get("status") or {}).get("bundles") or [])


def on_pod(entries: list[dict[str, str]], ordinal: int) -> list[str]:
    """Ranges owned by broker pod ``<pool>-<ordinal>`` (broker ids start with the pod's name)."""
    return [e["range"] for e in entries if e.get("broker", "").startswith(f"{POOL}-{ordinal}.")]


def live_brokers(rel: Release) -> list[str]:
    code = (
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8080/admin/v2/brokers').read().decode())"
    )
    out = rel.cluster.kubectl("exec", "-n", NAMESPACE, f"{POOL}-0", "--", "python", "-c", code, timeout=30)
    return list(json.loads(out))


#: Run in broker pod 0: every live broker's ownedNamespaces, as JSON (broker id -> bundles).
OWNED = """
import json, urllib.parse, urllib.request
get = lambda p: json.loads(urllib.request.urlopen("http://127.0.0.1:8080/admin/v2/" + p, timeout=20).read())
cluster = get("brokers/configuration/runtime")["clusterName"]
owned = lambda b: sorted(get(f"brokers/{cluster}/{urllib.parse.quote(b, safe='')}/ownedNamespaces"))
print(json.dumps({b: owned(b) for b in get("brokers")}))
"""


def diagnosis(rel: Release, namespace: str) -> str:
    """What the brokers and the operator say, for a failure message (best effort)."""
    cluster = rel.cluster
    owned = cluster.kubectl("exec", "-n", NAMESPACE, f"{POOL}-0", "--", "python", "-c", OWNED, check=False)
    operator = cluster.kubectl("logs", "-n", NAMESPACE, "deploy/magnetar-operator", "--tail", "30", check=False)
    return f"status.bundles: {bundles(cluster, namespace)}\nowned: {owned}\noperator log:\n{operator}"


def wait_or_diagnose(rel: Release, namespace: str, what: str, probe: Any, timeout: float) -> Any:
    try:
        return wait_for(what, probe, timeout, every=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnosis(rel, namespace)}") from exc


def stream(rel: Release, namespace: str) -> StreamJob:
    """The in-cluster client on the namespace's 16-partition topic (Job ``<namespace>-stream``)."""
    policy = "Never" if rel.cluster.pods_reachable else "IfNotPresent"
    topic = f"persistent://{TENANT}/{namespace}/stream"
    return StreamJob(rel.cluster, NAMESPACE, rel.image, policy, rel.service_url, f"{namespace}-stream", topic)


def assert_clean(result: dict[str, Any]) -> None:
    """No send refused, none lost, nothing stored twice (deduplication on)."""
    summary = {k: v for k, v in result.items() if k != "events"}
    assert result["acked"] > 0 and result["failed"] == 0 and result["unknown"] == 0, summary
    assert result["lost"] == 0 and result["duplicates"] == 0, summary
    errors = [
        e for e in result["events"] if any(w in e for w in ("refused", "producer failed", "receive failed", "quiet"))
    ]
    assert not errors, (errors, summary)


def add_namespace(rel: Release, namespace: str) -> None:
    """A Namespace (16 bundles, deduplication on) and a 16-partition topic ``stream`` in it."""
    cluster = rel.cluster
    cluster.apply(
        resource("Namespace", f"{TENANT}-{namespace}", {"tenant": TENANT, "name": namespace, "deduplication": True})
    )
    cluster.apply(
        resource(
            "Topic",
            f"{TENANT}-{namespace}-stream",
            {"namespace": f"{TENANT}/{namespace}", "name": "stream", "partitions": 16},
        )
    )
    wait_for(
        f"namespace {namespace} and its topic Ready",
        lambda: (
            ready(cluster, "namespace.magnetar.dev", f"{TENANT}-{namespace}")
            and ready(cluster, "topic.magnetar.dev", f"{TENANT}-{namespace}-stream")
        ),
        180,
        every=2,
    )


@pytest.fixture(scope="module")
def lb(cluster: Cluster, images: Images) -> Iterator[Release]:
    rel = Release(cluster, images, namespace=NAMESPACE)
    started = time.monotonic()
    rel.helm_upgrade(*VALUES, install=True)
    rel.wait_ready(bookies=2, brokers=2)
    FIGURES["load balancer: helm install to Ready (s)"] = round(time.monotonic() - started, 1)
    cluster.apply(resource("Tenant", TENANT, {}))
    wait_for("tenant lb Ready", lambda: ready(cluster, "tenant.magnetar.dev", TENANT), 120, every=2)
    try:
        yield rel
    finally:
        cluster.helm("uninstall", rel.name, "-n", NAMESPACE, "--wait", "--timeout", "5m")
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def test_scale_in_drains_the_leaving_broker_before_it_stops(lb: Release) -> None:
    """3 -> 2 under a stream whose bundles the leaving broker owns: it leaves the live set while its
    pod still exists (the pre-stop drain), its bundles go to the others, and the stream sees no
    error and loses nothing."""
    cluster = lb.cluster
    lb.helm_upgrade("brokers.replicas=3")
    lb.wait_ready(bookies=2, brokers=3)
    add_namespace(lb, "drain")
    job = stream(lb, "drain").start(messages=24_000, rate=200)
    job.wait_acked(2000, 180)
    owned = wait_or_diagnose(
        lb,
        "drain",
        "some of the streaming namespace's bundles on the third broker",
        lambda: on_pod(bundles(cluster, "drain"), 2) or None,
        90,
    )
    leaving = f"{POOL}-2"
    samples: list[tuple[float, bool, bool]] = []  # (t, pod exists, broker live)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            exists = cluster.get("pod", leaving, NAMESPACE) is not None
            try:
                live = any(b.startswith(f"{leaving}.") for b in live_brokers(lb))
            except Exception:  # broker-0 busy; the next sample decides
                continue
            samples.append((time.monotonic(), exists, live))
            if not exists:
                return

    watcher = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    watcher.start()
    try:
        lb.helm_upgrade("brokers.replicas=2")
        wait_for(f"{leaving} gone", lambda: cluster.get("pod", leaving, NAMESPACE) is None, 300, every=1)
    finally:
        stop.set()
        watcher.join(60)
    FIGURES["load balancer: scale-in 3 -> 2, pod gone (s)"] = round(time.monotonic() - started, 1)
    assert any(exists and not live for _, exists, live in samples), (
        f"{leaving} never left the live set while its pod existed (samples {samples[-10:]})"
    )
    events = cluster.get("events", "", NAMESPACE)["items"]
    hooks = [e.get("message") for e in events if e.get("reason") == "FailedPreStopHook"]
    assert not hooks, f"the drain failed: {hooks}"
    result = job.result(600)
    assert_clean(result)
    placed = wait_or_diagnose(
        lb,
        "drain",
        "no bundle left on the removed broker",
        lambda: (lambda e: e if e and not on_pod(e, 2) else None)(bundles(cluster, "drain")),
        60,
    )
    print(f"\nscale-in: {len(owned)} bundles on {leaving} before; after: {placed}; stream {result}")


def test_scale_out_moves_bundles_onto_the_new_broker(lb: Release) -> None:
    """2 -> 3 under a stream: the leader sheds bundles of the streaming namespace onto the new pod
    (it had none), and the stream sees no error and loses nothing."""
    cluster = lb.cluster
    add_namespace(lb, "grow")
    assert len(lb.broker_pods()) == 2
    job = stream(lb, "grow").start(messages=36_000, rate=200)
    job.wait_acked(2000, 180)
    before = wait_for(
        "the stream's bundles placed", lambda: [e for e in bundles(cluster, "grow") if "broker" in e] or None, 60
    )
    assert not on_pod(before, 2)
    started = time.monotonic()
    lb.helm_upgrade("brokers.replicas=3")
    lb.wait_ready(bookies=2, brokers=3)
    joined = time.monotonic()
    moved = wait_or_diagnose(
        lb,
        "grow",
        "bundles of the streaming namespace on the new broker",
        lambda: on_pod(bundles(cluster, "grow"), 2) or None,
        180,
    )
    FIGURES["load balancer: new broker Ready -> first bundle on it (s)"] = round(time.monotonic() - joined, 1)
    FIGURES["load balancer: scale-out 2 -> 3 total (s)"] = round(time.monotonic() - started, 1)
    result = job.result(600)
    assert_clean(result)
    ready_pods = [p["metadata"]["name"] for p in lb.broker_pods() if pod_ready(p)]
    print(f"\nscale-out: {moved} moved onto {POOL}-2 (pods {ready_pods}); stream {result}")
