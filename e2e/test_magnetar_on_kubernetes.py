"""Magnetar installed by its Helm chart on a real Kubernetes node, used, broken, scaled, upgraded
and uninstalled, in that order, as a user would (issue 10).

Every stream check runs in the cluster (a Job, e2e/clients/stream.py) and is judged on what the
broker acknowledged: an acknowledged message must arrive, once, in order, whatever was killed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from tests.operator.harness import ROOT, condition

from e2e.cluster import FIGURES, pod_ready, wait_for
from e2e.release import Release
from e2e.stream_job import CONFIGMAP, StreamJob

# Long: the first test's setup may build the images cold and start the node; waits have their own deadlines.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

TENANT_NS = "acme/orders"
TOPIC = "persistent://acme/orders/created"


def stream(release: Release, name: str) -> StreamJob:
    policy = "Never" if release.cluster.pods_reachable else "IfNotPresent"
    topic = f"persistent://{TENANT_NS}/{name}"
    return StreamJob(release.cluster, release.namespace, release.image, policy, release.service_url, name, topic)


def assert_no_loss(result: dict[str, Any]) -> None:
    """Every acknowledged message arrived, once, in order."""
    summary = {k: v for k, v in result.items() if k != "events"}
    assert result["acked"] > 0, summary
    assert result["lost"] == 0, summary
    assert result["duplicates"] == 0, summary
    assert result["out_of_order"] == 0, summary


def admin_get(release: Release, path: str) -> Any:
    """GET on a broker's admin API from inside its pod (works on any cluster, no port-forward)."""
    url = f"http://127.0.0.1:8080{path}"
    code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=20).read().decode())"
    out = release.cluster.kubectl(
        "exec", "-n", release.namespace, f"{release.name}-broker-0", "--", "python", "-c", code
    )
    return json.loads(out)


@contextmanager
def pod_watch(release: Release, selector: str) -> Iterator[list[tuple[float, dict[str, tuple[str, bool]]]]]:
    """Sample the pods of ``selector`` (name -> (uid, ready)) every half second while in the block."""
    samples: list[tuple[float, dict[str, tuple[str, bool]]]] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                pods = release.cluster.pods(release.namespace, selector)
            except Exception:  # a sample lost to an API hiccup; the next one follows
                pods = []
            if pods:
                samples.append(
                    (time.monotonic(), {p["metadata"]["name"]: (p["metadata"]["uid"], pod_ready(p)) for p in pods})
                )
            stop.wait(0.5)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(10)


def restart_order(samples: list[tuple[float, dict[str, tuple[str, bool]]]]) -> list[str]:
    """Pod names in the order their uid changed (each pod listed once, at its first restart)."""
    first = samples[0][1]
    order: list[str] = []
    for _, pods in samples:
        for name, (uid, _) in pods.items():
            if name in first and uid != first[name][0] and name not in order:
                order.append(name)
    return order


def most_unready(samples: list[tuple[float, dict[str, tuple[str, bool]]]], expected: int) -> int:
    """The largest number of pods that were missing or not ready at one time."""
    return max(expected - sum(1 for _, ready in pods.values() if ready) for _, pods in samples)


# ---------------------------------------------------------------------------------------------- install


def test_install_reaches_ready(release: Release) -> None:
    cluster = release.cluster
    # The operator's pods are labelled with their set's name (instance magnetar-bookie, ...).
    pods = cluster.pods(release.namespace, "app.kubernetes.io/name=magnetar")
    names = sorted(p["metadata"]["name"] for p in pods)
    assert all(pod_ready(p) for p in pods), names
    for component in ("etcd", "operator", "bookie", "broker"):
        assert any(component in n for n in names), (component, names)
    # Every pod runs as the images' non-root user.
    for pod in pods:
        sc = pod["spec"].get("securityContext") or {}
        assert sc.get("runAsNonRoot") is True or sc.get("runAsUser", 0) != 0, pod["metadata"]["name"]
    out = cluster.kubectl("get", "magnetar", "-A")
    assert f"{release.name}-bookie" in out


