"""The Helm chart on a real Kubernetes 1.20 API server (scripts/k8s/up-control-plane.sh, shared
with the operator tests through their fixtures).

There is no kubelet: pods never start, so nothing waits for readiness. Where a pod matters it is
played by the test, with the pod's own identity:
- the operator runs as a local process with the chart's environment and the token of the chart's
  operator ServiceAccount, so every API call it makes goes through the chart's RBAC;
- a `helm uninstall` hook Job's script is run locally as the hook's ServiceAccount, and the Job is
  then reported complete, as the job controller would once its pod succeeded.

The tests run in file order on one release (install, inspect, operate, uninstall), then install a
second release with keepClaimsOnUninstall=false to see its claims go.
"""

from __future__ import annotations

import base64
import datetime
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.chart.chart import (
    APP_VERSION,
    CHART,
    RELEASE,
    Doc,
    env_of,
    find,
    helm,
    helm_binary,
    parse,
)
from tests.operator.harness import BIN, ROOT, ControlPlane, OperatorProcess, condition, wait_for
from tests.support.standalone import StandaloneProcess

pytestmark = pytest.mark.k8s

NAMESPACE = "magnetar"
PURGE_NAMESPACE = "magnetar-purge"
OPERATOR_SA = "magnetar-operator"
#: What `kubectl get -l app.kubernetes.io/name=magnetar` looks through after an uninstall.
NAMESPACED_KINDS = (
    "statefulsets,deployments,replicasets,pods,services,endpoints,configmaps,poddisruptionbudgets,"
    "serviceaccounts,roles,rolebindings,jobs,bookieensembles,persistentvolumeclaims"
)
#: Variables the operator harness sets itself (shorter timers for tests); the chart's are dropped.
HARNESS_ENV = {
    "KUBECONFIG",
    "MAGNETAR_ADMIN_URL",
    "MAGNETAR_RECONCILE_INTERVAL",
    "MAGNETAR_RETRY_DELAY",
    "MAGNETAR_ADMIN_TIMEOUT",
    "MAGNETAR_LIVENESS_ENDPOINT",
    "PYTHONUNBUFFERED",
}


@dataclass
class Release:
    cp: ControlPlane
    namespace: str
    notes: str
    manifest: list[Doc]
    manifest_text: str


def install(cp: ControlPlane, namespace: str, *sets: str) -> Release:
    cp.kubectl("create", "namespace", namespace)
    args = [arg for s in sets for arg in ("--set", s)]
    notes = helm("install", RELEASE, str(CHART), f"--namespace={namespace}", *args, kubeconfig=cp.kubeconfig).stdout
    text = helm("get", "manifest", RELEASE, f"--namespace={namespace}", kubeconfig=cp.kubeconfig).stdout
    return Release(cp, namespace, notes, parse(text), text)


def service_account_kubeconfig(cp: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as `account` (its token Secret, made by the token controller)."""

    def token() -> str | None:
        sa = cp.get("serviceaccount", account, namespace) or {}
        for ref in sa.get("secrets") or []:
            data = (cp.get("secret", ref["name"], namespace) or {}).get("data") or {}
            if "token" in data:
                return base64.b64decode(data["token"]).decode()
        return None

    value = wait_for(f"a token for {namespace}/{account}", token, timeout=60)
    cluster = yaml.safe_load(cp.kubeconfig.read_text())["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "magnetar", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": value}}],
        "contexts": [{"name": account, "context": {"cluster": "magnetar", "user": account, "namespace": namespace}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def report_job_complete(cp: ControlPlane, namespace: str, name: str) -> None:
    """Set a Job's status as the job controller does when its pod has succeeded (kubectl 1.20
    cannot patch the status subresource, so through the API client)."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(cp.kubeconfig))  # type: ignore[no-untyped-call]
    api = client.BatchV1Api(api_client)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    body = {"status": {"conditions": [done], "succeeded": 1, "startTime": now, "completionTime": now}}
    api.patch_namespaced_job_status(name, namespace, body)


