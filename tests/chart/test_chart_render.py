"""The Helm chart without a cluster: lint, golden renders, schema refusals, and what the rendered
objects promise (images, operator settings, RBAC, pods, hooks).

Golden files: tests/chart/golden/<scenario>.yaml is `helm template magnetar charts/magnetar
--namespace magnetar -f tests/chart/values/<scenario>.yaml`. After an intended change to the
chart, regenerate them and review the diff:

    UPDATE_GOLDEN=1 python -m pytest tests/chart/test_chart_render.py -k golden

Without helm these tests skip, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import difflib
import filecmp
import json
import os
from typing import Any

import pytest
from tests.chart.chart import (
    APP_VERSION,
    CHART,
    GOLDEN,
    Doc,
    env_of,
    find,
    helm,
    load_yaml,
    pod_specs,
    render,
    render_text,
    template_args,
    values_file,
)
from tests.operator.harness import ROOT

SCENARIOS = ["defaults", "scaled", "monitoring"]


# ----------------------------------------------------------------------------- lint and golden
@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_passes(strict: bool) -> None:
    args = ["lint", str(CHART), *(["--strict"] if strict else [])]
    out = helm(*args).stdout
    assert "0 chart(s) failed" in out, out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_helm_lint_strict_passes_with_scenario_values(scenario: str) -> None:
    out = helm("lint", str(CHART), "--strict", "-f", str(values_file(scenario))).stdout
    assert "0 chart(s) failed" in out, out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_render(scenario: str) -> None:
    text = render_text("-f", str(values_file(scenario)))
    golden = GOLDEN / f"{scenario}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with UPDATE_GOLDEN=1 to create it"
    want = golden.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(golden), "rendered"))
        pytest.fail(f"the chart renders differently from {golden.name} (UPDATE_GOLDEN=1 if intended):\n{diff}")


# ----------------------------------------------------------------------------- values refused
REFUSED = [
    # (--set arguments, text helm's error must contain: the offending key)
    pytest.param(["brokers.replicas=two"], "/brokers/replicas", id="replicas-not-an-integer"),
    pytest.param(["bookies.replicas=0"], "/bookies/replicas", id="bookies-below-one"),
    pytest.param(["brokers.replicas=0"], "/brokers/replicas", id="brokers-below-one"),
    pytest.param(["etcd.replicas=2"], "/etcd/replicas", id="etcd-not-1-or-3"),
    pytest.param(["operator.replicas=2"], "/operator/replicas", id="operator-more-than-one"),
    pytest.param(["cluster.ackQuorum=4"], "cluster.ackQuorum", id="ack-quorum-above-write-quorum"),
    pytest.param(["cluster.writeQuorum=4", "cluster.ackQuorum=2"], "cluster.writeQuorum", id="write-above-ensemble"),
    pytest.param(["cluster.ensembleSize=4", "bookies.replicas=3"], "cluster.ensembleSize", id="ensemble-above-bookies"),
    pytest.param(["unknownKey=1"], "unknownKey", id="unknown-top-level-key"),
    pytest.param(["etcd.replica=3"], "replica", id="unknown-nested-key"),
    pytest.param(["image.pullPolicy=Sometimes"], "/image/pullPolicy", id="bad-pull-policy"),
    pytest.param(["bookies.antiAffinity=maybe"], "/bookies/antiAffinity", id="bad-bookie-anti-affinity"),
    pytest.param(["etcd.antiAffinity=always"], "/etcd/antiAffinity", id="bad-etcd-anti-affinity"),
    pytest.param(["bookies.storage.size=lots"], "/bookies/storage/size", id="bad-storage-size"),
    pytest.param(["podSecurityContext.runAsUser=0"], "/podSecurityContext/runAsUser", id="root-user"),
    pytest.param(["podSecurityContext.runAsNonRoot=false"], "/podSecurityContext/runAsNonRoot", id="root-allowed"),
    pytest.param(["serviceMonitor.enabled=yes-please"], "/serviceMonitor/enabled", id="enabled-not-a-boolean"),
    pytest.param(["persistence.keepClaimsOnUninstall=maybe"], "/persistence/keepClaimsOnUninstall", id="keep-claims"),
    # spark.*: the Spark jobs' values (test_chart_spark.py has the rest)
    pytest.param(["spark.submitter=kubeflow"], "/spark/submitter", id="bad-submitter"),
    pytest.param(["spark.driver.memory=lots"], "/spark/driver/memory", id="bad-memory"),
    pytest.param(["spark.executor.cores=0"], "/spark/executor/cores", id="no-cores"),
    pytest.param(["spark.executor.coreRequest=much"], "/spark/executor/coreRequest", id="bad-core-request"),
    pytest.param(["spark.jobNamespaces={Not_A_Namespace}"], "/spark/jobNamespaces", id="bad-namespace"),
    pytest.param(["spark.operator.install=true"], "operator", id="no-bundled-spark-operator"),
]


@pytest.mark.parametrize(("sets", "names"), REFUSED)
def test_bad_values_are_refused_naming_the_key(sets: list[str], names: str) -> None:
    args = template_args(*(arg for s in sets for arg in ("--set", s)))
    proc = helm(*args, check=False)
    assert proc.returncode != 0, f"helm accepted {sets}:\n{proc.stdout[:2000]}"
    assert names in proc.stderr, f"helm's error does not name {names!r}:\n{proc.stderr}"


def test_good_quorums_are_accepted() -> None:
    docs = render("--set", "cluster.ensembleSize=3", "--set", "cluster.writeQuorum=2", "--set", "cluster.ackQuorum=2")
    assert find(docs, "Deployment", "magnetar-operator")


# ----------------------------------------------------------------------------- CRDs
def test_chart_crds_are_byte_identical_copies_of_the_repository_crds() -> None:
    source, copy = ROOT / "crds", CHART / "crds"
    names = sorted(p.name for p in source.glob("*.yaml"))
    assert names, "no CRDs in crds/"
    assert sorted(p.name for p in copy.iterdir()) == names, "charts/magnetar/crds/ must hold exactly crds/*.yaml"
    _, mismatch, errors = filecmp.cmpfiles(source, copy, names, shallow=False)
    assert not mismatch and not errors, f"out of date (cp crds/*.yaml charts/magnetar/crds/): {mismatch + errors}"


# ----------------------------------------------------------------------------- images
def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every scalar in a document, keyed by its path; list items by index, env vars by name."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{path}.{key}"))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            tag = item["name"] if isinstance(item, dict) and "name" in item else str(index)
            out.update(_leaves(item, f"{path}[{tag}]"))
        return out
    return {path: value}


def _by_object(docs: list[Doc]) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": _leaves(d) for d in docs}


def test_image_tag_changes_every_magnetar_image_and_nothing_else() -> None:
    common = ["--set", "persistence.keepClaimsOnUninstall=false"]  # the cleanup hook has an image too
    before = _by_object(render(*common))
    after = _by_object(render(*common, "--set", "image.tag=X"))
    assert before.keys() == after.keys()
    changed = {
        (obj, path): (before[obj].get(path), after[obj].get(path))
        for obj in before
        for path in before[obj].keys() | after[obj].keys()
        if before[obj].get(path) != after[obj].get(path)
    }
    for (obj, path), (old, new) in changed.items():
        assert isinstance(old, str) and isinstance(new, str), (obj, path, old, new)
        assert old.endswith(f":{APP_VERSION}") and new == old[: -len(APP_VERSION)] + "X", (obj, path, old, new)
    places = {(obj, path) for obj, path in changed}
    assert places == {
        ("Deployment/magnetar-operator", ".spec.template.spec.containers[operator].image"),
        ("Deployment/magnetar-operator", ".spec.template.spec.containers[operator].env[MAGNETAR_BROKER_IMAGE].value"),
        ("Deployment/magnetar-operator", ".spec.template.spec.containers[operator].env[MAGNETAR_SPARK_IMAGE].value"),
        ("StatefulSet/magnetar-etcd", ".spec.template.spec.containers[etcd].image"),
        ("BookieEnsemble/magnetar-bookie", ".spec.image"),
        ("Job/magnetar-uninstall", ".spec.template.spec.containers[uninstall].image"),
        ("Job/magnetar-cleanup", ".spec.template.spec.containers[cleanup].image"),
    }
    images = {value for leaves in after.values() for path, value in leaves.items() if path.endswith(".image")}
    assert images == {"localhost/magnetar:X", "localhost/magnetar-operator:X"}


def test_default_tag_is_the_app_version() -> None:
    chart = load_yaml(CHART / "Chart.yaml")
    assert chart["appVersion"] == APP_VERSION
    docs = render()
    assert find(docs, "BookieEnsemble", "magnetar-bookie")["spec"]["image"] == f"localhost/magnetar:{APP_VERSION}"


# ----------------------------------------------------------------------------- operator settings
def _operator_env(*extra: str) -> dict[str, str]:
    deployment = find(render(*extra), "Deployment", "magnetar-operator")
    return env_of(deployment["spec"]["template"]["spec"]["containers"][0])


def test_operator_reads_the_chart_values_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from magnetar_operator.config import Settings

    env = _operator_env("-f", str(values_file("scaled")))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POD_NAMESPACE", "magnetar")  # a fieldRef in the Deployment
    for name in ("MAGNETAR_ADMIN_URL", "MAGNETAR_BROKER_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env()
    assert settings.manage_broker_pool is True
    assert settings.broker_namespace == "magnetar"
    assert settings.broker_pool_name == "magnetar-broker"
    assert settings.admin_url == "http://magnetar-broker.magnetar.svc:8080"
    assert settings.broker_replicas == 3
    assert settings.broker_image == f"localhost/magnetar:{APP_VERSION}"
    assert settings.image_pull_policy == "Always"
    assert settings.reconcile_interval == 60.0
    assert settings.broker_resources == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    assert settings.broker_config == {
        "metadataUrl": "etcd://magnetar-etcd.magnetar.svc:2379",
        "bindAddress": "0.0.0.0",
        "managedLedgerDefaultEnsembleSize": 5,
        "managedLedgerDefaultWriteQuorum": 3,
        "managedLedgerDefaultAckQuorum": 2,
        "defaultNumberOfNamespaceBundles": 8,
    }
    assert settings.operator_deployment == "magnetar-operator"
    assert settings.pod_security_context == {
        "runAsNonRoot": True,
        "runAsUser": 10000,
        "runAsGroup": 10000,
        "fsGroup": 10000,
        "fsGroupChangePolicy": "OnRootMismatch",
    }


def test_broker_config_values_override_the_chart_defaults() -> None:
    env = _operator_env("--set", "brokers.config.bindAddress=127.0.0.1")
    assert json.loads(env["MAGNETAR_BROKER_CONFIG"])["bindAddress"] == "127.0.0.1"


def test_rendered_configs_use_only_keys_the_servers_know() -> None:
    from magnetar.cli.config_file import KEYS

    docs = render("-f", str(values_file("scaled")))
    broker = json.loads(_operator_env("-f", str(values_file("scaled")))["MAGNETAR_BROKER_CONFIG"])
    assert set(broker) <= set(KEYS["broker"]), set(broker) - set(KEYS["broker"])
    bookie = find(docs, "BookieEnsemble", "magnetar-bookie")["spec"]["config"]
    assert set(bookie) <= set(KEYS["bookie"]), set(bookie) - set(KEYS["bookie"])
    assert all(isinstance(v, str) for v in bookie.values()), "the BookieEnsemble CRD holds config values as strings"
    assert bookie["metadataUrl"] == broker["metadataUrl"] == "etcd://magnetar-etcd.magnetar.svc:2379"


# ----------------------------------------------------------------------------- RBAC
#: The operator's permissions, exactly (see the table in templates/operator-rbac.yaml).
KINDS = ("tenants", "namespaces", "topics", "bookieensembles")
SPARK_KINDS = ("sparkapplications", "scheduledsparkapplications")
OPERATOR_CLUSTER_RULES = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    **{("magnetar.dev", kind): {"list", "watch", "patch"} for kind in KINDS},
    **{("magnetar.dev", f"{kind}/status"): {"patch"} for kind in KINDS},
    ("magnetar.dev", "tenants/finalizers"): {"update"},
    ("magnetar.dev", "bookieensembles/finalizers"): {"update"},
    ("magnetar.dev", "bookieensembles"): {"get", "list", "watch", "patch"},  # a pass re-reads it
    ("", "events"): {"create"},
    ("apps", "statefulsets"): {"get", "create", "patch", "delete"},
    ("", "services"): {"get", "create", "patch", "delete"},
    ("", "configmaps"): {"get", "create", "patch", "delete"},
    ("policy", "poddisruptionbudgets"): {"get", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "delete"},
    # Spark jobs (spark_resources.py, spark_submitter.py, spark_status.py)
    **{("magnetar.dev", kind): {"get", "list", "watch", "patch"} for kind in ("tenants", "namespaces", "topics")},
    ("magnetar.dev", "topics/finalizers"): {"update"},
    ("magnetar.dev", "namespaces/finalizers"): {"update"},
    **{("sparkoperator.k8s.io", k): {"get", "list", "create", "patch", "delete"} for k in SPARK_KINDS},
    **{("sparkoperator.k8s.io", f"{k}/status"): {"patch"} for k in SPARK_KINDS},
    **{("sparkoperator.k8s.io", f"{k}/finalizers"): {"update"} for k in SPARK_KINDS},
    ("batch", "jobs"): {"get", "create", "delete"},
    ("", "pods/log"): {"get"},
}


def _rules(doc: Doc) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in doc["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_operator_cluster_role_is_exactly_the_documented_list() -> None:
    role = find(render(), "ClusterRole", "magnetar-magnetar-operator")
    assert _rules(role) == OPERATOR_CLUSTER_RULES
    assert not any("resourceNames" in rule for rule in role["rules"])


def test_operator_namespaced_role_reads_only_its_own_deployment() -> None:
    role = find(render(), "Role", "magnetar-operator")
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["magnetar-operator"], "verbs": ["get"]}
    ]


def test_no_role_has_wildcards_or_secrets() -> None:
    docs = render("--set", "persistence.keepClaimsOnUninstall=false")
    roles = [d for d in docs if d["kind"] in {"Role", "ClusterRole"}]
    assert len(roles) == 5  # operator ClusterRole + Role, Spark drivers' Role, uninstall and cleanup hook Roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
            assert "secrets" not in rule["resources"], (role["metadata"]["name"], rule)
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), (role["metadata"]["name"], rule)


def test_bindings_name_the_right_service_accounts() -> None:
    docs = render()
    for kind, name in (("ClusterRoleBinding", "magnetar-magnetar-operator"), ("RoleBinding", "magnetar-operator")):
        binding = find(docs, kind, name)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "magnetar-operator", "namespace": "magnetar"}]
    deployment = find(docs, "Deployment", "magnetar-operator")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "magnetar-operator"


# ----------------------------------------------------------------------------- pods
def test_every_pod_runs_as_non_root_with_values_from_the_chart() -> None:
    values = load_yaml(values_file("scaled"))
    docs = render("-f", str(values_file("scaled")), "--set", "persistence.keepClaimsOnUninstall=false")
    seen = []
    for name, spec in pod_specs(docs):
        seen.append(name)
        security = spec["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] == 10000, name
        assert security["fsGroup"] == 10000, name
        assert spec["tolerations"] == values["tolerations"], name
        assert spec["nodeSelector"] == values["nodeSelector"], name
        for container in spec["containers"]:
            assert container["imagePullPolicy"] == "Always", name
            assert container["resources"]["requests"], name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}, name
    assert sorted(seen) == [
        "Deployment/magnetar-operator",
        "Job/magnetar-cleanup",
        "Job/magnetar-uninstall",
        "StatefulSet/magnetar-etcd",
    ]
    bookies = find(docs, "BookieEnsemble", "magnetar-bookie")["spec"]
    assert bookies["imagePullPolicy"] == "Always"
    assert bookies["resources"] == values["bookies"]["resources"]
    assert bookies["podSecurityContext"]["runAsNonRoot"] is True


def test_resources_come_from_values() -> None:
    docs = render("--set", "etcd.resources.limits.memory=3Gi", "--set", "operator.resources.requests.cpu=7m")
    etcd = find(docs, "StatefulSet", "magnetar-etcd")["spec"]["template"]["spec"]["containers"][0]
    operator = find(docs, "Deployment", "magnetar-operator")["spec"]["template"]["spec"]["containers"][0]
    assert etcd["resources"]["limits"]["memory"] == "3Gi"
    assert operator["resources"]["requests"]["cpu"] == "7m"


def test_affinity_from_values_reaches_chart_pods() -> None:
    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["mq"]}]}]
        }
    }
    docs = render("--set-json", "affinity=" + json.dumps({"nodeAffinity": node_affinity}))
    for name, spec in pod_specs(docs):
        assert spec["affinity"]["nodeAffinity"] == node_affinity, name
    etcd = find(docs, "StatefulSet", "magnetar-etcd")["spec"]["template"]["spec"]
    assert "podAntiAffinity" in etcd["affinity"], "etcd keeps its anti-affinity next to the user's node affinity"


# ----------------------------------------------------------------------------- etcd
def _etcd_args(*extra: str) -> list[str]:
    sts = find(render(*extra), "StatefulSet", "magnetar-etcd")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["etcd"]
    return list(container["args"])


def test_etcd_three_members_name_each_other_by_stable_dns_names() -> None:
    args = _etcd_args("-f", str(values_file("scaled")))
    domain = "magnetar-etcd-headless.magnetar.svc.cluster.local"
    members = ",".join(f"magnetar-etcd-{i}=http://magnetar-etcd-{i}.{domain}:2380" for i in range(3))
    assert f"--initial-cluster={members}" in args
    assert f"--initial-advertise-peer-urls=http://$(POD_NAME).{domain}:2380" in args
    assert "--data-dir=/data/etcd" in args


def test_etcd_single_member() -> None:
    args = _etcd_args()
    domain = "magnetar-etcd-headless.magnetar.svc.cluster.local"
    assert f"--initial-cluster=magnetar-etcd-0=http://magnetar-etcd-0.{domain}:2380" in args


def test_etcd_volume_probes_and_services() -> None:
    docs = render("-f", str(values_file("scaled")))
    sts = find(docs, "StatefulSet", "magnetar-etcd")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "magnetar-etcd-headless"
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "fast-ssd" and claim["resources"]["requests"]["storage"] == "2Gi"
    container = sts["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "client"}
    assert find(docs, "Service", "magnetar-etcd-headless")["spec"]["clusterIP"] == "None"
    assert find(docs, "Service", "magnetar-etcd")["spec"]["ports"][0]["port"] == 2379
    pdb = find(docs, "PodDisruptionBudget", "magnetar-etcd")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["apiVersion"] == "policy/v1"  # helm template knows policy/v1; the 1.20 test sees v1beta1


# ----------------------------------------------------------------------------- names and hooks
@pytest.mark.parametrize(
    ("release", "fullname"),
    [("magnetar", "magnetar"), ("magnetar-prod", "magnetar-prod"), ("prod", "prod-magnetar")],
)
def test_fullname_is_the_release_name_when_it_says_magnetar(release: str, fullname: str) -> None:
    docs = render(release=release)
    assert find(docs, "StatefulSet", f"{fullname}-etcd")
    assert find(docs, "BookieEnsemble", f"{fullname}-bookie")
    env = env_of(find(docs, "Deployment", f"{fullname}-operator")["spec"]["template"]["spec"]["containers"][0])
    assert env["MAGNETAR_BROKER_POOL_NAME"] == f"{fullname}-broker"
    assert env["MAGNETAR_OPERATOR_DEPLOYMENT"] == f"{fullname}-operator"


def test_every_object_carries_the_standard_labels() -> None:
    docs = render("-f", str(values_file("monitoring")))
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "magnetar", doc["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == "magnetar"
        assert labels["app.kubernetes.io/version"] == APP_VERSION
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"magnetar-{APP_VERSION}"
        assert labels["app.kubernetes.io/component"]


def _hooks(docs: list[Doc]) -> dict[str, str]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["metadata"]["annotations"]["helm.sh/hook"]
        for d in docs
        if "helm.sh/hook" in (d["metadata"].get("annotations") or {})
    }


def test_claims_are_kept_by_default_and_deleted_by_a_post_delete_job_when_asked() -> None:
    kept = _hooks(render())
    assert set(kept.values()) == {"pre-delete"}, kept
    deleted = render("--set", "persistence.keepClaimsOnUninstall=false")
    hooks = _hooks(deleted)
    post = {name for name, when in hooks.items() if when == "post-delete"}
    assert post == {
        "ServiceAccount/magnetar-cleanup",
        "Role/magnetar-cleanup",
        "RoleBinding/magnetar-cleanup",
        "Job/magnetar-cleanup",
    }
    role = find(deleted, "Role", "magnetar-cleanup")
    assert _rules(role) == {("", "persistentvolumeclaims"): {"list", "delete"}}
    job = find(deleted, "Job", "magnetar-cleanup")
    selectors = env_of(job["spec"]["template"]["spec"]["containers"][0])["CLAIM_SELECTORS"].split(";")
    assert selectors == [
        "app.kubernetes.io/name=magnetar,app.kubernetes.io/instance=magnetar,app.kubernetes.io/component=etcd",
        "app.kubernetes.io/component=bookie,magnetar.dev/bookie-ensemble=magnetar-bookie",
    ]


def test_hook_objects_never_outlive_their_hook() -> None:
    docs = render("--set", "persistence.keepClaimsOnUninstall=false")
    for doc in docs:
        annotations = doc["metadata"].get("annotations") or {}
        if "helm.sh/hook" in annotations:
            policy = set(annotations["helm.sh/hook-delete-policy"].split(","))
            assert policy == {"before-hook-creation", "hook-succeeded", "hook-failed"}, doc["metadata"]["name"]


def test_pre_delete_job_may_touch_only_the_charts_bookie_ensemble() -> None:
    role = find(render(), "Role", "magnetar-uninstall")
    assert role["rules"] == [
        {
            "apiGroups": ["magnetar.dev"],
            "resources": ["bookieensembles"],
            "resourceNames": ["magnetar-bookie"],
            "verbs": ["get", "delete", "patch"],
        }
    ]


def test_service_monitors_only_when_enabled() -> None:
    assert not [d for d in render() if d["kind"] == "ServiceMonitor"]
    docs = render("-f", str(values_file("monitoring")))
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    assert sorted(monitors) == ["magnetar-bookie", "magnetar-broker", "magnetar-etcd"]
    for monitor in monitors.values():
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        assert monitor["spec"]["endpoints"][0]["interval"] == "15s"
    broker = monitors["magnetar-broker"]["spec"]["selector"]["matchLabels"]
    assert broker == {"app.kubernetes.io/component": "broker", "magnetar.dev/broker-set": "magnetar-broker"}