def test_examples_reach_the_broker(release: Release) -> None:
    cluster = release.cluster
    for example in ("tenant", "namespace", "topic"):
        cluster.kubectl("apply", "-n", release.namespace, "-f", str(ROOT / "examples" / f"{example}.yaml"))

    def all_ready() -> bool:
        doc = json.loads(cluster.kubectl("get", "magnetar", "-A", "-o", "json"))
        items = doc["items"]
        kinds = {i["kind"] for i in items}
        return {"Tenant", "Namespace", "Topic", "BookieEnsemble"} <= kinds and all(
            condition(i).get("status") == "True" for i in items
        )

    wait_for("every magnetar resource Ready (kubectl get magnetar -A)", all_ready, 180, every=2)
    assert "acme" in admin_get(release, "/admin/v2/tenants")
    assert "acme/orders" in admin_get(release, "/admin/v2/namespaces/acme")
    # examples/topic.yaml asks for 4 partitions.
    assert TOPIC in admin_get(release, "/admin/v2/persistent/acme/orders/partitioned")
    assert admin_get(release, "/admin/v2/persistent/acme/orders/created/partitions")["partitions"] == 4


def test_kubectl_run_client_produces_in_cluster(release: Release) -> None:
    """The README's `kubectl run client --image=... -- magnetar produce ...` (the image's entrypoint
    is `magnetar`, so the arguments start at the subcommand)."""
    cluster = release.cluster
    policy = "Never" if cluster.pods_reachable else "IfNotPresent"
    cluster.kubectl(
        "run", "client", "-n", release.namespace, f"--image={release.image}", f"--image-pull-policy={policy}",
        "--restart=Never", f"--env=MAGNETAR_SERVICE_URL={release.service_url}", "--",
        "produce", TOPIC, "-n", "1000",
    )  # fmt: skip

    def finished() -> str | None:
        pod = cluster.get("pod", "client", release.namespace) or {}
        phase = pod.get("status", {}).get("phase")
        if phase == "Failed":
            raise AssertionError(cluster.kubectl("logs", "-n", release.namespace, "client", check=False))
        return phase if phase == "Succeeded" else None

    wait_for("the client pod to finish", finished, 180, every=1)
    stats = admin_get(release, "/admin/v2/persistent/acme/orders/created/partitioned-stats")
    assert stats["msgInCounter"] >= 1000, stats
    cluster.kubectl("delete", "pod", "client", "-n", release.namespace, "--wait=false")


# ---------------------------------------------------------------------------------------------- faults


def owner_broker_pod(release: Release, topic: str) -> str:
    path = topic.removeprefix("persistent://")
    found = admin_get(release, f"/lookup/v2/topic/persistent/{path}")
    host = str(found["brokerUrl"]).split("://", 1)[1].split(":")[0]
    return host.split(".")[0]


def force_delete(release: Release, pod: str) -> None:
    release.cluster.kubectl(
        "delete", "pod", pod, "-n", release.namespace, "--grace-period=0", "--force", "--wait=false"
    )


def test_stream_survives_killing_a_bookie_and_the_owning_broker(release: Release) -> None:
    """100,000 messages in-cluster; a bookie pod and the topic's owning broker pod are force-deleted
    when 30,000 are acknowledged. Measured: how long until acknowledgements resume, and until the
    two pods serve again."""
    job = stream(release, "stream-kill").start(messages=100_000, rate=2500)
    job.wait_acked(30_000, timeout=300)
    owner = owner_broker_pod(release, job.topic)
    bookie = f"{release.name}-bookie-1"
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in release.bookie_pods() + release.broker_pods()}
    acked_at_kill = job.acked()
    killed = time.monotonic()
    force_delete(release, bookie)
    force_delete(release, owner)
    resumed = job.wait_acked(acked_at_kill + 5000, timeout=300)

    def replaced_and_ready() -> bool:
        pods = {p["metadata"]["name"]: p for p in release.bookie_pods() + release.broker_pods()}
        return all(
            n in pods and pods[n]["metadata"]["uid"] != before[n] and pod_ready(pods[n]) for n in (bookie, owner)
        )

    wait_for(f"{bookie} and {owner} replaced and Ready", replaced_and_ready, 300, every=1)
    ready_again = time.monotonic()
    result = job.result(timeout=600)
    FIGURES["kill: acks resumed after (s)"] = round(resumed - killed, 1)
    FIGURES["kill: killed pods Ready again after (s)"] = round(ready_again - killed, 1)
    FIGURES["kill: stream result"] = {k: v for k, v in result.items() if k != "events"}
    assert result["acked"] >= 90_000, result
    assert_no_loss(result)