def play_hook_pod(cp: ControlPlane, namespace: str, job_name: str, tmp: Path) -> str:
    """Run a hook Job's script as its pod would (same command, environment, ServiceAccount), then
    report the Job complete; returns the script's output."""
    job: dict[str, Any] = wait_for(f"hook Job {job_name}", lambda: cp.get("job", job_name, namespace), timeout=60)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:2] == ["python", "-c"], container["command"]
    kubeconfig = service_account_kubeconfig(cp, namespace, pod["serviceAccountName"], tmp / f"{job_name}.kubeconfig")
    env = dict(os.environ, **env_of(container), KUBECONFIG=str(kubeconfig), POD_NAMESPACE=namespace)
    proc = subprocess.run(
        [sys.executable, "-c", container["command"][2]], env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, f"hook {job_name} failed:\n{proc.stdout}\n{proc.stderr}"
    report_job_complete(cp, namespace, job_name)
    return proc.stdout


def uninstall(release: Release, hooks: list[str], tmp: Path) -> dict[str, str]:
    """`helm uninstall`, playing the pods of its hook Jobs in order; returns each hook's output."""
    command = [
        helm_binary(),
        "uninstall",
        RELEASE,
        f"--namespace={release.namespace}",
        "--timeout=180s",
        f"--kubeconfig={release.cp.kubeconfig}",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    outputs = {}
    try:
        for job in hooks:
            outputs[job] = play_hook_pod(release.cp, release.namespace, job, tmp)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"helm uninstall failed:\n{out}\n{err}"
    return outputs


def labelled(cp: ControlPlane, namespace: str) -> list[str]:
    out = cp.kubectl("get", NAMESPACED_KINDS, "-n", namespace, "-l", "app.kubernetes.io/name=magnetar", "-o", "name")
    return sorted(out.split())


def can_i(cp: ControlPlane, verb: str, resource: str, *flags: str) -> bool:
    """`kubectl auth can-i` as the operator's ServiceAccount."""
    proc = subprocess.run(
        [
            str(BIN / "kubectl"),
            f"--kubeconfig={cp.kubeconfig}",
            "auth",
            "can-i",
            verb,
            resource,
            *flags,
            f"--as=system:serviceaccount:{NAMESPACE}:{OPERATOR_SA}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    answer = proc.stdout.strip()
    assert answer in {"yes", "no"}, f"kubectl auth can-i {verb} {resource} {flags}: {proc.stdout}{proc.stderr}"
    return answer == "yes"


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def release(control_plane: ControlPlane) -> Release:
    return install(control_plane, NAMESPACE)


@pytest.fixture(scope="module")
def operator_as_sa(
    release: Release, broker: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The operator with the chart's environment, authenticated as the chart's ServiceAccount."""
    tmp = tmp_path_factory.mktemp("operator-sa")
    kubeconfig = service_account_kubeconfig(release.cp, NAMESPACE, OPERATOR_SA, tmp / "operator.kubeconfig")
    container = find(release.manifest, "Deployment", "magnetar-operator")["spec"]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in env_of(container).items() if k not in HARNESS_ENV}
    env["POD_NAMESPACE"] = NAMESPACE  # a fieldRef in the Deployment
    op = OperatorProcess(kubeconfig, broker.admin_url, tmp / "operator.log", extra_env=env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(f"\noperator (as {OPERATOR_SA}) log: {op.log_path}")


# ----------------------------------------------------------------------------- install
def test_install_creates_every_object_on_kubernetes_1_20(release: Release) -> None:
    assert "STATUS: deployed" in release.notes
    assert "magnetar://magnetar-broker.magnetar.svc:6650" in release.notes, "NOTES.txt"
    listed = release.cp.kubectl("get", "-f", "-", "-o", "name", input=release.manifest_text).split()
    assert len(listed) == len(release.manifest), listed
    kinds = sorted({doc["kind"] for doc in release.manifest})
    assert kinds == [
        "BookieEnsemble",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    for crd in ("tenants", "namespaces", "topics", "bookieensembles"):
        established = release.cp.kubectl(
            "get", "crd", f"{crd}.magnetar.dev", "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
        )
        assert established == "True", crd


def test_pod_disruption_budget_is_policy_v1beta1_on_1_20(release: Release) -> None:
    pdb = find(release.manifest, "PodDisruptionBudget", "magnetar-etcd")
    assert pdb["apiVersion"] == "policy/v1beta1"
    live = release.cp.kubectl(
        "get", "poddisruptionbudgets.v1beta1.policy", "magnetar-etcd", "-n", NAMESPACE, "-o", "name"
    )
    assert live.strip() == "poddisruptionbudget.policy/magnetar-etcd"


def test_bookie_ensemble_is_stored_as_rendered(release: Release) -> None:
    """Nothing pruned: every field the chart sets exists in the BookieEnsemble CRD."""
    rendered = find(release.manifest, "BookieEnsemble", "magnetar-bookie")["spec"]
    live = release.cp.get("bookieensemble", "magnetar-bookie", NAMESPACE)
    assert live is not None and live["spec"] == rendered
    assert live["spec"]["storage"]["deleteClaim"] is True
    assert live["spec"]["podSecurityContext"]["runAsUser"] == 10000


def test_etcd_statefulset_makes_its_claim(release: Release) -> None:
    sts = release.cp.get("statefulset", "magnetar-etcd", NAMESPACE)
    assert sts is not None
    assert sts["spec"]["template"]["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    wait_for("etcd's claim", lambda: release.cp.get("persistentvolumeclaim", "data-magnetar-etcd-0", NAMESPACE))


@pytest.mark.parametrize(
    "example", ["tenant.yaml", "namespace.yaml", "topic.yaml"], ids=lambda name: name.removesuffix(".yaml")
)
def test_examples_are_valid_custom_resources(release: Release, example: str) -> None:
    """A server-side dry run prunes what the CRD does not know: the spec must come back whole.

    A dry run refused by the server (a transient error of a loaded API server on two cores, seen
    once in CI) is tried again until it answers; the assertion is on the spec it answers with.
    """
    path = ROOT / "examples" / example
    errors: list[str] = []

    def dry_run() -> str | None:
        try:
            return release.cp.kubectl("create", "--dry-run=server", "-o", "yaml", "-n", NAMESPACE, "-f", str(path))
        except AssertionError as exc:
            errors.append(str(exc))
            return None

    try:
        out = wait_for(f"a server-side dry run of {example}", dry_run, timeout=60.0, every=1.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last error: {errors[-1] if errors else 'none'}") from exc
    assert yaml.safe_load(out)["spec"] == yaml.safe_load(path.read_text())["spec"]


# ----------------------------------------------------------------------------- RBAC
KINDS = ("tenants", "namespaces", "topics", "bookieensembles")
ALLOWED = [
    ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    *[(verb, f"{kind}.magnetar.dev", "-A") for kind in KINDS for verb in ("list", "watch")],
    *[("patch", f"{kind}.magnetar.dev", "-n", "default") for kind in KINDS],
    *[
        ("patch", f"{kind}.magnetar.dev", "--subresource=status", "-n", "default")
        for kind in ("tenants", "bookieensembles")
    ],
    ("update", "bookieensembles.magnetar.dev", "--subresource=finalizers", "-n", "default"),
    ("get", "bookieensembles.magnetar.dev", "-n", "default"),
    ("create", "events", "-n", "default"),
    *[(verb, "statefulsets.apps", "-n", "default") for verb in ("get", "create", "patch", "delete")],
    *[(verb, "services", "-n", "default") for verb in ("get", "create", "patch", "delete")],
    *[(verb, "configmaps", "-n", "default") for verb in ("get", "create", "patch", "delete")],
    *[(verb, "poddisruptionbudgets.policy", "-n", "default") for verb in ("get", "create", "patch", "delete")],
    ("delete", "persistentvolumeclaims", "-n", "default"),
    ("list", "pods", "-n", "default"),
    ("delete", "pods", "-n", "default"),
    ("get", "deployments.apps/magnetar-operator", "-n", NAMESPACE),
]
REFUSED = [
    ("get", "secrets", "-n", NAMESPACE),
    ("list", "secrets", "-A"),
    ("delete", "namespaces"),
    ("list", "namespaces"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io", "-n", NAMESPACE),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "pods", "--subresource=exec", "-n", NAMESPACE),
    ("create", "pods", "-n", NAMESPACE),
    ("create", "serviceaccounts", "--subresource=token", "-n", NAMESPACE),
    ("list", "persistentvolumeclaims", "-n", "default"),
    ("update", "statefulsets.apps", "-n", "default"),
    ("create", "deployments.apps", "-n", NAMESPACE),
    ("get", "deployments.apps/someone-else", "-n", NAMESPACE),
    ("get", "deployments.apps/magnetar-operator", "-n", "default"),
    ("delete", "bookieensembles.magnetar.dev", "-n", "default"),
]


@pytest.mark.parametrize("check", ALLOWED, ids=lambda c: " ".join(c))
def test_operator_service_account_may(release: Release, check: tuple[str, ...]) -> None:
    verb, resource, *flags = check
    assert can_i(release.cp, verb, resource, *flags), f"the operator needs: {' '.join(check)}"


@pytest.mark.parametrize("check", REFUSED, ids=lambda c: " ".join(c))
def test_operator_service_account_may_not(release: Release, check: tuple[str, ...]) -> None:
    verb, resource, *flags = check
    assert not can_i(release.cp, verb, resource, *flags), f"the operator must not: {' '.join(check)}"


# ----------------------------------------------------------------------------- the operator
def test_operator_runs_with_only_the_charts_rbac(release: Release, operator_as_sa: OperatorProcess) -> None:
    cp = release.cp
    pool = wait_for("the broker pool", lambda: cp.get("statefulset", "magnetar-broker", NAMESPACE), timeout=60)
    bookies = wait_for(
        "the bookie StatefulSet", lambda: cp.get("statefulset", "magnetar-bookie", NAMESPACE), timeout=60
    )
    deployment = cp.get("deployment", "magnetar-operator", NAMESPACE)
    assert deployment is not None
    owners = pool["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
        ("Deployment", "magnetar-operator", deployment["metadata"]["uid"])
    ], "the pool must go with the operator's Deployment on helm uninstall"
    security = find(release.manifest, "BookieEnsemble", "magnetar-bookie")["spec"]["podSecurityContext"]
    for sts in (pool, bookies):
        pod = sts["spec"]["template"]["spec"]
        assert pod["securityContext"] == security, sts["metadata"]["name"]
        assert pod["containers"][0]["image"] == f"localhost/magnetar:{APP_VERSION}"
    config = cp.get("configmap", "magnetar-broker-config", NAMESPACE)
    assert config is not None and "etcd://magnetar-etcd.magnetar.svc:2379" in config["data"]["broker.yaml"]

    def status_written() -> bool:
        ensemble = cp.get("bookieensemble", "magnetar-bookie", NAMESPACE) or {}
        return (ensemble.get("status") or {}).get("statefulSet") == "magnetar-bookie"

    wait_for("the BookieEnsemble's status", status_written, timeout=60)
    assert cp.events(NAMESPACE, "magnetar-bookie"), "the operator posts events"
    forbidden = [line for line in operator_as_sa.log_text().splitlines() if "forbidden" in line.lower()]
    assert not forbidden, "\n".join(forbidden[:20])


def test_examples_become_ready_through_the_operator(release: Release, operator_as_sa: OperatorProcess) -> None:
    cp = release.cp
    examples = str(ROOT / "examples")
    cp.kubectl("apply", "-n", NAMESPACE, "-f", examples)
    for kind, name in (("tenant", "acme"), ("namespace.magnetar.dev", "acme-orders"), ("topic", "acme-orders-created")):

        def ready(kind: str = kind, name: str = name) -> bool:
            return condition(cp.get(kind, name, NAMESPACE)).get("status") == "True"

        wait_for(f"{kind} {name} Ready", ready, timeout=90)
    topic = cp.get("topic", "acme-orders-created", NAMESPACE)
    assert topic is not None and topic["status"]["brokerName"] == "persistent://acme/orders/created"
    cp.kubectl("delete", "-n", NAMESPACE, "-f", examples, "--wait=false")
    for kind, name in (("topic", "acme-orders-created"), ("namespace.magnetar.dev", "acme-orders"), ("tenant", "acme")):

        def deleted(kind: str = kind, name: str = name) -> bool:
            return cp.get(kind, name, NAMESPACE) is None

        wait_for(f"{kind} {name} deleted", deleted, timeout=90)
    forbidden = [line for line in operator_as_sa.log_text().splitlines() if "forbidden" in line.lower()]
    assert not forbidden, "\n".join(forbidden[:20])


# ----------------------------------------------------------------------------- uninstall
def test_uninstall_removes_everything_but_the_claims(
    release: Release, operator_as_sa: OperatorProcess, tmp_path: Path
) -> None:
    """The pre-delete hook deletes the BookieEnsemble while the operator runs, the operator lets
    go of it, and the garbage collector removes what the operator made; the claims stay."""
    cp = release.cp
    wait_for("the bookies' claims", lambda: cp.get("persistentvolumeclaim", "data-magnetar-bookie-2", NAMESPACE))
    outputs = uninstall(release, ["magnetar-uninstall"], tmp_path)
    assert "is gone" in outputs["magnetar-uninstall"]
    assert "removing its finalizer" not in outputs["magnetar-uninstall"], "the running operator should release it"
    claims = [
        "persistentvolumeclaim/data-magnetar-bookie-0",
        "persistentvolumeclaim/data-magnetar-bookie-1",
        "persistentvolumeclaim/data-magnetar-bookie-2",
        "persistentvolumeclaim/data-magnetar-etcd-0",
    ]
    wait_for("only the claims left", lambda: labelled(cp, NAMESPACE) == claims or None, timeout=90)
    for kind in ("clusterrole", "clusterrolebinding"):
        assert cp.get(kind, "magnetar-magnetar-operator", "") is None, kind
    crds = cp.kubectl("get", "crd", "-o", "name").split()
    assert "customresourcedefinition.apiextensions.k8s.io/bookieensembles.magnetar.dev" in crds, "Helm keeps CRDs"


def test_uninstall_deletes_the_claims_when_asked(control_plane: ControlPlane, tmp_path: Path) -> None:
    """keepClaimsOnUninstall=false, no operator running: the pre-delete hook finds no finalizer to
    wait for, and the post-delete hook deletes this release's etcd and bookie claims only."""
    cp = control_plane
    purge = install(cp, PURGE_NAMESPACE, "persistence.keepClaimsOnUninstall=false", "operator.replicas=0")
    labels = {"app.kubernetes.io/component": "bookie", "magnetar.dev/bookie-ensemble": "magnetar-bookie"}
    for name, claim_labels in (("data-magnetar-bookie-0", labels), ("someone-elses", {"app": "other"})):
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": claim_labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        cp.kubectl("apply", "-n", PURGE_NAMESPACE, "-f", "-", input=yaml.safe_dump(claim))
    wait_for("etcd's claim", lambda: cp.get("persistentvolumeclaim", "data-magnetar-etcd-0", PURGE_NAMESPACE))
    outputs = uninstall(purge, ["magnetar-uninstall", "magnetar-cleanup"], tmp_path)
    assert "deleting PersistentVolumeClaim magnetar-purge/data-magnetar-etcd-0" in outputs["magnetar-cleanup"]
    assert "deleting PersistentVolumeClaim magnetar-purge/data-magnetar-bookie-0" in outputs["magnetar-cleanup"]

    def claims() -> list[str]:
        return sorted(cp.kubectl("get", "persistentvolumeclaims", "-n", PURGE_NAMESPACE, "-o", "name").split())

    wait_for("the release's claims deleted", lambda: claims() == ["persistentvolumeclaim/someone-elses"], timeout=60)
    wait_for("nothing labelled left", lambda: labelled(cp, PURGE_NAMESPACE) == [] or None, timeout=60)
    hooks = cp.kubectl("get", "jobs,serviceaccounts,roles,rolebindings", "-n", PURGE_NAMESPACE, "-o", "name").split()
    assert not [h for h in hooks if "magnetar" in h], hooks
