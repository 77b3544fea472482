"""The broker pool as the load manager needs it: brokers.autoscaling (a HorizontalPodAutoscaler the
operator does not fight), the pre-stop drain of every broker pod, and brokers.loadBalancer.

Renders need helm only; the tests marked k8s also use the chart tests' real Kubernetes 1.20 API
server (it must accept the autoscaler, and the operator's pool loop must leave the size alone).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.chart.chart import CHART, Doc, env_of, find, helm, load_yaml, render, template_args
from tests.operator.harness import ControlPlane, wait_for

from magnetar.broker.loadbalance.settings import keys

AUTOSCALING = ("--set", "brokers.autoscaling.enabled=true")


def _operator_env(*extra: str) -> dict[str, str]:
    deployment = find(render(*extra), "Deployment", "magnetar-operator")
    return env_of(deployment["spec"]["template"]["spec"]["containers"][0])


def _settings(monkeypatch: pytest.MonkeyPatch, *extra: str) -> Any:
    """The operator's Settings as the chart's environment gives them."""
    from magnetar_operator.config import Settings

    for name, value in _operator_env(*extra).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POD_NAMESPACE", "magnetar")
    for name in ("MAGNETAR_ADMIN_URL", "MAGNETAR_BROKER_NAMESPACE", "MAGNETAR_BROKER_AUTOSCALING"):
        if name not in _operator_env(*extra):
            monkeypatch.delenv(name, raising=False)
    return Settings.from_env()


def _hpas(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]


# ----------------------------------------------------------------------------- autoscaling
def test_no_autoscaler_by_default_and_the_operator_sizes_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _hpas(render()) == []
    settings = _settings(monkeypatch)
    assert settings.broker_autoscaling is False
    assert settings.broker_replicas == 2


def test_autoscaler_targets_the_operators_broker_statefulset(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(*AUTOSCALING, "--set", "brokers.autoscaling.maxReplicas=4")
    (hpa,) = _hpas(docs)
    assert hpa["apiVersion"] == "autoscaling/v2beta2", "Kubernetes 1.20 serves v2beta2, not v2"
    pool = _operator_env(*AUTOSCALING)["MAGNETAR_BROKER_POOL_NAME"]
    assert hpa["metadata"]["name"] == pool == "magnetar-broker"
    assert hpa["metadata"]["labels"]["app.kubernetes.io/component"] == "broker"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": pool}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 4)
    assert spec["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
    ]
    assert "behavior" not in spec
    settings = _settings(monkeypatch, *AUTOSCALING)
    assert settings.broker_autoscaling is True


def test_autoscaler_is_autoscaling_v2_where_served_and_passes_behavior_through(tmp_path: Path) -> None:
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": 600,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
        }
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"brokers": {"autoscaling": {"enabled": True, "behavior": behavior}}}))
    (hpa,) = _hpas(render("-f", str(values), "--api-versions", "autoscaling/v2/HorizontalPodAutoscaler"))
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["behavior"] == behavior


REFUSED = [
    pytest.param(["brokers.replicas=7"], "brokers.replicas (7) pins the pool", id="replicas-above-max"),
    pytest.param(["brokers.autoscaling.minReplicas=3"], "brokers.replicas (2) pins the pool", id="replicas-below-min"),
    pytest.param(
        ["brokers.autoscaling.minReplicas=5", "brokers.autoscaling.maxReplicas=3", "brokers.replicas=4"],
        "minReplicas (5) must not exceed brokers.autoscaling.maxReplicas (3)",
        id="min-above-max",
    ),
    pytest.param(["brokers.resources.requests.cpu=null"], "brokers.resources.requests.cpu", id="no-cpu-request"),
    pytest.param(["operator.replicas=0"], "needs the operator", id="no-operator"),
    pytest.param(["brokers.autoscaling.targetCPUUtilizationPercentage=0"], "targetCPUUtilizationPercentage", id="0%"),
    pytest.param(["brokers.autoscaling.maxReplicas=65"], "/brokers/autoscaling/maxReplicas", id="max-too-high"),
    pytest.param(["brokers.autoscaling.enabled=yes"], "/brokers/autoscaling/enabled", id="not-a-boolean"),
]


@pytest.mark.parametrize(("sets", "message"), REFUSED)
def test_autoscaling_that_cannot_scale_the_pool_is_refused_saying_why(sets: list[str], message: str) -> None:
    args = template_args(*AUTOSCALING, *(arg for s in sets for arg in ("--set", s)))
    proc = helm(*args, check=False)
    assert proc.returncode != 0, f"helm accepted {sets}"
    assert message in proc.stderr, proc.stderr


def test_replicas_are_not_checked_against_the_range_while_autoscaling_is_off() -> None:
    assert _hpas(render("--set", "brokers.replicas=9", "--set", "brokers.autoscaling.maxReplicas=3")) == []


# ----------------------------------------------------------------------------- pre-stop drain
def test_every_broker_pod_drains_before_it_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    from magnetar_operator import broker_pool, brokers

    settings = _settings(monkeypatch, "--set", "brokers.terminationGracePeriodSeconds=300")
    assert settings.broker_termination_grace == 300
    sts = find(
        broker_pool.pool_children(settings, pdb_api_version="policy/v1", owner=None), "StatefulSet", "magnetar-broker"
    )
    pod = sts["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300
    (container,) = pod["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [
        "magnetar-admin",
        "--admin-url",
        f"http://127.0.0.1:{brokers.HTTP_PORT}",
        "brokers",
        "shutdown",
    ]
    isolated = brokers.build_broker_statefulset(replace(broker_pool.pool_set(settings), isolated_tenant="acme"))
    assert isolated["spec"]["template"]["spec"]["containers"][0]["lifecycle"] == container["lifecycle"]


def test_the_drain_sends_the_brokers_token_when_auth_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from magnetar_operator import broker_pool, identity

    settings = _settings(monkeypatch, "--set", "auth.enabled=true")
    sts = find(
        broker_pool.pool_children(settings, pdb_api_version="policy/v1", owner=None), "StatefulSet", "magnetar-broker"
    )
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    token_file = f"{identity.TOKEN_DIR}/{identity.TOKEN_KEY}"
    assert command[3:5] == ["--auth-params", f"file://{token_file}"]
    assert any(m["mountPath"] == identity.TOKEN_DIR for m in container["volumeMounts"]), "the token is mounted"


def test_default_grace_period_leaves_room_for_the_drain() -> None:
    values = load_yaml(CHART / "values.yaml")
    assert values["brokers"]["terminationGracePeriodSeconds"] == 120
    assert _operator_env()["MAGNETAR_BROKER_TERMINATION_GRACE_SECONDS"] == "120"


# ----------------------------------------------------------------------------- load-balancer settings
def test_load_balancer_values_reach_the_broker_config_and_brokers_config_wins() -> None:
    env = _operator_env(
        "--set",
        "brokers.loadBalancer.loadBalancerSheddingIntervalMinutes=0.05",
        "--set",
        "brokers.loadBalancer.loadBalancerBrokerThresholdShedderPercentage=5",
        "--set",
        "brokers.config.loadBalancerBrokerThresholdShedderPercentage=20",
    )
    config = json.loads(env["MAGNETAR_BROKER_CONFIG"])
    assert float(config["loadBalancerSheddingIntervalMinutes"]) == 0.05
    assert config["loadBalancerBrokerThresholdShedderPercentage"] == 20
    assert config["bindAddress"] == "0.0.0.0", "the chart's own settings stay"


def test_load_balancer_keys_are_exactly_the_brokers_settings() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    lb = schema["properties"]["brokers"]["properties"]["loadBalancer"]
    assert set(lb["propertyNames"]["enum"]) == set(keys())


def test_a_misspelt_load_balancer_key_is_refused_naming_it() -> None:
    proc = helm(*template_args("--set", "brokers.loadBalancer.loadBalancerShedingEnabled=false"), check=False)
    assert proc.returncode != 0
    assert "loadBalancerShedingEnabled" in proc.stderr


# ----------------------------------------------------------------------------- on the API server
def _kube(cp: ControlPlane) -> Any:
    from kubernetes import config as k8s_config

    from magnetar_operator.kube import Kube

    return Kube(k8s_config.new_client_from_config(config_file=str(cp.kubeconfig)))  # type: ignore[no-untyped-call]


@pytest.mark.k8s
def test_api_server_accepts_the_autoscaler(control_plane: ControlPlane) -> None:
    docs = render(*AUTOSCALING, "--set", "brokers.autoscaling.behavior.scaleDown.stabilizationWindowSeconds=60")
    (hpa,) = _hpas(docs)
    control_plane.kubectl("create", "namespace", "magnetar", check=False)
    out = control_plane.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(hpa))
    assert json.loads(out)["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 60


@pytest.mark.k8s
@pytest.mark.parametrize("autoscaled", [True, False], ids=["autoscaled", "fixed"])
def test_the_pool_loop_leaves_the_autoscalers_size_alone(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, autoscaled: bool
) -> None:
    from magnetar_operator import broker_pool

    namespace = f"pool-{'hpa' if autoscaled else 'fixed'}"
    control_plane.kubectl("create", "namespace", namespace)
    settings = replace(
        _settings(monkeypatch, *(AUTOSCALING if autoscaled else ())),
        broker_namespace=namespace,
        operator_deployment="",
    )
    kube = _kube(control_plane)
    broker_pool.apply_pool(kube, settings)
    sts = control_plane.get("statefulset", "magnetar-broker", namespace)
    assert sts is not None and sts["spec"]["replicas"] == 2, "created at brokers.replicas"
    # What the autoscaler does: write the scale subresource.
    control_plane.kubectl("-n", namespace, "scale", "statefulset/magnetar-broker", "--replicas=4")
    changes = broker_pool.apply_pool(kube, settings)
    replicas = wait_for("the StatefulSet", lambda: control_plane.get("statefulset", "magnetar-broker", namespace))
    if autoscaled:
        assert replicas["spec"]["replicas"] == 4 and changes == [], changes
    else:
        assert replicas["spec"]["replicas"] == 2 and changes == ["StatefulSet/magnetar-broker updated"], changes