# ---------------------------------------------------------------------------------------------- scale


def test_scale_bookies_3_to_4_to_3_drains_without_loss(release: Release) -> None:
    """The stream's ledger is opened before the 4th bookie exists. A ledger still open on the
    bookie being drained holds the drain until the ledger closes (no rollover on decommission
    yet; found by this suite, see the issue notes)."""
    cluster = release.cluster
    job = stream(release, "stream-scale").start(messages=60_000, rate=500)
    job.wait_acked(5_000, timeout=300)
    release.helm_upgrade("bookies.replicas=4")
    release.wait_ready(bookies=4, brokers=2)
    started = time.monotonic()
    release.helm_upgrade("bookies.replicas=3")
    ensemble = f"{release.name}-bookie"

    def scaled_down() -> bool:
        be = cluster.get("bookieensemble", ensemble, release.namespace)
        sts = cluster.get("statefulset", ensemble, release.namespace) or {}
        return (
            condition(be, "ScaleDownAllowed").get("reason") == "Decommissioned"
            and sts.get("spec", {}).get("replicas") == 3
        )

    wait_for("the 4th bookie drained and removed", scaled_down, 600, every=2)
    FIGURES["scale 4->3: drain and removal (s)"] = round(time.monotonic() - started, 1)
    be = cluster.get("bookieensemble", ensemble, release.namespace)
    FIGURES["scale 4->3: drain report"] = condition(be, "ScaleDownAllowed").get("message")
    release.wait_ready(bookies=3, brokers=2)

    # deleteClaim (the default) removes the drained bookie's claim; the others keep theirs.
    # (The claim object lingers, Terminating, until its pod is gone: wait for it to go.)
    def claims() -> set[str]:
        return {c["metadata"]["name"] for c in cluster.get("pvc", namespace=release.namespace)["items"]}

    wait_for(f"claim data-{ensemble}-3 deleted", lambda: f"data-{ensemble}-3" not in claims(), 180, every=2)
    assert {f"data-{ensemble}-{i}" for i in range(3)} <= claims()
    bookies = admin_get(release, "/admin/v2/bookies")
    assert not any(f"{ensemble}-3." in json.dumps(b) for b in bookies), bookies
    assert_no_loss(job.result(timeout=600))


# ---------------------------------------------------------------------------------------------- upgrade


def test_upgrade_rolls_bookies_one_at_a_time_without_loss(release: Release) -> None:
    """A changed bookie setting: the operator restarts bookies highest ordinal first, one at a time,
    each after the previous is Ready and no ledger is under-replicated."""
    ensemble = f"{release.name}-bookie"
    job = stream(release, "stream-upgrade").start(messages=60_000, rate=500)
    job.wait_acked(5_000, timeout=300)
    started = time.monotonic()
    with pod_watch(release, f"magnetar.dev/bookie-ensemble={ensemble}") as samples:
        release.helm_upgrade("bookies.config.diskUsageThreshold=0.97")

        def rolled() -> bool:
            be = release.cluster.get("bookieensemble", ensemble, release.namespace)
            return condition(be, "PodsUpToDate").get("reason") == "UpToDate" and len(restart_order(samples)) == 3

        wait_for("the bookie roll to finish", rolled, 900, every=2)
    FIGURES["upgrade: bookie roll (s)"] = round(time.monotonic() - started, 1)
    assert restart_order(samples) == [f"{ensemble}-2", f"{ensemble}-1", f"{ensemble}-0"]
    assert most_unready(samples, 3) <= 1
    assert_no_loss(job.result(timeout=600))


