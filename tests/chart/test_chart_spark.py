"""The chart's Spark values: they reach the operator (MAGNETAR_SPARK_*), the drivers' service
account and Role exist where the applications run, and bad values are refused by the schema."""

from __future__ import annotations

import json

import pytest
from tests.chart.chart import APP_VERSION, env_of, find, render


def _operator_env(*extra: str) -> dict[str, str]:
    deployment = find(render(*extra), "Deployment", "magnetar-operator")
    return env_of(deployment["spec"]["template"]["spec"]["containers"][0])


def test_spark_values_reach_the_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from magnetar_operator.spark_config import SparkSettings

    volume = {"name": "exports", "persistentVolumeClaim": {"claimName": "exports"}}
    env = _operator_env(
        "--set", "spark.submitter=operator",
        "--set", "spark.driver.memory=1g",
        "--set", "spark.executor.cores=2",
        "--set-json", f"spark.volumes=[{json.dumps(volume)}]",
        "--set-json", 'spark.volumeMounts=[{"name": "exports", "mountPath": "/exports"}]',
        "--set", "spark.pollInterval=5",
    )  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spark = SparkSettings.from_env()
    assert spark.submitter == "operator" and not spark.job_mode
    assert spark.image == f"localhost/magnetar-spark:{APP_VERSION}"
    assert spark.service_account == "magnetar-spark"
    assert spark.driver == {"cores": 1, "coreRequest": "100m", "memory": "1g"}
    assert spark.executor == {"cores": 2, "coreRequest": "100m", "memory": "512m"}
    assert spark.volumes == [volume] and spark.volume_mounts == [{"name": "exports", "mountPath": "/exports"}]
    assert spark.poll_interval == 5.0


def test_spark_image_tag_follows_the_magnetar_tag_unless_set() -> None:
    assert _operator_env("--set", "image.tag=X")["MAGNETAR_SPARK_IMAGE"] == "localhost/magnetar-spark:X"
    env = _operator_env("--set", "image.tag=X", "--set", "spark.image.tag=Y")
    assert env["MAGNETAR_SPARK_IMAGE"] == "localhost/magnetar-spark:Y"
    assert _operator_env()["MAGNETAR_SPARK_SUBMITTER"] == "job"


def test_driver_service_account_and_role_in_every_job_namespace() -> None:
    docs = render("--set", "spark.jobNamespaces={shop,magnetar,billing}")
    spark = [d for d in docs if d["metadata"]["name"] == "magnetar-spark"]
    places = sorted((d["kind"], d["metadata"]["namespace"]) for d in spark)
    assert places == sorted(
        (k, ns) for k in ("ServiceAccount", "Role", "RoleBinding") for ns in ("magnetar", "shop", "billing")
    )
    for role in (d for d in spark if d["kind"] == "Role"):
        assert role["rules"] == [
            {
                "apiGroups": [""],
                "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
                "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"],
            }
        ]
    for binding in (d for d in spark if d["kind"] == "RoleBinding"):
        ns = binding["metadata"]["namespace"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "magnetar-spark", "namespace": ns}]
    named = render("--set", "spark.serviceAccount=drivers")
    assert find(named, "ServiceAccount", "drivers")["metadata"]["namespace"] == "magnetar"
