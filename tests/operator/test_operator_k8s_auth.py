"""Internal identity with the operator really running (identity.py, identity_sync.py).

The chart is installed with ``auth.enabled=true`` on a control plane of this module's own, so the
signing key Secret is the one Helm makes; the operator runs as a local process with the chart's
environment and as the chart's ServiceAccount (every Secret it mints or copies goes through the
chart's RBAC); the broker is a real standalone with authentication and authorization on, the same
key, and the chart's superuser roles. There is no kubelet: pods never run, so what is checked is
what the operator writes (token Secrets, copies, pod specs, applications) and what it does on the
broker through its authenticated admin client (read back with a superuser token).

A control plane of its own (``control_plane`` imported below, as tests/chart does): the session's
operator watches every namespace of the session's plane and would reconcile these resources too,
against its unauthenticated broker.
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import jwt
import pytest
from tests.chart.chart import env_of, find
from tests.chart.test_chart_k8s import HARNESS_ENV, Release, install, service_account_kubeconfig
from tests.operator.conftest import control_plane
from tests.operator.harness import ControlPlane, OperatorProcess, condition, free_port, wait_for
from tests.operator.test_operator_k8s_spark import SPARK_KIND, spark_crd_dir
from tests.support.standalone import StandaloneProcess

from magnetar_operator import identity

pytestmark = pytest.mark.k8s

__all__ = ["control_plane"]  # this module's own plane (see the docstring)

NAMESPACE = "magnetar"
OPERATOR_SA = "magnetar-operator"
KEY_SECRET = "magnetar-auth-key"
PREFIX = "magnetar-token"
BOOKIE_SPEC: dict[str, Any] = {
    "replicas": 1,
    "image": "localhost/magnetar-bookie:1",
    "storage": {"size": "1Gi"},
}


@dataclass
class Secured:
    release: Release
    key: bytes
    broker: StandaloneProcess
    super_users: list[str]
    plain_args: list[str]
    auth_args: list[str]

    def restart_broker(self, *, auth: bool) -> None:
        """The same broker (data, admin port) with authentication and authorization on or off."""
        self.broker.stop()
        self.broker.extra_args = self.plain_args + (self.auth_args if auth else [])
        self.broker.start()

    @property
    def cp(self) -> ControlPlane:
        return self.release.cp

    def token(self, role: str) -> str:
        return jwt.encode({"sub": role}, self.key, algorithm="HS256")

    def call(self, method: str, path: str, role: str | None = "admin") -> tuple[int, Any]:
        """The broker's admin API as ``role`` (None: no token)."""
        headers = {} if role is None else {"Authorization": f"Bearer {self.token(role)}"}
        req = urllib.request.Request(self.broker.admin_url + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        return status, json.loads(raw) if raw.strip() else None


def secret_data(cp: ControlPlane, name: str, namespace: str, key: str) -> bytes | None:
    data = ((cp.get("secret", name, namespace) or {}).get("data")) or {}
    return base64.b64decode(data[key]) if key in data else None


def apply(cp: ControlPlane, ns: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": "magnetar.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(body))


def ready(cp: ControlPlane, kind: str, name: str, ns: str, type_: str = "Ready") -> dict[str, Any] | None:
    cond = condition(cp.get(f"{kind}.magnetar.dev", name, ns), type_)
    return cond if cond.get("status") == "True" else None


def mounts(sts: dict[str, Any]) -> dict[str, str]:
    """The StatefulSet's Secret volumes by mount path."""
    pod = sts["spec"]["template"]["spec"]
    secret_of = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes") or [] if "secret" in v}
    return {
        m["mountPath"]: secret_of[m["name"]]
        for m in pod["containers"][0].get("volumeMounts") or []
        if m["name"] in secret_of
    }


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def secured(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """The chart installed with auth on, and a standalone that knows the key Helm made."""
    release = install(control_plane, NAMESPACE, "auth.enabled=true")
    key = secret_data(control_plane, KEY_SECRET, NAMESPACE, "secret.key")
    assert key is not None and len(key) == 32
    tmp = tmp_path_factory.mktemp("k8s-auth-broker")
    (tmp / "secret.key").write_bytes(key)
    env = env_of(find(release.manifest, "Deployment", OPERATOR_SA)["spec"]["template"]["spec"]["containers"][0])
    super_users = env["MAGNETAR_AUTH_SUPERUSER_ROLES"]
    assert env["MAGNETAR_AUTH_AUTHORIZATION_ENABLED"] == "true"
    # A fixed admin port, so that a restart (auth turned on later) is where the operator expects it.
    plain = ["--web-port", str(free_port())]
    auth = ["--authentication-enabled", "--token-secret-key", f"file://{tmp / 'secret.key'}"]
    auth += ["--authorization-enabled", "--super-user-roles", super_users]
    sa = StandaloneProcess(tmp / "data", tmp / "standalone.log", extra_args=plain + auth)
    sa.start()
    try:
        yield Secured(release, key, sa, super_users.split(","), plain, auth)
    finally:
        sa.stop()


@pytest.fixture(scope="module")
def spark_crds(secured: Secured) -> bool:
    """The spark-operator CRDs on this plane, when their files are here (else the Spark test skips)."""
    folder = spark_crd_dir()
    if folder is None:
        return False
    for path in sorted(folder.glob("sparkoperator.k8s.io_*.yaml")):
        out = secured.cp.kubectl("create", "-f", str(path), check=False)
        assert "created" in out or "AlreadyExists" in out, out
    established = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    wait_for("SparkApplication CRD", lambda: secured.cp.kubectl("get", "crd", SPARK_KIND, "-o", established) == "True")
    return True


@pytest.fixture(scope="module")
def operator(secured: Secured, spark_crds: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator with the chart's environment (auth on), as the chart's ServiceAccount."""
    tmp = tmp_path_factory.mktemp("k8s-auth-operator")
    kubeconfig = service_account_kubeconfig(secured.cp, NAMESPACE, OPERATOR_SA, tmp / "operator.kubeconfig")
    container = find(secured.release.manifest, "Deployment", OPERATOR_SA)["spec"]["template"]["spec"]["containers"][0]
    env = {k: v for k, v in env_of(container).items() if k not in HARNESS_ENV}
    env["POD_NAMESPACE"] = NAMESPACE  # a fieldRef in the Deployment
    env["MAGNETAR_SPARK_POLL_INTERVAL"] = "1"
    op = OperatorProcess(kubeconfig, secured.broker.admin_url, tmp / "operator.log", extra_env=env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(f"\noperator (auth on) log: {op.log_path}")


@pytest.fixture(scope="module")
def tokens(secured: Secured, operator: OperatorProcess) -> dict[str, str]:
    """Every role's token Secret, once the operator has minted them at start-up."""

    def minted() -> dict[str, str] | None:
        found = {r: secret_data(secured.cp, f"{PREFIX}-{r}", NAMESPACE, "token") for r in identity.ROLES}
        return {r: t.decode() for r, t in found.items() if t is not None} if all(found.values()) else None

    return wait_for("the token Secrets", minted, timeout=60)


def new_namespace(cp: ControlPlane, name: str) -> str:
    cp.kubectl("create", "namespace", name)
    return name


# ----------------------------------------------------------------------------- tests
def test_a_token_secret_per_role_signed_with_the_charts_key(secured: Secured, tokens: dict[str, str]) -> None:
    assert sorted(tokens) == sorted(["broker", "bookie", "operator", "jobs", "admin"])
    for role, token in tokens.items():
        assert jwt.decode(token, secured.key, algorithms=["HS256"]) == {"sub": role}, role
    # The admin token is what a user gives magnetar-admin: it works, and nothing works without one.
    status, _ = secured.call("GET", "/admin/v2/tenants", role=None)
    assert status == 401
    req = urllib.request.Request(
        secured.broker.admin_url + "/admin/v2/tenants", headers={"Authorization": f"Bearer {tokens['admin']}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200 and "public" in json.loads(resp.read())


def test_broker_pool_and_release_bookies_mount_the_key_and_their_own_token(
    secured: Secured, tokens: dict[str, str]
) -> None:
    pool = wait_for("the broker pool", lambda: secured.cp.get("statefulset", "magnetar-broker", NAMESPACE))
    assert mounts(pool) == {identity.KEY_DIR: KEY_SECRET, identity.TOKEN_DIR: f"{PREFIX}-broker"}
    config = (secured.cp.get("configmap", "magnetar-broker-config", NAMESPACE) or {})["data"]
    text = "\n".join(config.values())
    for line in (
        "authenticationEnabled: 'true'",
        "authorizationEnabled: 'true'",
        f"superUserRoles: {','.join(secured.super_users)}",
        f"bookkeeperClientAuthenticationParameters: file://{identity.TOKEN_DIR}/token",
    ):
        assert line in text, (line, text)
    bookies = wait_for("the release's bookies", lambda: secured.cp.get("statefulset", "magnetar-bookie", NAMESPACE))
    assert mounts(bookies) == {identity.KEY_DIR: KEY_SECRET, identity.TOKEN_DIR: f"{PREFIX}-bookie"}


def test_tenant_namespace_and_topic_are_made_through_the_authenticated_admin_client(
    secured: Secured, tokens: dict[str, str]
) -> None:
    cp, ns = secured.cp, new_namespace(secured.cp, "auth-res")
    apply(cp, ns, "Tenant", "acme", {})
    apply(cp, ns, "Namespace", "orders", {"tenant": "acme", "name": "orders"})
    apply(cp, ns, "Topic", "created", {"namespace": "acme/orders", "name": "created", "partitions": 2})
    for kind, name in (("tenant", "acme"), ("namespace", "orders"), ("topic", "created")):
        wait_for(f"{kind} {name} Ready", partial(ready, cp, kind, name, ns), timeout=60)
    # Really there on the broker (read as a superuser), and the broker really refuses strangers.
    assert secured.call("GET", "/admin/v2/tenants/acme")[0] == 200
    assert "acme/orders" in secured.call("GET", "/admin/v2/namespaces/acme")[1]
    assert secured.call("GET", "/admin/v2/persistent/acme/orders/created/partitions") == (200, {"partitions": 2})
    assert secured.call("GET", "/admin/v2/namespaces/acme", role=None)[0] == 401
    assert secured.call("GET", "/admin/v2/namespaces/acme", role="stranger")[0] in {401, 403}


def test_isolated_tenant_gets_its_isolation_policy(secured: Secured, tokens: dict[str, str]) -> None:
    cp, ns = secured.cp, new_namespace(secured.cp, "auth-iso")
    apply(cp, ns, "Tenant", "solo", {"isolation": {"enabled": True, "brokers": {"replicas": 1}}})
    cond = wait_for("PoliciesApplied", lambda: ready(cp, "tenant", "solo", ns, "PoliciesApplied"), timeout=60)
    assert "namespace isolation policy tenant-solo" in cond["message"]
    status, policy = secured.call("GET", "/admin/v2/clusters/standalone/namespaceIsolationPolicies/tenant-solo")
    assert status == 200 and policy["namespaces"] == ["^solo/.*$"]
    # The isolated set's brokers are brokers like the pool's: the key and the broker token.
    sts = wait_for("the isolated set", lambda: cp.get("statefulset", "magnetar-broker-solo", ns))
    assert mounts(sts) == {identity.KEY_DIR: KEY_SECRET, identity.TOKEN_DIR: f"{PREFIX}-broker"}
    # ... which exist in the Tenant's namespace: copies of the key and the broker token, nothing else.
    assert wait_for("the key copy", lambda: secret_data(cp, KEY_SECRET, ns, "secret.key")) == secured.key
    assert secret_data(cp, f"{PREFIX}-broker", ns, "token") == tokens["broker"].encode()
    for role in ("bookie", "operator", "jobs", "admin"):
        assert cp.get("secret", f"{PREFIX}-{role}", ns) is None, role


def test_bookie_ensemble_in_another_namespace_gets_copies_of_the_key_and_its_token(
    secured: Secured, tokens: dict[str, str], operator: OperatorProcess
) -> None:
    cp, ns = secured.cp, new_namespace(secured.cp, "auth-bk")
    apply(cp, ns, "BookieEnsemble", "bk", BOOKIE_SPEC)
    key = wait_for("the key copy", lambda: secret_data(cp, KEY_SECRET, ns, "secret.key"), timeout=60)
    assert key == secured.key
    token = wait_for("the bookie token copy", lambda: secret_data(cp, f"{PREFIX}-bookie", ns, "token"))
    assert token.decode() == tokens["bookie"]
    for role in ("broker", "operator", "jobs", "admin"):  # only what a bookie needs
        assert cp.get("secret", f"{PREFIX}-{role}", ns) is None, role
    sts = wait_for("the bookie StatefulSet", lambda: cp.get("statefulset", "bk", ns), timeout=60)
    assert mounts(sts) == {identity.KEY_DIR: KEY_SECRET, identity.TOKEN_DIR: f"{PREFIX}-bookie"}
    config = "\n".join((cp.get("configmap", "bk-config", ns) or {})["data"].values())
    assert "authenticationEnabled: 'true'" in config and "superUserRoles: broker,bookie,jobs" in config
    # Every Secret read, mint and copy went through the chart's RBAC.
    forbidden = [line for line in operator.log_text().splitlines() if "forbidden" in line.lower()]
    assert not forbidden, "\n".join(forbidden[:10])


def test_topic_export_runs_with_the_jobs_token_and_no_key(
    secured: Secured, tokens: dict[str, str], spark_crds: bool
) -> None:
    if not spark_crds:
        pytest.skip("spark-operator v2.0.2 CRDs not found (see test_operator_k8s_spark.py)")
    cp, ns = secured.cp, new_namespace(secured.cp, "auth-spark")
    cp.kubectl("-n", ns, "create", "serviceaccount", "magnetar-spark")
    apply(cp, ns, "Tenant", "exp", {})
    apply(cp, ns, "Namespace", "sales", {"tenant": "exp", "name": "sales"})
    export = {"target": "file:///exports/orders", "executors": 1}
    apply(cp, ns, "Topic", "orders", {"namespace": "exp/sales", "name": "orders", "export": export})
    app = wait_for("SparkApplication orders-export", lambda: cp.get(SPARK_KIND, "orders-export", ns), timeout=60)
    wanted = {"name": identity.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": f"{PREFIX}-jobs", "key": "token"}}}
    assert wanted in app["spec"]["driver"]["env"] and wanted in app["spec"]["executor"]["env"]
    assert secret_data(cp, f"{PREFIX}-jobs", ns, "token") == tokens["jobs"].encode()
    assert cp.get("secret", KEY_SECRET, ns) is None  # never the key in a jobs namespace
    job = wait_for("the submit Job", lambda: cp.get("job", "orders-export-submit", ns), timeout=60)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert wanted in container["env"]
    assert f"spark.kubernetes.executor.secretKeyRef.{identity.TOKEN_ENV}={PREFIX}-jobs:token" in container["args"]


def test_an_application_made_before_auth_was_on_is_replaced_by_one_with_the_token(
    secured: Secured, tokens: dict[str, str], spark_crds: bool, operator: OperatorProcess
) -> None:
    """Turning auth on later (brokers and operator restarted with it, as a helm upgrade does)
    replaces an export's application made without the token: the env is in its spec hash. The
    admin URL stays the same, so nothing else in the application changes."""
    if not spark_crds:
        pytest.skip("spark-operator v2.0.2 CRDs not found (see test_operator_k8s_spark.py)")
    cp, ns = secured.cp, new_namespace(secured.cp, "auth-upgrade")
    cp.kubectl("-n", ns, "create", "serviceaccount", "magnetar-spark")
    operator.stop()
    operator.extra_env["MAGNETAR_AUTH_ENABLED"] = "false"
    secured.restart_broker(auth=False)
    try:
        operator.start()
        apply(cp, ns, "Tenant", "late", {})
        apply(cp, ns, "Namespace", "sales", {"tenant": "late", "name": "sales"})
        export = {"target": "file:///exports/late", "executors": 1}
        apply(cp, ns, "Topic", "orders", {"namespace": "late/sales", "name": "orders", "export": export})
        wait_for("the Topic Ready without auth", partial(ready, cp, "topic", "orders", ns), timeout=60)
        before = wait_for("the application", lambda: cp.get(SPARK_KIND, "orders-export", ns), timeout=60)
        assert "env" not in before["spec"]["driver"] and cp.get("secret", f"{PREFIX}-jobs", ns) is None
    finally:
        operator.stop()
        secured.restart_broker(auth=True)
        operator.extra_env["MAGNETAR_AUTH_ENABLED"] = "true"
        operator.start()

    def replaced() -> dict[str, Any] | None:
        app = cp.get(SPARK_KIND, "orders-export", ns)
        return app if app and app["metadata"]["uid"] != before["metadata"]["uid"] else None

    after = wait_for("the application replaced", replaced, timeout=60)
    wanted = {"name": identity.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": f"{PREFIX}-jobs", "key": "token"}}}
    assert after["spec"]["driver"]["env"] == [wanted] and after["spec"]["executor"]["env"] == [wanted]
    assert after["spec"]["arguments"] == before["spec"]["arguments"]
    assert secret_data(cp, f"{PREFIX}-jobs", ns, "token") == tokens["jobs"].encode()


def test_a_key_the_brokers_do_not_know_is_reported_as_401_not_a_crash(
    secured: Secured, tokens: dict[str, str], operator: OperatorProcess
) -> None:
    """The operator reads its token at start-up: a token Secret replaced by hand with a bad token
    is minted again then, so the way to a refused operator is a key Secret the brokers do not use
    (replaced without restarting them). Restarted, the operator re-mints every token with the new
    key; the brokers answer 401 and a new Tenant says so in its condition, while the operator keeps
    running and the tenant is not made."""
    cp = secured.cp
    new_key = secrets.token_bytes(32)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KEY_SECRET},
        "type": "Opaque",
        "data": {"secret.key": base64.b64encode(new_key).decode()},
    }
    cp.kubectl("-n", NAMESPACE, "replace", "-f", "-", input=json.dumps(secret))
    operator.stop()
    operator.start()

    def reminted() -> str | None:
        token = (secret_data(cp, f"{PREFIX}-operator", NAMESPACE, "token") or b"").decode()
        return token if token and identity.verifies(new_key, token, "operator") else None

    wait_for("the operator token minted again with the new key", reminted, timeout=60)
    ns = new_namespace(cp, "auth-denied")
    apply(cp, ns, "Tenant", "refused", {})

    def refused() -> dict[str, Any] | None:
        cond = condition(cp.get("tenant.magnetar.dev", "refused", ns))
        return cond if cond.get("status") == "False" and "HTTP 401" in cond.get("message", "") else None

    cond = wait_for("Ready False naming the 401", refused, timeout=60)
    assert cond["reason"] == "BrokerError", cond
    assert "retrying" in cond["message"]
    assert operator.proc is not None and operator.proc.poll() is None  # running, not crash-looping
    assert secured.call("GET", "/admin/v2/tenants/refused")[0] == 404
    assert "refused" not in secured.call("GET", "/admin/v2/tenants")[1]