def test_roll_pauses_on_a_bookie_that_cannot_become_ready_and_resumes_when_fixed(release: Release) -> None:
    cluster = release.cluster
    ensemble = f"{release.name}-bookie"
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in release.bookie_pods()}
    # A setting its flag cannot take: `magnetar bookie` refuses to start, so the restarted pod never
    # gets Ready. (Set back, not removed, below: `--set key=null` does not drop a key under
    # --reuse-values.)
    release.helm_upgrade("bookies.config.diskUsageThreshold=lots", wait=False)

    def paused() -> dict[str, Any] | None:
        cond = condition(cluster.get("bookieensemble", ensemble, release.namespace), "PodsUpToDate")
        return cond if cond.get("reason") == "Paused" and f"{ensemble}-2" in cond.get("message", "") else None

    cond = wait_for("the roll to pause on the broken bookie", paused, 300, every=2)
    assert "not ready" in cond["message"], cond
    # The gate stays shut: over several reconciles (every 5 s) no other bookie is restarted.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in release.bookie_pods()}
        assert now[f"{ensemble}-0"] == uids[f"{ensemble}-0"] and now[f"{ensemble}-1"] == uids[f"{ensemble}-1"]
        time.sleep(2)  # observation interval of a state that must not change
    events = cluster.kubectl(
        "get", "events", "-n", release.namespace, "--field-selector", f"involvedObject.name={ensemble}"
    )
    assert "Paused" in events or "paused" in events
    # Fixed: the broken pod is replaced first, then the roll completes.
    release.helm_upgrade("bookies.config.diskUsageThreshold=0.97", wait=False)

    def up_to_date() -> bool:
        be = cluster.get("bookieensemble", ensemble, release.namespace)
        return condition(be, "PodsUpToDate").get("reason") == "UpToDate" and condition(be).get("status") == "True"

    wait_for("the roll to resume and finish", up_to_date, 900, every=2)
    release.wait_ready(bookies=3, brokers=2)


# ---------------------------------------------------------------------------------------------- security


def test_operator_service_account_is_refused_what_it_must_not_do(release: Release) -> None:
    """From inside the running operator pod, with its own ServiceAccount token."""
    cluster = release.cluster
    pod = cluster.pods(release.namespace, "app.kubernetes.io/component=operator")[0]["metadata"]["name"]
    code = (
        "from kubernetes import client, config\n"
        "from kubernetes.client.rest import ApiException\n"
        "config.load_incluster_config()\n"
        "v1 = client.CoreV1Api()\n"
        # The operator may get ConfigMaps (its broker pool's config), not list them or read Secrets.
        f"v1.read_namespaced_config_map('{release.name}-broker-config', '{release.namespace}')\n"
        "print('configmaps: allowed')\n"
        "try:\n"
        f"    v1.list_namespaced_secret('{release.namespace}')\n"
        "    print('secrets: allowed')\n"
        "except ApiException as e:\n"
        "    print('secrets:', e.status)\n"
    )
    out = cluster.kubectl("exec", "-n", release.namespace, pod, "--", "python", "-c", code)
    assert "configmaps: allowed" in out
    assert "secrets: 403" in out


# ---------------------------------------------------------------------------------------------- uninstall


def test_uninstall_leaves_only_what_the_policy_keeps(release: Release) -> None:
    cluster = release.cluster
    # First what the suite itself made: the stream Jobs and their script.
    cluster.kubectl("delete", "job", "-n", release.namespace, "-l", "magnetar.dev/e2e=stream", "--wait=false")
    cluster.kubectl("delete", "configmap", "-n", release.namespace, CONFIGMAP)
    for example in ("topic", "namespace", "tenant"):
        cluster.kubectl(
            "delete",
            "-n",
            release.namespace,
            "-f",
            str(ROOT / "examples" / f"{example}.yaml"),
            "--wait=true",
            timeout=180,
        )
    cluster.helm("uninstall", release.name, "-n", release.namespace, "--wait", "--timeout", "5m")

    def pods_gone() -> bool:
        return not cluster.pods(release.namespace, "")

    wait_for("every pod of the release gone", pods_gone, 300, every=2)
    kinds = "statefulsets,deployments,services,configmaps,poddisruptionbudgets,serviceaccounts,roles,rolebindings"
    left = json.loads(cluster.kubectl("get", kinds, "-n", release.namespace, "-o", "json"))["items"]
    leftovers = [
        f"{i['kind']}/{i['metadata']['name']}"
        for i in left
        if (i["kind"], i["metadata"]["name"]) not in {("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")}
    ]
    assert leftovers == []
    # keepClaimsOnUninstall (the default): the data of etcd and the bookies stays, nothing else.
    claims = sorted(c["metadata"]["name"] for c in cluster.get("pvc", namespace=release.namespace)["items"])
    assert claims and all(c.startswith("data-") for c in claims), claims
    cluster_scoped = json.loads(
        cluster.kubectl(
            "get", "clusterroles,clusterrolebindings", "-l", f"app.kubernetes.io/instance={release.name}", "-o", "json"
        )
    )["items"]
    assert cluster_scoped == []
